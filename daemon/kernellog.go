package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/kmsg"
)

// kernelLog follows the kernel log for faults of the RDMA devices
// (daemon/kmsg; docs/HEALTH.md, "Kernel faults"): the follower runs in a
// part of its own and posts the faults to the mailbox; the main loop tells
// it the devices and restarts it when [health] changes. Main loop only.
type kernelLog struct {
	d      *Daemon
	f      *kmsg.Follower
	stop   func()
	window time.Duration
	// devices is the device set the follower was last told, as a key, so
	// that an inventory read that changed nothing tells it nothing.
	devices string
}

// apply starts, restarts or stops the follower for cfg. Only a node's own
// sysfs has a kernel log to follow: a fixture tree (tests) has none.
func (k *kernelLog) apply(cfg *config.Config) {
	on := cfg.Health.KernelLog && (k.d.inv.Root == "" || k.d.inv.Root == "/")
	w := cfg.Health.KernelFaultWindow.Duration
	if k.f != nil && on && w == k.window {
		return
	}
	if k.stop != nil {
		k.stop()
		k.stop, k.f = nil, nil
	}
	if !on {
		why := errors.New("[health] kernel_log = false")
		if cfg.Health.KernelLog {
			why = errors.New("the inventory is a fixture tree, not this node's sysfs")
		}
		k.d.setComponent(apitype.ComponentKernelLog, apitype.Disabled, why)
		k.d.store.Update(func(s *apitype.Snapshot) { s.KernelFaults = []apitype.KernelFault{} })
		return
	}
	k.window = w
	k.devices = ""
	d := k.d
	opts, note := kmsgOptions(w, os.Getenv)
	opts.OnChange = d.postKernelFaults
	f := kmsg.New(opts)
	k.f = f
	if note != nil {
		d.log.Warn("kernel log: lines written to /dev/kmsg from userspace count as the kernel's", "why", note)
	}
	// The note stays in the component's error while the follower runs,
	// so that rdmactl status and GET /v1/health show it.
	d.setComponent(apitype.ComponentKernelLog, apitype.OK, note)
	k.stop = d.parts.Start(func(ctx context.Context) {
		if err := f.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			d.log.Warn("kernel log not followed: kernel faults of RDMA devices go unseen", "err", err)
			d.report(apitype.ComponentKernelLog, apitype.Error, err)
		}
	})
	// The follower reads the kernel's buffer at once and matches its
	// records of the window against the first devices it is told: at
	// start those of the first inventory read (refresh), not the empty
	// list before it, which would attribute no fault logged before the
	// restart (docs/HEALTH.md, "The window, restarts and recreated
	// devices"). At a restart of the follower ([health] changed) the
	// inventory was read.
	if s := d.store.Load(); inventoryRead(s) {
		k.setDevices(s.Devices)
	}
}

// postKernelFaults leaves the follower's faults for the main loop, which
// puts them in the snapshot and counts their link downs toward the flap
// rule (non-fatal: no problem alone; docs/HEALTH.md, "Kernel faults").
// Any goroutine (the follower's).
func (d *Daemon) postKernelFaults(faults []apitype.KernelFault) {
	d.mail.post("kernel-faults", func(s *apitype.Snapshot) {
		s.KernelFaults = faults
		d.health.observeKernel(s.Devices, faults, time.Now())
	})
}

// envKmsgUserspace names the test switch that makes lines written to
// /dev/kmsg from userspace count as the kernel's (kmsg.Options.
// TrustUserspace): the VM suite injects faults that way. rdmad.service
// never sets it.
const envKmsgUserspace = "RDMAD_TEST_KMSG_USERSPACE"

// kmsgOptions returns the follower's options for window and the
// environment getenv reads, and a note for the kernel-log component when
// envKmsgUserspace weakens what counts (nil when it does not).
func kmsgOptions(window time.Duration, getenv func(string) string) (kmsg.Options, error) {
	opts := kmsg.Options{Window: window}
	if getenv(envKmsgUserspace) != "1" {
		return opts, nil
	}
	opts.TrustUserspace = true
	return opts, fmt.Errorf("%s=1: lines written to /dev/kmsg from userspace count as the kernel's, so any root process can raise a KernelFault (a test switch: remove it from rdmad's environment)", envKmsgUserspace)
}

// inventoryRead reports whether the daemon has read its device inventory
// (refresh records each read as a component, in error when it failed), so
// that s.Devices is what the node has rather than the empty list before
// the first read.
func inventoryRead(s *apitype.Snapshot) bool {
	c, ok := s.Components[apitype.ComponentInventory]
	return ok && c.State != apitype.Error
}

// setDevices tells the follower the devices of an inventory read.
func (k *kernelLog) setDevices(devs []apitype.Device) {
	if k.f == nil {
		return
	}
	var b strings.Builder
	for _, d := range devs {
		b.WriteString(d.Name + "\x00" + d.Parent)
		for _, p := range d.Ports {
			b.WriteString("\x00" + p.Netdev)
		}
		b.WriteByte('\n')
	}
	if key := b.String(); key != k.devices || k.devices == "" {
		k.devices = key
		k.f.SetDevices(kmsg.DevicesOf(devs))
	}
}

// added drops the faults of devices that are new in next: a recreated
// device's faults were about its previous instance.
func (k *kernelLog) added(prev, next []apitype.Device) {
	if k.f == nil {
		return
	}
	for _, d := range next {
		if !slices.ContainsFunc(prev, func(p apitype.Device) bool { return p.Name == d.Name }) {
			k.f.Forget(d.Name)
		}
	}
}

// close stops the follower (the supervisor's stop would too; Run's
// deferred wait is the one that matters).
func (k *kernelLog) close() {
	if k.stop != nil {
		k.stop()
		k.stop, k.f = nil, nil
	}
}
