package health

import (
	"strconv"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
)

// Flap defaults ([health] flap_downs, flap_window, flap_quiet; docs/HEALTH.md).
// Three downs in ten minutes: one down is a cable pulled on purpose, two a
// replug, three in ten minutes a link that does not hold (the threshold of
// azurehpc-health-checks' check_ib_link_flapping is of the same order).
const (
	DefaultFlapDowns  = 3
	DefaultFlapWindow = 10 * time.Minute
	DefaultFlapQuiet  = 10 * time.Minute
)

// FlapConfig sets when a port counts as flapping: Downs downs within
// Window raise it; Quiet without a transition clears it.
type FlapConfig struct {
	Downs  int
	Window time.Duration
	Quiet  time.Duration
}

func (c FlapConfig) withDefaults() FlapConfig {
	if c.Downs <= 0 {
		c.Downs = DefaultFlapDowns
	}
	if c.Window <= 0 {
		c.Window = DefaultFlapWindow
	}
	if c.Quiet <= 0 {
		c.Quiet = DefaultFlapQuiet
	}
	return c
}

// FlapState is what the tracker knows of one port.
type FlapState struct {
	// Downs counts the downs within the window; Window is its length.
	Downs  int
	Window time.Duration
	// KernelDowns counts the kernel log's link downs of the port's netdev
	// within the window (ObserveKernel): a second witness, which sees a
	// down and up between two inventory reads. Either count reaching the
	// threshold makes the port flapping; they are not added (most downs
	// are seen by both).
	KernelDowns int
	// Flapping is set once Downs reached the threshold and stays until
	// the port was quiet for the quiet window.
	Flapping bool
	// Transitions counts the changes into and out of ACTIVE since the
	// port was first seen.
	Transitions uint64
	LastChange  time.Time
}

// Flaps counts each port's transitions in a sliding window. Not safe for
// concurrent use: the daemon's main loop owns it. Memory is bounded by the
// ports ever seen (Forget drops gone ones) times the threshold.
type Flaps struct {
	cfg   FlapConfig
	ports map[string]*flapPort
}

type flapPort struct {
	up, flapping bool
	// downs are the times of the last cfg.Downs downs, oldest first.
	downs       []time.Time
	transitions uint64
	last        time.Time
	// kdowns are the times of the last cfg.Downs link downs the kernel
	// logged (ObserveKernel), oldest first; klast is the latest one seen,
	// kept across SetConfig, so that the same messages are not counted
	// again.
	kdowns []time.Time
	klast  time.Time
}

// kernelSlack is how much later than the last kernel link down counted a
// time must be to count as another: a kernel log follower that restarts
// dates the same messages anew, a few microseconds off.
const kernelSlack = 10 * time.Millisecond

// NewFlaps returns a tracker with cfg (zero fields take the defaults).
func NewFlaps(cfg FlapConfig) *Flaps {
	return &Flaps{cfg: cfg.withDefaults(), ports: map[string]*flapPort{}}
}

// SetConfig changes the thresholds (a reload). New thresholds count anew:
// downs and flapping judged by the old ones are dropped (the transition
// counts and each port's state stay), so that a port is never flapping by
// rules that were not in force when it went down.
func (f *Flaps) SetConfig(cfg FlapConfig) {
	cfg = cfg.withDefaults()
	if cfg == f.cfg {
		return
	}
	f.cfg = cfg
	for _, p := range f.ports {
		p.downs, p.kdowns, p.flapping = nil, nil, false
	}
}

// Observe records that port key is up (ACTIVE) or not at now, and reports
// whether that is a transition. The first observation of a port is its
// baseline, no transition.
func (f *Flaps) Observe(key string, up bool, now time.Time) bool {
	p, ok := f.ports[key]
	if !ok {
		f.ports[key] = &flapPort{up: up, last: now}
		return false
	}
	if p.up == up {
		return false
	}
	p.up, p.last = up, now
	p.transitions++
	if !up {
		if len(p.downs) >= f.cfg.Downs {
			copy(p.downs, p.downs[1:])
			p.downs = p.downs[:f.cfg.Downs-1]
		}
		p.downs = append(p.downs, now)
		if len(p.downs) >= f.cfg.Downs && now.Sub(p.downs[0]) <= f.cfg.Window {
			p.flapping = true
		}
	}
	return true
}

