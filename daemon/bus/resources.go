package bus

import (
	"context"
	"errors"

	"github.com/rdmad/rdmad/daemon/service"
)

// A processRow is one process of Resources' answer: (pid, comm, kernel,
// qps, cqs, mrs, pds, pinned_bytes).
type processRow struct {
	PID                uint32
	Comm               string
	Kernel             bool
	QPs, CQs, MRs, PDs uint32
	PinnedBytes        uint64
}

// A deviceRow is one device of Resources' answer: (device, qps, cqs, mrs,
// pds, pinned_bytes).
type deviceRow struct {
	Device             string
	QPs, CQs, MRs, PDs uint32
	PinnedBytes        uint64
}

// resources serves Resources() -> (a(usbuuuut) processes, a(suuuut)
// devices, s error): the RDMA objects the kernel tracks, as GET
// /v1/resources reads them; error is the reason the kernel could not be
// read (the lists are then empty), "" otherwise.
func (h *handler) resources(ctx context.Context, _ call) ([]any, error) {
	res, err := service.ReadResources(ctx, h.backend)
	if errors.Is(err, errors.ErrUnsupported) {
		return nil, dbusError(ErrNotSupported, "Resources: this rdmad does not read the kernel's RDMA resources (it runs on a fixture sysfs tree, not this host's); rdmactl resources reads them from the kernel itself")
	}
	if err != nil {
		return nil, dbusError(ErrFailed, "Resources: %v", err)
	}
	procs := make([]processRow, len(res.Processes))
	for i, p := range res.Processes {
		procs[i] = processRow{uint32(p.PID), p.Comm, p.Kernel, uint32(p.QPs), uint32(p.CQs), uint32(p.MRs), uint32(p.PDs), p.PinnedBytes}
	}
	devs := make([]deviceRow, len(res.Devices))
	for i, d := range res.Devices {
		devs[i] = deviceRow{d.Device, uint32(d.QPs), uint32(d.CQs), uint32(d.MRs), uint32(d.PDs), d.PinnedBytes}
	}
	return []any{procs, devs, res.Error}, nil
}
