package daemon

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/state"
	"github.com/rdmad/rdmad/verbs"
	"github.com/rdmad/rdmad/verbs/loopback"
	"github.com/rdmad/rdmad/verbs/mrpool"
)

// verbsParts are the parts of rdmad that move data over verbs: the memory
// registration pool and the loopback prober. Each runs in its own
// goroutines and is restarted when its configuration changes. They report
// through results, a signal the main loop turns into a snapshot.
type verbsParts struct {
	d       *Daemon
	results chan struct{} // capacity 1: new probe results or pool state
	// gate paces the loopback results' signals (resultgate.go).
	gate *resultGate
	// devices carries the names of devices whose verbs async events (port
	// active/down, GID change) say "read me again": sysfs sends no uevent
	// for those.
	devices chan string
	// gone carries removals that a part noticed on its own goroutine
	// (DEVICE_FATAL, a vanished uverbs node) towards the main loop, which
	// makes every part let the device go (releaseDevice, release.go).
	gone chan goneReport
	// released are the devices released since they were last seen with a
	// verbs node; owned by the main loop.
	released map[string]bool

	pool       *mrpool.Pool
	poolCfg    config.MRPool
	stopPool   func()
	prober     *loopback.Runner
	probeCfg   config.Probe
	stopProber func()
	// class gives the probe QPs' traffic class per port; the prober asks
	// it before every round, so a reload changes the class without a
	// restart of the prober.
	class *probeClass
}

// newVerbsParts returns d's verbs parts with nothing started.
func newVerbsParts(d *Daemon) *verbsParts {
	v := &verbsParts{d: d, results: make(chan struct{}, 1), devices: make(chan string, 16),
		gone: make(chan goneReport, 16), released: map[string]bool{}}
	v.gate = newResultGate(v.signal)
	return v
}

// startVerbs starts the pool and the prober for the current configuration.
func (d *Daemon) startVerbs() *verbsParts {
	v := newVerbsParts(d)
	v.class = newProbeClass(d.store, d.cfg)
	d.parts.Go(v.forwardGone)
	if _, err := verbs.Devices(); errors.Is(err, verbs.ErrUnavailable) {
		d.setComponent(apitype.ComponentVerbs, apitype.Unavailable, err)
	} else if err != nil {
		d.setComponent(apitype.ComponentVerbs, apitype.Error, err)
	} else {
		d.setComponent(apitype.ComponentVerbs, apitype.OK, nil)
	}
	v.apply(d.cfg)
	return v
}

// asyncEvent forwards a device's verbs async event (from the prober's or
// the pool's reader) to the main loop without blocking; a full queue
// already holds a reason to look again. DEVICE_FATAL also makes every part
// let the device go.
func (v *verbsParts) asyncEvent(ev verbs.AsyncEvent) {
	if ev.Type == verbs.EventDeviceFatal {
		v.reportGone(goneReport{device: ev.Device, why: "verbs async event DEVICE_FATAL"})
	}
	select {
	case v.devices <- ev.Device:
	default:
	}
}

func (v *verbsParts) signal() {
	select {
	case v.results <- struct{}{}:
	default:
	}
}

// apply (re)starts what the configuration changed.
func (v *verbsParts) apply(cfg *config.Config) {
	// The prober picks a new class up at its next round.
	v.class.set(cfg)
	if v.stopPool == nil || !reflect.DeepEqual(v.poolCfg, cfg.MRPool) {
		v.restartPool(cfg.MRPool)
	}
	// Only the loopback keys matter here: [probe] also holds the peer
	// probes' settings, which must not restart the loopback prober.
	if v.stopProber == nil || v.probeCfg.Loopback != cfg.Probe.Loopback || v.probeCfg.LoopbackInterval != cfg.Probe.LoopbackInterval ||
		v.probeCfg.Poll != cfg.Probe.Poll {
		v.restartProber(cfg.Probe)
	}
}