// ObserveKernel records the times (oldest first) of the kernel log's link
// downs of port key's netdev: the last ones of a kmsg link-down fault
// (apitype.KernelFault.Recent), given again with every publication of the
// faults. Times later than the last one counted are new downs; cfg.Downs
// of them within the window make the port flapping, as transitions do.
// A port not tracked (never observed) is left alone. It reports whether
// it counted a new down.
func (f *Flaps) ObserveKernel(key string, times []time.Time) bool {
	p, ok := f.ports[key]
	if !ok {
		return false
	}
	counted := false
	for _, t := range times {
		if !p.klast.IsZero() && !t.After(p.klast.Add(kernelSlack)) {
			continue
		}
		p.klast, counted = t, true
		if len(p.kdowns) >= f.cfg.Downs {
			copy(p.kdowns, p.kdowns[1:])
			p.kdowns = p.kdowns[:f.cfg.Downs-1]
		}
		p.kdowns = append(p.kdowns, t)
		if len(p.kdowns) >= f.cfg.Downs && t.Sub(p.kdowns[0]) <= f.cfg.Window {
			p.flapping = true
		}
	}
	return counted
}

// ObserveKernelFaults feeds ObserveKernel the link downs of faults (the
// kernel log's faults as the daemon publishes them): each fault with
// Recent times and a Netdev counts for the port of devs whose netdev it
// is. It returns the keys of the ports that turned flapping.
func (f *Flaps) ObserveKernelFaults(devs []apitype.Device, faults []apitype.KernelFault, now time.Time) []string {
	var turned []string
	for _, kf := range faults {
		if len(kf.Recent) == 0 || kf.Netdev == "" {
			continue
		}
		for _, d := range devs {
			if d.Name != kf.Device {
				continue
			}
			for _, p := range d.Ports {
				if p.Netdev != kf.Netdev {
					continue
				}
				key := d.Name + "/" + strconv.Itoa(p.Port)
				was := f.Port(key, now).Flapping
				if f.ObserveKernel(key, kf.Recent) && !was && f.Port(key, now).Flapping {
					turned = append(turned, key)
				}
			}
		}
	}
	return turned
}

// quietSince is when the port last changed by either witness.
func (p *flapPort) quietSince() time.Time {
	if p.klast.After(p.last) {
		return p.klast
	}
	return p.last
}

// Forget drops the ports for which keep is false (devices gone).
func (f *Flaps) Forget(keep func(key string) bool) {
	for k := range f.ports {
		if !keep(k) {
			delete(f.ports, k)
		}
	}
}

// State returns every tracked port's state at now, clearing the flapping
// of ports that were quiet for the quiet window.
func (f *Flaps) State(now time.Time) map[string]FlapState {
	out := make(map[string]FlapState, len(f.ports))
	for k, p := range f.ports {
		out[k] = f.state(p, now)
	}
	return out
}

// Port returns one port's state at now (zero when it is not tracked).
func (f *Flaps) Port(key string, now time.Time) FlapState {
	if p, ok := f.ports[key]; ok {
		return f.state(p, now)
	}
	return FlapState{}
}

func (f *Flaps) state(p *flapPort, now time.Time) FlapState {
	if p.flapping && now.Sub(p.quietSince()) >= f.cfg.Quiet {
		p.flapping = false
	}
	within := func(ts []time.Time) int {
		n := 0
		for _, t := range ts {
			if now.Sub(t) <= f.cfg.Window {
				n++
			}
		}
		return n
	}
	return FlapState{Downs: within(p.downs), KernelDowns: within(p.kdowns), Window: f.cfg.Window, Flapping: p.flapping,
		Transitions: p.transitions, LastChange: p.last}
}

// NextChange is when a flapping port's quiet window ends, the next moment
// State can change without an observation; zero when none is flapping.
func (f *Flaps) NextChange() time.Time {
	var next time.Time
	for _, p := range f.ports {
		if !p.flapping {
			continue
		}
		if t := p.quietSince().Add(f.cfg.Quiet); next.IsZero() || t.Before(next) {
			next = t
		}
	}
	return next
}
