package rdmares

import (
	"cmp"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/client/apitype"
)

// Options configure Read.
type Options struct {
	// ProcRoot is procfs, where each process's command name is read
	// (PROC/PID/comm); "" is "/proc".
	ProcRoot string
	// Timeout bounds a Read whose context has no deadline; 0 is
	// DefaultTimeout.
	Timeout time.Duration
}

// Read dumps the QPs, CQs, MRs and PDs of every RDMA device over RDMA
// netlink and counts them per process and per device. A kernel without
// RDMA gives an error wrapping ErrNoRDMA (and unix.EPROTONOSUPPORT).
func Read(ctx context.Context, opts Options) (apitype.Resources, error) {
	if _, ok := ctx.Deadline(); !ok {
		t := opts.Timeout
		if t <= 0 {
			t = DefaultTimeout
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t)
		defer cancel()
	}
	devs, objs, err := readObjects(ctx, dialKernel, (*netlink.Conn).SetDeadline)
	if err != nil {
		return apitype.Resources{}, err
	}
	return Aggregate(devs, objs, procReader(opts.ProcRoot)), nil
}

// readObjects dumps the devices, then each kind's objects per device, over
// one connection from dial. setDeadline sets a connection's deadline
// ((*netlink.Conn).SetDeadline but in tests).
func readObjects(ctx context.Context, dial func() (*netlink.Conn, error), setDeadline func(*netlink.Conn, time.Time) error) ([]Device, []Object, error) {
	nl, err := dial()
	if err != nil {
		return nil, nil, err
	}
	c, err := newConn(ctx, nl, func(t time.Time) error { return setDeadline(nl, t) })
	if err != nil {
		nl.Close()
		return nil, nil, err
	}
	defer c.close()
	devs, err := c.devices(ctx)
	if err != nil {
		return nil, nil, err
	}
	var objs []Object
	kept := devs[:0]
	for _, dev := range devs {
		var gone bool
		for _, k := range Kinds {
			objs, err = c.objects(ctx, k, dev, objs)
			if errors.Is(err, unix.EINVAL) {
				// The kernel no longer knows the index: the device went
				// away since the device dump, which is normal.
				gone = true
				break
			}
			if err != nil {
				return nil, nil, err
			}
		}
		if !gone {
			kept = append(kept, dev)
		}
	}
	if len(kept) < len(devs) {
		objs = slices.DeleteFunc(objs, func(o Object) bool {
			return !slices.ContainsFunc(kept, func(d Device) bool { return d.Index == o.DevIndex })
		})
	}
	return kept, objs, nil
}

// A Proc names the process an object's pid belongs to: the kernel gives
// the id of the thread that created the object (task_pid_vnr of the
// creating task), which in a multi-threaded program (rdmad, MPI ranks with
// progress threads) is a thread of the process, not the process.
type Proc func(pid uint32) (tgid uint32, comm string)

// procReader returns a Proc reading procRoot ("" is "/proc"): the thread
// group (PROC/PID/status Tgid) and the command name (PROC/TGID/comm). A pid
// it cannot read (gone, or hidden by hidepid) stays as it is, unnamed.
func procReader(procRoot string) Proc {
	if procRoot == "" {
		procRoot = "/proc"
	}
	return func(pid uint32) (uint32, string) {
		tgid := readTgid(procRoot, pid)
		if tgid == 0 {
			tgid = pid
		}
		return tgid, readComm(procRoot, tgid)
	}
}

// readTgid returns the Tgid line of PROC/PID/status, 0 when unreadable.
func readTgid(procRoot string, pid uint32) uint32 {
	b, err := os.ReadFile(filepath.Join(procRoot, strconv.FormatUint(uint64(pid), 10), "status"))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Tgid:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32)
			if err != nil {
				return 0
			}
			return uint32(n)
		}
	}
	return 0
}

// readComm returns PROC/PID/comm, printable; "" when unreadable.
func readComm(procRoot string, pid uint32) string {
	b, err := os.ReadFile(filepath.Join(procRoot, strconv.FormatUint(uint64(pid), 10), "comm"))
	if err != nil {
		return ""
	}
	s := strings.TrimSuffix(string(b), "\n")
	if len(s) > maxString {
		s = s[:maxString]
	}
	return Printable(s)
}

// owner identifies a process or a kernel owner.
type owner struct {
	pid  uint32
	kern string
}