func (v *verbsParts) restartPool(c config.MRPool) {
	if v.stopPool != nil {
		v.stopPool()
		v.stopPool = nil
	}
	v.poolCfg = c
	p, err := mrpool.New(mrpool.Config{Classes: poolClasses(c.Classes), CanaryInterval: c.CanaryInterval.Duration,
		Logger: v.d.log.With("component", "mrpool"), OnAsyncEvent: v.asyncEvent,
		OnDeviceGone: func(dev, reason string) {
			v.reportGone(goneReport{device: dev, why: "mrpool: " + reason, verify: true})
		}})
	if err != nil {
		v.pool = nil
		v.d.setComponent(apitype.ComponentMRPool, apitype.Error, err)
		return
	}
	v.pool = p
	stop := v.d.parts.Start(func(ctx context.Context) {
		if err := p.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			v.d.log.Error("MR pool stopped", "err", err)
			v.d.report(apitype.ComponentMRPool, apitype.Error, err)
		}
	})
	v.stopPool = func() {
		stop()
		p.Close()
	}
	v.addDevices()
}

func (v *verbsParts) restartProber(c config.Probe) {
	if v.stopProber != nil {
		v.stopProber()
		v.stopProber = nil
	}
	v.probeCfg = c
	v.prober = nil
	if !c.Loopback {
		v.d.setComponent(apitype.ComponentLoopback, apitype.Disabled, errors.New("[probe] loopback = false: the loopback probe is switched off"))
		v.stopProber = func() {}
		return
	}
	r, err := loopback.New(loopback.Config{Interval: c.LoopbackInterval.Duration, Poll: loopback.PollMode(c.Poll), OnResult: v.probeResult,
		TrafficClass: v.class.of,
		OnAsyncEvent: v.asyncEvent, Logger: v.d.log.With("component", apitype.ComponentLoopback)})
	if err != nil {
		v.d.setComponent(apitype.ComponentLoopback, apitype.Error, err)
		v.stopProber = func() {}
		return
	}
	v.prober = r
	v.stopProber = v.d.parts.Start(func(ctx context.Context) {
		if err := r.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			v.d.log.Error("loopback probe stopped", "err", err)
			v.d.report(apitype.ComponentLoopback, apitype.Error, err)
		}
	})
}

// addDevices registers the pool on every device of the inventory (AddDevice
// is a no-op for registered ones; the pool re-adds returning devices itself).
func (v *verbsParts) addDevices() {
	if v.pool == nil {
		return
	}
	if _, err := verbs.Devices(); errors.Is(err, verbs.ErrUnavailable) {
		// One clear reason instead of one failure per device.
		v.reportPool(err)
		return
	}
	var errs []error
	for _, dev := range v.d.store.Load().Devices {
		if dev.Uverbs != "" {
			delete(v.released, dev.Name) // back (or never gone)
		}
		if err := v.pool.AddDevice(dev.Name); err != nil {
			errs = append(errs, err)
		}
	}
	v.reportPool(errors.Join(errs...))
	v.signal()
}

func (v *verbsParts) reportPool(err error) {
	switch {
	case err == nil:
		v.d.setComponent(apitype.ComponentMRPool, apitype.OK, nil)
	case errors.Is(err, verbs.ErrUnavailable):
		v.d.setComponent(apitype.ComponentMRPool, apitype.Unavailable, err)
	default:
		v.d.setComponent(apitype.ComponentMRPool, apitype.Error, err)
	}
}

// deviceEvent reacts to an infiniband or infiniband_verbs uevent: a
// removed device must be let go at once by every part (the kernel waits for
// every user to close it), a new one is registered and probed.
func (v *verbsParts) deviceEvent(action, name string) {
	if action == "remove" && name != "" {
		v.releaseDevice(name, "uevent: device removed")
	}
	if v.pool != nil {
		if action == "add" {
			v.addDevices()
		}
		v.pool.Tick()
	}
	if v.prober != nil {
		v.prober.Rescan()
	}
	v.signal()
}

