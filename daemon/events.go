package daemon

import (
	"context"
	"errors"
	"path"
	"reflect"
	"slices"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon/linkwatch"
	"github.com/rdmad/rdmad/daemon/linkwatch/coalesce"
	"github.com/rdmad/rdmad/daemon/uevent"
	"github.com/rdmad/rdmad/policy"
)

// events are the kernel's notifications, each saying "look again at X".
type events struct {
	link   <-chan linkwatch.Event
	uevent <-chan uevent.Event
	lost   <-chan struct{}
}

// linkDebounce is short: a reverted MTU should be back within milliseconds,
// and the coalescing queue still folds a storm into few passes.
const linkDebounce = 2 * time.Millisecond

// startEvents starts the rtnetlink watcher and the uevent reader. A source
// that cannot start is reported as a component error; the periodic resync
// still covers its objects.
func (d *Daemon) startEvents() events {
	lost := make(chan struct{}, 1)
	signalLost := func() {
		select {
		case lost <- struct{}{}:
		default:
		}
	}

	w := linkwatch.New(linkwatch.Options{Debounce: linkDebounce,
		OnError: func(err error) { d.log.Warn("rtnetlink watcher", "err", err) }})
	// OK is recorded before the source runs, so that an error it reports
	// at once is never overwritten by this OK.
	d.setComponent(apitype.ComponentEventsRtnetlink, apitype.OK, nil)
	d.parts.Go(func(ctx context.Context) {
		if err := w.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			d.report(apitype.ComponentEventsRtnetlink, apitype.Error, err)
		}
	})

	uev := make(chan uevent.Event, 64)
	// infiniband_verbs: a device's uverbs node goes first when the device
	// is removed, before the kernel waits for its users (release.go).
	conn, err := uevent.Dial(&uevent.Options{Subsystems: []string{"net", "infiniband", "infiniband_verbs"}})
	if err != nil {
		d.setComponent(apitype.ComponentEventsUevent, apitype.Error, err)
		return events{link: w.Events(), uevent: uev, lost: lost}
	}
	d.setComponent(apitype.ComponentEventsUevent, apitype.OK, nil)
	q := coalesce.New[string, uevent.Event](20*time.Millisecond, 1024)
	d.parts.Go(func(ctx context.Context) {
		defer conn.Close()
		if err := conn.Run(ctx, q); err != nil && !errors.Is(err, context.Canceled) {
			d.report(apitype.ComponentEventsUevent, apitype.Error, err)
		}
	})
	d.parts.Go(func(ctx context.Context) {
		for {
			e, err := q.Next(ctx)
			switch {
			case errors.Is(err, coalesce.ErrDropped):
				signalLost()
				continue
			case err != nil:
				return
			}
			select {
			case uev <- e:
			case <-ctx.Done():
				return
			}
		}
	})
	return events{link: w.Events(), uevent: uev, lost: lost}
}

// onLink handles "look again at netdev X".
func (d *Daemon) onLink(e linkwatch.Event) {
	if e.Kind == linkwatch.KindResync {
		d.refresh("rtnetlink resync")
		d.reconcile(nil)
		return
	}
	if e.Name == "" {
		return
	}
	if d.isPortNetdev(e.Name) {
		// A RoCE port's state follows its netdev's carrier: read it now,
		// so that a port down shows (and counts as a transition for the
		// flap window) without waiting for a verbs event, which needs a
		// running prober. An address event counts too: the queue keeps
		// one event per netdev, and a link going down also drops its
		// IPv6 addresses, whose event then stands for both.
		d.refresh("rtnetlink " + e.Kind.String() + " " + e.Name)
	}
	if e.Kind == linkwatch.KindAddr {
		// RoCE GIDs follow the netdev's addresses, a moment later.
		d.lookAgain()
	}
	d.reconcile(&policy.Scope{Netdevs: map[string]bool{e.Name: true}})
}

