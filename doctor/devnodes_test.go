package doctor

import (
	"context"
	"strings"
	"testing"
	"time"
)

// madFiles are /sys/class/infiniband_mad's entries for the fixture's
// InfiniBand port mlx4_0/1 and RoCE port mlx5_0/1, as ib_umad makes them
// (Documentation/ABI/stable/sysfs-class-infiniband: umadN and issmN, each
// with ibdev and port, and abi_version).
var madFiles = map[string]string{
	"sys/class/infiniband_mad/abi_version": "5",
	"sys/class/infiniband_mad/umad0/ibdev": "mlx5_0", "sys/class/infiniband_mad/umad0/port": "1",
	"sys/class/infiniband_mad/issm0/ibdev": "mlx5_0", "sys/class/infiniband_mad/issm0/port": "1",
	"sys/class/infiniband_mad/umad1/ibdev": "mlx4_0", "sys/class/infiniband_mad/umad1/port": "1",
	"sys/class/infiniband_mad/issm1/ibdev": "mlx4_0", "sys/class/infiniband_mad/issm1/port": "1",
}

func merge(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

func TestDeviceNodeChecks(t *testing.T) {
	for _, tt := range []struct {
		name    string
		check   func(*Env) Result
		files   map[string]string
		nodes   []string
		verdict string
		message string
		fix     string
	}{
		{"ib_umad not loaded", checkUmad, nil, nil, Fail, "mlx4_0/1 has no umad device (no entry in /sys/class/infiniband_mad)", "modprobe ib_umad"},
		{"umad node missing", checkUmad, madFiles, []string{"issm1"}, Fail, "mlx4_0/1: /dev/infiniband/umad1 is missing although the kernel has it", "udevadm trigger --subsystem-match=infiniband_mad"},
		{"issm node missing", checkUmad, madFiles, []string{"umad1"}, Fail, "mlx4_0/1: /dev/infiniband/issm1 is missing", "pass /dev/infiniband through"},
		{"umad and issm present", checkUmad, madFiles, []string{"umad1", "issm1"}, OK, "mlx4_0/1: /dev/infiniband/umad1, /dev/infiniband/issm1", ""},
		{"RoCE only", checkUmad, map[string]string{"sys/class/infiniband/mlx4_0": ""}, nil, Skip, "no InfiniBand ports", ""},

		{"rdma_ucm not loaded", checkRDMACM, nil, nil, Fail, "no rdma_cm device (no /sys/class/misc/rdma_cm)", "modprobe rdma_ucm"},
		{"rdma_cm node missing", checkRDMACM, map[string]string{"sys/class/misc/rdma_cm/dev": "10:58"}, nil, Fail, "/dev/infiniband/rdma_cm is missing", "udevadm trigger --subsystem-match=misc"},
		{"rdma_cm present", checkRDMACM, map[string]string{"sys/class/misc/rdma_cm/dev": "10:58"}, []string{"rdma_cm"}, OK, "/dev/infiniband/rdma_cm", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.check(&Env{SysRoot: tree(t, tt.files), DevRoot: devRoot(t, tt.nodes...)})
			if r.Verdict != tt.verdict || !strings.Contains(r.Message, tt.message) || !strings.Contains(r.Fix, tt.fix) {
				t.Errorf("got %+v\nwant %s, message with %q, fix with %q", r, tt.verdict, tt.message, tt.fix)
			}
		})
	}
}

// noSM is the fixture's InfiniBand port as it reads on a subnet without a
// subnet manager: the link is up, nobody assigned a LID or activated it.
var noSM = map[string]string{
	"sys/class/infiniband/mlx4_0/ports/1/state":  "2: INIT",
	"sys/class/infiniband/mlx4_0/ports/1/lid":    "0x0",
	"sys/class/infiniband/mlx4_0/ports/1/sm_lid": "0x0",
}

func TestCheckSM(t *testing.T) {
	for _, tt := range []struct {
		name    string
		files   map[string]string
		later   map[string]string
		verdict string
		message string
		fix     string
	}{
		{"no subnet manager", noSM, nil, Fail, "mlx4_0/1 (ib0): no subnet manager: state INIT, LID 0x0, SM LID 0x0", "systemctl enable --now opensm"},
		{"INIT with a stale SM LID", map[string]string{"sys/class/infiniband/mlx4_0/ports/1/state": "2: INIT"}, nil,
			Fail, "mlx4_0/1 (ib0): no subnet manager: state INIT, LID 0x1a, SM LID 0x1", "switch's `ib sm`"},
		{"subnet manager", nil, nil, OK, "mlx4_0/1 (ib0): ACTIVE, LID 0x1a, subnet manager at LID 0x1", ""},
		{"link down is the ports check's", merge(noSM, map[string]string{"sys/class/infiniband/mlx4_0/ports/1/phys_state": "2: Polling"}), nil,
			Skip, "mlx4_0/1 (ib0): link Polling", ""},
		{"subnet manager moved", nil, map[string]string{"sys/class/infiniband/mlx4_0/ports/1/sm_lid": "0x5"},
			Warn, "mlx4_0/1 (ib0): the subnet manager moved from LID 0x1 to 0x5 within 1s", "sminfo"},
		{"RoCE only", map[string]string{"sys/class/infiniband/mlx4_0": ""}, nil, Skip, "no InfiniBand ports", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			root := tree(t, tt.files)
			e := &Env{SysRoot: root}
			if tt.later != nil {
				e.Interval = time.Second
				e.Wait = func(context.Context, time.Duration) error { write(t, root, tt.later); return nil }
			}
			r := checkSM(e)
			if r.Verdict != tt.verdict || !strings.Contains(r.Message, tt.message) || !strings.Contains(r.Fix, tt.fix) {
				t.Errorf("got %+v\nwant %s, message with %q, fix with %q", r, tt.verdict, tt.message, tt.fix)
			}
		})
	}
}