// publish copies the latest probe results and pool state into the snapshot.
func (v *verbsParts) publish() {
	var ports []loopback.PortResult
	unavailable := ""
	if v.prober != nil {
		s := v.prober.Snapshot()
		ports, unavailable = s.Ports, s.Unavailable
	}
	var pools []mrpool.DeviceStats
	if v.pool != nil {
		pools = v.pool.Stats()
	}
	now := time.Now()
	v.d.store.Update(func(s *apitype.Snapshot) {
		s.Loopback = toLoopback(ports)
		s.MRPool = toMRPool(pools)
		if v.prober != nil {
			st, err := apitype.OK, error(nil)
			if unavailable != "" {
				st, err = apitype.Unavailable, errors.New(unavailable)
			} else if failing := failingPorts(ports); failing != "" {
				st, err = apitype.Error, fmt.Errorf("loopback probe failing on %s", failing)
			}
			state.SetComponent(s, apitype.ComponentLoopback, st, err, now)
		}
	})
}

func failingPorts(ps []loopback.PortResult) string {
	s := ""
	for _, p := range ps {
		if p.State == loopback.StateFailed {
			if s != "" {
				s += ", "
			}
			s += fmt.Sprintf("%s/%d (%s: %s)", p.Device, p.Port, p.ErrorKind, p.LastError)
		}
	}
	return s
}

func (v *verbsParts) stop() {
	if v.stopProber != nil {
		v.stopProber()
	}
	if v.stopPool != nil {
		v.stopPool()
	}
	// After the prober: no result comes that could set a new timer.
	v.gate.stop()
}

func toLoopback(ps []loopback.PortResult) []apitype.LoopbackPort {
	out := make([]apitype.LoopbackPort, len(ps))
	op := func(o loopback.OpStats) apitype.OpStats {
		return apitype.OpStats{LastRTT: o.LastRTT, P50: o.P50, P99: o.P99, Max: o.Max, Count: o.Count, Errors: o.Errors, RTTHist: o.RTTHist}
	}
	for i, p := range ps {
		out[i] = apitype.LoopbackPort{Device: p.Device, Port: p.Port, State: string(p.State), PortState: p.PortState,
			GID: p.GID, GIDIndex: p.GIDIndex, GIDType: p.GIDType, TrafficClass: p.TrafficClass, Poll: string(p.Poll), Write: op(p.Write), Read: op(p.Read), Send: op(p.Send), Warmup: op(p.Warmup),
			Rounds: p.Rounds, Failures: p.Failures, QPRecreated: p.QPRecreated, LastError: p.LastError,
			ErrorKind: string(p.ErrorKind), UpdatedAt: p.UpdatedAt}
	}
	return out
}

func toMRPool(ds []mrpool.DeviceStats) []apitype.PoolDevice {
	out := make([]apitype.PoolDevice, len(ds))
	for i, d := range ds {
		cs := make([]apitype.PoolClass, len(d.Classes))
		for j, c := range d.Classes {
			cs[j] = apitype.PoolClass{Size: int64(c.Size), Count: c.Count, InUse: c.InUse, HighWater: c.HighWater, Gets: c.Gets, Exhausted: c.Exhausted}
		}
		out[i] = apitype.PoolDevice{Device: d.Device, Registered: d.Registered, RegisteredBytes: d.RegisteredBytes, InUse: d.InUse,
			InUseBytes: d.InUseBytes, HighWaterBytes: d.HighWaterBytes, Failures: d.Failures, LastError: d.LastError, Classes: cs,
			Canary: apitype.Canary{Registrations: d.Canary.Registrations, Failures: d.Canary.Failures, LastLatency: d.Canary.LastLatency,
				MaxLatency: d.Canary.MaxLatency, LastError: d.Canary.LastError, LastAt: d.Canary.LastAt}}
	}
	return out
}

// poolClasses converts the configuration's size classes to the pool's.
func poolClasses(cs []config.PoolClass) []mrpool.Class {
	out := make([]mrpool.Class, len(cs))
	for i, c := range cs {
		out[i] = mrpool.Class{Size: c.Size, Count: c.Count}
	}
	return out
}
