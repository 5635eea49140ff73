package daemon

import (
	"context"
	"path"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/verbs"
	"github.com/rdmad/rdmad/verbs/loopback"
)

// Device release (issue #14 item 4). Three parts of rdmad hold each RDMA
// device open: the MR pool, the loopback prober and the peer engine. The
// kernel's unregistration of a device whose provider cannot disassociate
// its users (rxe in Linux 6.1, the test bed's kernel) waits until every
// user closed its context, so `rdma link del` takes as long as the slowest part. Whoever
// learns of a removal first says so, and releaseDevice makes every part
// close the device at once:
//
//   - the kernel: the uevent "remove" of the device's uverbs node
//     (subsystem infiniband_verbs), sent before the kernel starts waiting,
//     and of the device itself (infiniband), sent after (events.go);
//   - a part's verbs async event reader: IBV_EVENT_DEVICE_FATAL, which
//     providers that disassociate send on removal (asyncEvent);
//   - a part's own check that its device's uverbs node is gone: the
//     prober's every round, the pool's every Tick (probeResult, the pool's
//     OnDeviceGone), checked against the device list first.

// A goneReport says that a part of rdmad saw device go.
type goneReport struct {
	device, why string
	// verify: the report is a part's own conclusion, not a kernel event
	// nor DEVICE_FATAL; it is acted on only if libibverbs no longer lists
	// the device, so that a late report cannot take away a device that
	// has come back.
	verify bool
}

// reportGone queues r for the main loop without blocking the part's
// goroutine (which may be a device's async event reader, and a close of the
// device waits for that). A full queue drops r: the uevents and each part's
// own checks still release the device.
func (v *verbsParts) reportGone(r goneReport) {
	select {
	case v.gone <- r:
	default:
		v.d.log.Debug("device removal report dropped (queue full)", "device", r.device, "why", r.why)
	}
}

// forwardGone hands each report to the main loop, from a goroutine of its
// own so that no part waits for the main loop.
func (v *verbsParts) forwardGone(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-v.gone:
			select {
			case v.d.reqs <- func() { v.deviceGone(r) }:
			case <-ctx.Done():
				return
			}
		}
	}
}

// deviceGone acts on a part's report on the main loop.
func (v *verbsParts) deviceGone(r goneReport) {
	if r.verify && (v.released[r.device] || deviceListed(r.device)) {
		return
	}
	v.releaseDevice(r.device, r.why)
}

// deviceListed reports whether libibverbs lists name; it lists a device
// only while the device's uverbs node exists.
func deviceListed(name string) bool {
	devs, err := verbs.Devices()
	if err != nil {
		return false
	}
	for _, d := range devs {
		if d.Name == name {
			return true
		}
	}
	return false
}

// releaseDevice makes every part that holds name let it go now: the pool
// deregisters its MRs and closes its PD and context (here, on the main
// loop), the loopback prober and the peer engine close their QPs and
// contexts on their own goroutines within moments. Each part opens the
// device again when it is listed again (the uevents of its return say
// when). Releasing twice is harmless. Runs on the main loop.
func (v *verbsParts) releaseDevice(name, why string) {
	start := time.Now()
	if v.pool != nil {
		v.pool.RemoveDevice(name)
	}
	if v.prober != nil {
		v.prober.ReleaseDevice(name)
	}
	if r := v.d.peers.Load(); r != nil {
		r.eng.ReleaseDevice(name)
	}
	if v.released[name] {
		v.d.log.Debug("device released again", "device", name, "why", why)
	} else {
		v.d.log.Info("device removed: every part let it go", "device", name, "why", why, "took", time.Since(start))
	}
	v.released[name] = true
	v.signal()
}

// probeResult takes a loopback result: the prober finding a device gone is
// news for the other parts too.
func (v *verbsParts) probeResult(res loopback.PortResult) {
	if res.ErrorKind == loopback.KindDeviceGone {
		v.reportGone(goneReport{device: res.Device, why: "loopback prober: " + res.LastError, verify: true})
	}
	v.gate.take(res, time.Now())
}

// uverbsDevice returns the RDMA device whose verbs node is uverbs (a
// uevent's "uverbs0"), or "".
func uverbsDevice(devs []apitype.Device, uverbs string) string {
	for _, d := range devs {
		if d.Uverbs != "" && path.Base(d.Uverbs) == uverbs {
			return d.Name
		}
	}
	return ""
}

// uverbsEvent handles a uevent of a uverbs node. Its removal is the
// kernel's first word that a device goes: the device is released before
// anything else is looked at. Its arrival is when a returning device can
// be opened again (the device's own "add" comes before its uverbs node).
// It returns the device's name, or "" when the node is unknown.
func (d *Daemon) uverbsEvent(action, uverbs string) string {
	name := ""
	if action == "remove" {
		name = uverbsDevice(d.store.Load().Devices, uverbs)
		if name != "" {
			d.verbs.releaseDevice(name, "uevent: "+uverbs+" removed")
		} else if d.verbs.pool != nil {
			// Not in the inventory: the pool's Tick lets go of every
			// device whose node vanished; the prober checks each round.
			d.verbs.pool.Tick()
		}
	}
	d.refresh("uevent " + action + " " + uverbs)
	if name == "" {
		name = uverbsDevice(d.store.Load().Devices, uverbs)
	}
	if action == "add" {
		d.verbs.deviceEvent("add", name)
		d.peersDeviceEvent()
		d.lookAgain()
	}
	return name
}
