package daemon

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/kmsg"
	"github.com/rdmad/rdmad/daemon/state"
	"github.com/rdmad/rdmad/internal/syncbuf"
)

// TestKmsgOptions: lines written to /dev/kmsg from userspace count only
// with RDMAD_TEST_KMSG_USERSPACE=1, and then the kernel-log component
// carries a note that names the switch and what it lets through.
func TestKmsgOptions(t *testing.T) {
	for _, v := range []string{"", "0", "true", "yes"} {
		opts, note := kmsgOptions(time.Minute, func(k string) string {
			if k == envKmsgUserspace {
				return v
			}
			return ""
		})
		if opts.TrustUserspace || note != nil || opts.Window != time.Minute {
			t.Errorf("%s=%q: options %+v, note %v; want the kernel's lines only, no note", envKmsgUserspace, v, opts, note)
		}
	}
	opts, note := kmsgOptions(time.Minute, func(k string) string {
		if k == envKmsgUserspace {
			return "1"
		}
		return ""
	})
	if !opts.TrustUserspace || note == nil || !strings.Contains(note.Error(), envKmsgUserspace+"=1") ||
		!strings.Contains(note.Error(), "userspace") {
		t.Errorf("%s=1: options %+v, note %v; want userspace trusted and a note naming the switch", envKmsgUserspace, opts, note)
	}
}

// TestInventoryRead: the follower is told the snapshot's devices only
// once an inventory read succeeded, not the empty list before the first
// read (which would leave the faults of the kernel's buffer unattributed
// after a restart), nor after a read that failed.
func TestInventoryRead(t *testing.T) {
	s := &apitype.Snapshot{}
	if inventoryRead(s) {
		t.Error("no inventory read yet: reported read")
	}
	s.Components = map[string]apitype.Component{apitype.ComponentInventory: {State: apitype.Error, Error: "sysfs: EIO"}}
	if inventoryRead(s) {
		t.Error("a failed read: reported read")
	}
	for _, st := range []string{apitype.OK, apitype.Unavailable} {
		s.Components[apitype.ComponentInventory] = apitype.Component{State: st}
		if !inventoryRead(s) {
			t.Errorf("inventory %s: not reported read", st)
		}
	}
}

// TestKernelLinkDownsFlap is #39 item 3 at the daemon: the follower's
// faults, posted as it publishes them, reach the snapshot, and their link
// downs the flap rule of the port whose netdev they name. One driver-format
// "Link down" is no problem (KernelFault ok, non-fatal, shown); three
// within [health] flap_window make PortFlapping a problem of that port and
// log "RDMA port flapping"; a fatal fault of the same device still is a
// KernelFault problem.
func TestKernelLinkDownsFlap(t *testing.T) {
	var logs syncbuf.Buffer
	d := &Daemon{log: slog.New(slog.NewTextHandler(&logs, nil)), mail: newMailbox(),
		store: state.NewStore(apitype.Snapshot{State: apitype.Running})}
	d.health = newHealthPart(d.log)
	// flap_downs 3 in flap_window 10m; the long window (2 in 6h, which
	// two of these downs would reach) is TestFlapRecordRestart's.
	cfg := config.Default()
	cfg.Health.FlapLongDowns = 0
	d.health.configure(cfg)
	d.store.SetFinish(func(prev, next *apitype.Snapshot) { d.health.finish(d, prev, next) })
	now := time.Now()
	devs := []apitype.Device{{Name: "mlx5_0", Parent: "0000:03:00.0", Ports: []apitype.Port{
		{Port: 1, State: "ACTIVE", PhysState: "LinkUp", LinkLayer: "Ethernet", Netdev: "ens1f0np0"}}}}
	d.health.observe(devs, now)
	d.store.Update(func(s *apitype.Snapshot) {
		s.Devices = devs
		state.SetComponent(s, apitype.ComponentInventory, apitype.OK, nil, now)
	})

	// As kmsg publishes the driver's "mlx5_core 0000:03:00.0 ens1f0np0:
	// Link down" (daemon/kmsg TestFollowerLinkDownRecent).
	linkDown := func(times ...time.Time) apitype.KernelFault {
		return apitype.KernelFault{Device: "mlx5_0", Pattern: "link-down", Class: kmsg.ClassOf("link-down"), Netdev: "ens1f0np0",
			Line: "mlx5_core 0000:03:00.0 ens1f0np0: Link down", Priority: 6, First: times[0], Last: times[len(times)-1],
			Count: uint64(len(times)), Recent: times}
	}
	conds := func() (flap, kernel apitype.Condition) {
		t.Helper()
		d.applyMail()
		s := d.store.Load()
		flap, _ = s.Health.Condition(apitype.CondPortFlapping)
		kernel, _ = s.Health.Condition(apitype.CondKernelFault)
		return flap, kernel
	}
	d1, d2, d3 := now.Add(-3*time.Minute), now.Add(-2*time.Minute), now.Add(-time.Minute)
	d.postKernelFaults([]apitype.KernelFault{linkDown(d1)})
	flap, kernel := conds()
	if flap.Status != apitype.ConditionOK || kernel.Status != apitype.ConditionOK || kernel.Reason != "NonFatalOnly" ||
		!strings.Contains(kernel.Message, "mlx5_0 ens1f0np0 (link-down, 1×)") {
		t.Fatalf("one link down: PortFlapping %+v, KernelFault %+v; want both ok, the link down shown", flap, kernel)
	}
	if l := d.store.Load().KernelFaults; len(l) != 1 || l[0].Netdev != "ens1f0np0" {
		t.Errorf("snapshot's kernel faults %+v, want the link down", l)
	}
	d.postKernelFaults([]apitype.KernelFault{linkDown(d1, d2)})
	if flap, _ := conds(); flap.Status != apitype.ConditionOK {
		t.Fatalf("two link downs: PortFlapping %+v, want ok", flap)
	}
	d.postKernelFaults([]apitype.KernelFault{linkDown(d1, d2, d3)})
	flap, kernel = conds()
	if flap.Status != apitype.ConditionProblem || len(flap.Objects) != 1 || flap.Objects[0] != "mlx5_0/1" ||
		!strings.Contains(flap.Message, "the kernel logged 3 link downs of ens1f0np0") || kernel.Status != apitype.ConditionOK {
		t.Fatalf("three link downs in 2 minutes: PortFlapping %+v, KernelFault %+v; want PortFlapping a problem of mlx5_0/1, KernelFault ok", flap, kernel)
	}
	if !strings.Contains(logs.String(), `msg="RDMA port flapping"`) || !strings.Contains(logs.String(), "kernel_link_downs=3") {
		t.Errorf("log %q lacks the flapping warning", logs.String())
	}

	// A fatal fault of the device is a KernelFault problem as before.
	d.postKernelFaults([]apitype.KernelFault{linkDown(d1, d2, d3), {Device: "mlx5_0", Pattern: "mlx5-cmd-timeout",
		Class: kmsg.ClassOf("mlx5-cmd-timeout"), Line: "wait_func:964:(pid 112): ENABLE_HCA(0x104) timeout. Will cause a leak of a command resource", Count: 1}})
	if _, kernel := conds(); kernel.Status != apitype.ConditionProblem || len(kernel.Objects) != 1 || kernel.Objects[0] != "mlx5_0" {
		t.Errorf("a command timeout: KernelFault %+v, want a problem of mlx5_0", kernel)
	}
}