// lookAgain schedules one more inventory read shortly: the kernel fills a
// new RDMA device's GID table, and updates it after an address change,
// asynchronously and without a uevent of its own. (With the loopback
// prober running, verbs GID-change events say so as well.)
func (d *Daemon) lookAgain() {
	if d.followUp != nil {
		d.followUp.Reset(time.Second)
	}
}

// onUevent handles a kernel uevent for a netdev, an RDMA device or its
// verbs node (uverbsEvent). An RDMA
// device event reads the inventory again (ports, GIDs and netdevs follow
// the device); a netdev event does so only when the netdev carries an RDMA
// port or was renamed, so that a host churning through container veths
// does not re-read every GID table each time. Then the policies of the
// touched objects are reconciled.
func (d *Daemon) onUevent(e uevent.Event) {
	name := path.Base(e.DevPath)
	d.log.Debug("uevent", "action", e.Action, "subsystem", e.Subsystem, "device", name)
	sc := &policy.Scope{Netdevs: map[string]bool{}, Devices: map[string]bool{}}
	switch e.Subsystem {
	case "infiniband":
		if e.Action == "remove" {
			// Let it go before anything else (release.go).
			d.verbs.deviceEvent(e.Action, name)
		}
		d.refresh("uevent " + e.Action + " " + name)
		sc.Devices[name] = true
		if e.Action != "remove" {
			d.verbs.deviceEvent(e.Action, name)
		}
		d.peersDeviceEvent()
		d.lookAgain()
	case "infiniband_verbs":
		if dev := d.uverbsEvent(e.Action, name); dev != "" {
			sc.Devices[dev] = true
		}
	case "net":
		if ifname := e.Env["INTERFACE"]; ifname != "" {
			name = ifname
		}
		if e.Action == "move" || d.isPortNetdev(name) {
			d.refresh("uevent " + e.Action + " " + name)
		}
		sc.Netdevs[name] = true
	}
	d.reconcile(sc)
}

// isPortNetdev reports whether name is the netdev of an RDMA port in the
// current inventory.
func (d *Daemon) isPortNetdev(name string) bool {
	for _, dev := range d.store.Load().Devices {
		for _, p := range dev.Ports {
			if p.Netdev == name {
				return true
			}
		}
	}
	return false
}

// reconcile runs a policy pass over sc (nil: everything) and publishes the
// result.
func (d *Daemon) reconcile(sc *policy.Scope) []apitype.Change {
	changes, policies := d.rec.Pass(d.declared(), portsOf(d.store.Load().Devices), sc, true)
	over := d.rec.Overridden()
	if cur := d.store.Load().Policy; reflect.DeepEqual(cur.Policies, policies) && slices.Equal(cur.Overridden, over) {
		return changes // nothing new to publish
	}
	d.store.Update(func(s *apitype.Snapshot) {
		s.Policy = apitype.PolicyState{Policies: policies, Overridden: over}
		st := s.State
		if st == apitype.Degraded {
			st = apitype.Running // summarise decides again
		}
		d.summarise(s, st)
	})
	return changes
}

// declared is what the configuration in force asks the reconciler for.
func (d *Daemon) declared() policy.Declared {
	m := d.cfg.Memlock
	return policy.Declared{Rules: d.cfg.Rules(), Memlock: policy.Memlock{Daemon: m.Daemon, Users: m.Users,
		UsersDomain: m.UsersDomain, LimitsFile: m.LimitsFile, ConfigPath: d.opts.ConfigPath}, RDMA: policy.RDMASystem{NetnsMode: d.cfg.RDMA.NetnsMode}}
}

// portsOf lists the RDMA ports of devs, for the reconciler.
func portsOf(devs []apitype.Device) []policy.Port {
	var ps []policy.Port
	for _, d := range devs {
		for _, p := range d.Ports {
			ps = append(ps, policy.Port{Device: d.Name, Port: p.Port, Netdev: p.Netdev})
		}
	}
	return ps
}
