package health

import (
	"time"
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
}

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
		p.downs, p.flapping = nil, false
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
	if p.flapping && now.Sub(p.last) >= f.cfg.Quiet {
		p.flapping = false
	}
	n := 0
	for _, t := range p.downs {
		if now.Sub(t) <= f.cfg.Window {
			n++
		}
	}
	return FlapState{Downs: n, Window: f.cfg.Window, Flapping: p.flapping, Transitions: p.transitions, LastChange: p.last}
}

// NextChange is when a flapping port's quiet window ends, the next moment
// State can change without an observation; zero when none is flapping.
func (f *Flaps) NextChange() time.Time {
	var next time.Time
	for _, p := range f.ports {
		if !p.flapping {
			continue
		}
		if t := p.last.Add(f.cfg.Quiet); next.IsZero() || t.Before(next) {
			next = t
		}
	}
	return next
}