// Aggregate counts objs per owner and per device of devs. proc maps the
// kernel's pid (a thread's) to its process and names it; nil keeps the
// kernel's pids, unnamed. Processes come most pinned bytes first (then
// most objects, then by pid and name); devices by name.
func Aggregate(devs []Device, objs []Object, proc Proc) apitype.Resources {
	res := apitype.Resources{ReadAt: time.Now()}
	byDev := map[uint32]*apitype.DeviceResources{}
	for _, d := range devs {
		res.Devices = append(res.Devices, apitype.DeviceResources{Device: d.Name, Tracked: d.Tracked})
	}
	for i := range res.Devices {
		byDev[devs[i].Index] = &res.Devices[i]
	}
	type named struct {
		tgid uint32
		comm string
	}
	resolved := map[uint32]named{}
	procs := map[owner]*apitype.ProcessResources{}
	var order []owner
	for _, o := range objs {
		key, comm := owner{pid: o.PID, kern: o.KernName}, o.KernName
		if o.PID != 0 && o.KernName == "" && proc != nil {
			n, ok := resolved[o.PID]
			if !ok {
				n.tgid, n.comm = proc(o.PID)
				resolved[o.PID] = n
			}
			key.pid, comm = n.tgid, n.comm
		}
		p, ok := procs[key]
		if !ok {
			p = &apitype.ProcessResources{PID: int(key.pid), Comm: comm, Kernel: o.KernName != ""}
			procs[key] = p
			order = append(order, key)
		}
		count(&p.ResourceCounts, o)
		if !slices.Contains(p.Devices, o.Device) {
			p.Devices = append(p.Devices, o.Device)
		}
		if d, ok := byDev[o.DevIndex]; ok {
			count(&d.ResourceCounts, o)
		}
	}
	for _, k := range order {
		p := procs[k]
		slices.Sort(p.Devices)
		res.Processes = append(res.Processes, *p)
	}
	slices.SortFunc(res.Processes, compareProcesses)
	slices.SortFunc(res.Devices, func(a, b apitype.DeviceResources) int { return cmp.Compare(a.Device, b.Device) })
	return res
}

func count(c *apitype.ResourceCounts, o Object) {
	switch o.Kind {
	case QP:
		c.QPs++
	case CQ:
		c.CQs++
	case MR:
		c.MRs++
		c.PinnedBytes += o.Length
	case PD:
		c.PDs++
	}
}

func objects(c apitype.ResourceCounts) int { return c.QPs + c.CQs + c.MRs + c.PDs }

func compareProcesses(a, b apitype.ProcessResources) int {
	if c := cmp.Compare(b.PinnedBytes, a.PinnedBytes); c != 0 {
		return c
	}
	if c := cmp.Compare(objects(b.ResourceCounts), objects(a.ResourceCounts)); c != 0 {
		return c
	}
	if c := cmp.Compare(a.PID, b.PID); c != 0 {
		return c
	}
	return cmp.Compare(a.Comm, b.Comm)
}

// FillComms names the processes of res that have a pid and no name, from
// procRoot ("" is "/proc"): a reader whose procfs hides other users'
// processes (rdmad's sandbox) leaves them unnamed, and with the id of the
// thread that created the objects; a caller's view may see them.
// Processes that turn out to be threads of one process are merged.
func FillComms(res *apitype.Resources, procRoot string) {
	proc := procReader(procRoot)
	merged := res.Processes[:0]
	at := map[int]int{} // a named pid -> its index in merged
	for _, p := range res.Processes {
		if p.PID > 0 && !p.Kernel && p.Comm == "" {
			tgid, comm := proc(uint32(p.PID))
			p.PID, p.Comm = int(tgid), comm
		}
		if i, ok := at[p.PID]; ok && p.PID > 0 && !p.Kernel {
			q := &merged[i]
			q.QPs, q.CQs, q.MRs, q.PDs, q.PinnedBytes = q.QPs+p.QPs, q.CQs+p.CQs, q.MRs+p.MRs, q.PDs+p.PDs, q.PinnedBytes+p.PinnedBytes
			for _, d := range p.Devices {
				if !slices.Contains(q.Devices, d) {
					q.Devices = append(q.Devices, d)
				}
			}
			slices.Sort(q.Devices)
			continue
		}
		if p.PID > 0 && !p.Kernel {
			at[p.PID] = len(merged)
		}
		merged = append(merged, p)
	}
	res.Processes = merged
	slices.SortFunc(res.Processes, compareProcesses)
}
