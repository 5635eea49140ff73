package mrpool

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/rdmad/rdmad/internal/size"
	"github.com/rdmad/rdmad/verbs"
)

// ClassStats is the state of one size class.
type ClassStats struct {
	Size      size.Size `json:"size"`
	Count     int       `json:"count"`
	InUse     int64     `json:"in_use"`
	HighWater int64     `json:"high_water"`
	Gets      uint64    `json:"gets"`
	Exhausted uint64    `json:"exhausted"` // Gets that found the class empty
}

// CanaryStats is what the registration canary saw on a device.
type CanaryStats struct {
	Registrations uint64        `json:"registrations"`
	Failures      uint64        `json:"failures"`
	LastLatency   time.Duration `json:"last_latency_ns"` // ibv_reg_mr + ibv_dereg_mr
	MaxLatency    time.Duration `json:"max_latency_ns"`
	LastError     string        `json:"last_error,omitempty"`
	LastAt        time.Time     `json:"last_at,omitzero"`
}

// DeviceStats is the state of one device's pool.
type DeviceStats struct {
	Device          string       `json:"device"`
	Registered      bool         `json:"registered"`
	RegisteredBytes int64        `json:"registered_bytes"`
	InUse           int64        `json:"in_use"` // buffers held
	InUseBytes      int64        `json:"in_use_bytes"`
	HighWaterBytes  int64        `json:"high_water_bytes"`     // sum of per-class high-water marks
	Failures        uint64       `json:"failures"`             // Gets that returned false
	TooLarge        uint64       `json:"too_large"`            // of those, larger than every class             // Gets that returned false
	LastError       string       `json:"last_error,omitempty"` // of the last AddDevice
	Classes         []ClassStats `json:"classes,omitempty"`
	Canary          CanaryStats  `json:"canary"`
}

type canaryStats struct {
	CanaryStats
	addErr string
}

// Stats returns the state of every wanted device, sorted by name.
func (p *Pool) Stats() []DeviceStats {
	p.mu.Lock()
	names := make([]string, 0, len(p.wanted))
	for n := range p.wanted {
		names = append(names, n)
	}
	slices.Sort(names)
	out := make([]DeviceStats, 0, len(names))
	for _, n := range names {
		s := DeviceStats{Device: n}
		if cs := p.canary[n]; cs != nil {
			s.Canary = cs.CanaryStats
			s.LastError = cs.addErr
		}
		if d := p.Device(n); d != nil {
			s.Registered = true
			s.RegisteredBytes = d.registered
			for _, c := range d.classes {
				cs := ClassStats{Size: c.size, Count: c.count, InUse: c.inUse.Load(), HighWater: c.high.Load(),
					Gets: c.gets.Load(), Exhausted: c.empty.Load()}
				s.Classes = append(s.Classes, cs)
				s.InUse += cs.InUse
				s.InUseBytes += cs.InUse * int64(c.size)
				s.HighWaterBytes += cs.HighWater * int64(c.size)
			}
			s.Failures = d.failures.Load()
			s.TooLarge = d.tooBig.Load()
		}
		out = append(out, s)
	}
	p.mu.Unlock()
	return out
}

func (p *Pool) canaryFor(name string) *canaryStats {
	cs := p.canary[name]
	if cs == nil {
		cs = &canaryStats{}
		p.canary[name] = cs
	}
	return cs
}

// Run owns the pool's background work until ctx is done: every
// CanaryInterval (and once at start) it checks that each device is still
// registered with the kernel (removing it if not, so the kernel's removal
// can finish), re-adds wanted devices that returned, and registers and
// deregisters a canary buffer on each device to time registration and to
// catch memlock or permission trouble before a user of the pool does.
//
// While no device was ever registered and every wanted one failed for want
// of verbs (a kernel without RDMA userspace support, devices without their
// uverbs nodes), a round would only make the same failed calls again: only
// a device event can change that, and the daemon calls Tick on each. Run
// waits eventRetry then, which catches an event that was missed, and the
// canary's interval from the first device registered. A device that was
// registered and went away is tried every interval until it returns, as
// before: that is a fault, and its return is awaited.
func (p *Pool) Run(ctx context.Context) error {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		p.Tick()
		for wait := true; wait; {
			iv := p.cfg.CanaryInterval
			if p.noVerbs.Load() && !p.registered.Load() {
				iv = max(iv, eventRetry)
			}
			t.Reset(iv)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-t.C:
				wait = false
			case <-p.added:
				// Registered (and its canary taken) by AddDevice:
				// the canary's interval from now.
			}
		}
	}
}

// eventRetry is how often Run retries devices when only a device event
// can bring them (see Run).
const eventRetry = 5 * time.Minute

// Tick runs one round of Run's checks now; the daemon calls it after a
// device event instead of waiting for the next interval.
func (p *Pool) Tick() {
	p.mu.Lock()
	names := make([]string, 0, len(p.wanted))
	for n := range p.wanted {
		names = append(names, n)
	}
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return
	}
	// noVerbs: nothing registered, and nothing but a device event can
	// change that (see Run).
	noVerbs := true
	for _, n := range names {
		d := p.Device(n)
		switch {
		case d != nil && !d.vctx.Alive():
			p.gone(d, "its uverbs node is gone")
			noVerbs = false
		case d == nil:
			if err := p.AddDevice(n); err != nil {
				p.mu.Lock()
				p.canaryFor(n).addErr = err.Error()
				p.mu.Unlock()
				if !errors.Is(err, verbs.ErrUnavailable) && !errors.Is(err, verbs.ErrNoDevice) {
					p.cfg.Logger.Warn("mrpool: cannot register buffers", "device", n, "err", err)
					noVerbs = false
				}
				continue
			}
			p.mu.Lock()
			p.canaryFor(n).addErr = ""
			p.mu.Unlock()
			p.canaryOnce(n)
			noVerbs = false
		default:
			p.canaryOnce(n)
			noVerbs = false
		}
	}
	p.noVerbs.Store(noVerbs)
}

// canaryOnce registers and deregisters the canary buffer on name, holding
// p.mu so a concurrent RemoveDevice cannot close the device mid-call.
func (p *Pool) canaryOnce(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	d := p.Device(name)
	if d == nil {
		return
	}
	cs := p.canaryFor(name)
	if p.canaryBuf == nil {
		b, err := verbs.AllocBuffer(int(p.cfg.CanarySize))
		if err != nil {
			cs.Failures++
			cs.LastError = err.Error()
			return
		}
		p.canaryBuf = b
	}
	start := time.Now()
	mr, err := d.pd.RegMR(p.canaryBuf, p.cfg.Access)
	if err == nil {
		err = mr.Close()
	}
	lat := time.Since(start)
	cs.LastAt = time.Now()
	if err != nil {
		cs.Failures++
		cs.LastError = err.Error()
		p.cfg.Logger.Warn("mrpool: registration canary failed", "device", name, "err", err)
		return
	}
	cs.Registrations++
	cs.LastError = ""
	cs.LastLatency = lat
	cs.MaxLatency = max(cs.MaxLatency, lat)
}
