package health

import (
	"fmt"
	"strconv"
	"strings"
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

// Long-window defaults ([health] flap_long_downs, flap_long_window): two
// downs within six hours, the rule of azurehpc-health-checks'
// check_ib_link_flapping (carrier losses in the kernel log): a link that
// drops every hour never makes three downs in ten minutes.
const (
	DefaultFlapLongDowns  = 2
	DefaultFlapLongWindow = 6 * time.Hour
)

// FlapConfig sets when a port counts as flapping: Downs downs within
// Window raise it; Quiet without a transition clears it. LongDowns downs
// within LongWindow also make it flapping, for as long as the long window
// holds them; LongDowns 0 (the zero FlapConfig) switches the long window
// off (the daemon's configuration has it on by default).
type FlapConfig struct {
	Downs  int
	Window time.Duration
	Quiet  time.Duration

	LongDowns  int
	LongWindow time.Duration
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
	if c.LongDowns < 0 {
		c.LongDowns = 0
	}
	if c.LongDowns == 0 {
		c.LongWindow = 0
	} else if c.LongWindow <= 0 {
		c.LongWindow = DefaultFlapLongWindow
	}
	return c
}

// keep is how many downs of each witness a port keeps: enough for either
// rule.
func (c FlapConfig) keep() int { return max(c.Downs, c.LongDowns) }

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
	// the port was quiet for the quiet window, or while the long window
	// holds its threshold of downs (Long).
	Flapping bool
	// Long is set when the port is flapping by the long window alone:
	// LongDowns (or LongKernelDowns, the kernel's) downs within LongWindow
	// reached [health] flap_long_downs. LongWindow is 0 when the long
	// window is off.
	Long                       bool
	LongDowns, LongKernelDowns int
	LongWindow                 time.Duration
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
	// dirty is set by every change a restart must keep (Record).
	dirty bool
}

type flapPort struct {
	up, flapping bool
	// downs are the times of the last cfg.keep() downs, oldest first.
	downs       []time.Time
	transitions uint64
	last        time.Time
	// kdowns are the times of the last cfg.keep() link downs the kernel
	// logged (ObserveKernel), oldest first; klast is the latest one seen,
	// kept across SetConfig, so that the same messages are not counted
	// again.
	kdowns []time.Time
	klast  time.Time
	// After a reboot (Restore of another boot's record) the port's next
	// observation is its baseline, not a transition (fresh), and the
	// kernel's link downs until the port is first seen ACTIVE are its
	// bring-up, not counted (kwait); kfrom is when it was seen ACTIVE:
	// link downs the kernel dated before are not counted either.
	fresh, kwait bool
	kfrom        time.Time
	// unseen is set on a port restored from a record until its first
	// observation: Forget keeps it while it holds downs (at a boot the
	// first inventory read may come before the driver made the device).
	unseen bool
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
	f.dirty = true
	for _, p := range f.ports {
		p.downs, p.kdowns, p.flapping = nil, nil, false
	}
}

// push appends t to ts, keeping the last n.
func push(ts []time.Time, t time.Time, n int) []time.Time {
	if len(ts) >= n {
		copy(ts, ts[len(ts)-n+1:])
		ts = ts[:n-1]
	}
	return append(ts, t)
}

// short reports whether the downs ts reach the short rule at now: the
// last cfg.Downs of them within the window.
func (f *Flaps) short(ts []time.Time, now time.Time) bool {
	return len(ts) >= f.cfg.Downs && now.Sub(ts[len(ts)-f.cfg.Downs]) <= f.cfg.Window
}

// Observe records that port key is up (ACTIVE) or not at now, and reports
// whether that is a transition. The first observation of a port is its
// baseline, no transition.
func (f *Flaps) Observe(key string, up bool, now time.Time) bool {
	p, ok := f.ports[key]
	if !ok {
		f.ports[key] = &flapPort{up: up, last: now}
		f.dirty = true
		return false
	}
	p.unseen = false
	if up && p.kwait {
		p.kwait, p.kfrom, f.dirty = false, now, true
	}
	if p.fresh {
		// The first read after a reboot: the reboot took the link down
		// and up, which is no flap.
		p.fresh, p.up, f.dirty = false, up, true
		return false
	}
	if p.up == up {
		return false
	}
	p.up, p.last = up, now
	p.transitions++
	f.dirty = true
	if !up {
		p.downs = push(p.downs, now, f.cfg.keep())
		if f.short(p.downs, now) {
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
		p.klast, f.dirty = t, true
		if p.kwait || !t.After(p.kfrom) {
			continue // the link's bring-up after a reboot
		}
		counted = true
		p.kdowns = push(p.kdowns, t, f.cfg.keep())
		if f.short(p.kdowns, t) {
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

// quietSince is when the port last changed by either witness (a kernel
// link down not counted, the bring-up after a reboot, is no change).
func (p *flapPort) quietSince() time.Time {
	if n := len(p.kdowns); n > 0 && p.kdowns[n-1].After(p.last) {
		return p.kdowns[n-1]
	}
	return p.last
}

// Forget drops the ports for which keep is false (devices gone), but
// not a port restored from a record and not observed since while it is
// flapping or holds a down within either window at now: a device the
// driver has not made yet at the first read after a reboot keeps its
// evidence.
func (f *Flaps) Forget(keep func(key string) bool, now time.Time) {
	for k, p := range f.ports {
		if keep(k) {
			continue
		}
		if p.unseen {
			w := max(f.cfg.Window, f.cfg.LongWindow)
			if p.flapping || within(p.downs, now, w) > 0 || within(p.kdowns, now, w) > 0 {
				continue
			}
		}
		delete(f.ports, k)
		f.dirty = true
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
	st := FlapState{Downs: within(p.downs, now, f.cfg.Window), KernelDowns: within(p.kdowns, now, f.cfg.Window),
		Window: f.cfg.Window, Flapping: p.flapping, Transitions: p.transitions, LastChange: p.last}
	if f.cfg.LongDowns > 0 {
		st.LongWindow = f.cfg.LongWindow
		st.LongDowns, st.LongKernelDowns = within(p.downs, now, f.cfg.LongWindow), within(p.kdowns, now, f.cfg.LongWindow)
		if !st.Flapping && max(st.LongDowns, st.LongKernelDowns) >= f.cfg.LongDowns {
			st.Flapping, st.Long = true, true
		}
	}
	return st
}

// within counts the times of ts within w before now.
func within(ts []time.Time, now time.Time, w time.Duration) int {
	n := 0
	for _, t := range ts {
		if now.Sub(t) <= w {
			n++
		}
	}
	return n
}

// NextChange is the next moment after now at which State can change
// without an observation: a flapping port's quiet window ends, or the
// long window lets go of a down that holds a port flapping. Zero when
// none is flapping.
func (f *Flaps) NextChange(now time.Time) time.Time {
	var next time.Time
	at := func(t time.Time) {
		if t.After(now) && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	for _, p := range f.ports {
		if p.flapping {
			at(p.quietSince().Add(f.cfg.Quiet))
		}
		if n := f.cfg.LongDowns; n > 0 {
			for _, ts := range [][]time.Time{p.downs, p.kdowns} {
				// The long rule holds until the n-th last down leaves the
				// window (State counts a down exactly LongWindow old).
				if len(ts) >= n {
					at(ts[len(ts)-n].Add(f.cfg.LongWindow + time.Nanosecond))
				}
			}
		}
	}
	return next
}

// Why says why a flapping port (key, over netdev) is: the rule that
// fired and the witness that counted most.
func (s FlapState) Why(key, netdev string) string {
	if s.Long {
		m := fmt.Sprintf("%s went down %d times in %s (flap_long_window)", key, s.LongDowns, shortDuration(s.LongWindow))
		if s.LongKernelDowns > s.LongDowns {
			m = fmt.Sprintf("%s went down %d times in %s (flap_long_window; the kernel logged %d link downs of %s)", key,
				s.LongKernelDowns, shortDuration(s.LongWindow), s.LongKernelDowns, orUnknown(netdev))
		}
		return m
	}
	if s.KernelDowns > s.Downs {
		return fmt.Sprintf("%s went down %d times in %s (the kernel logged %d link downs of %s)", key, s.KernelDowns, s.Window,
			s.KernelDowns, orUnknown(netdev))
	}
	return fmt.Sprintf("%s went down %d times in %s", key, s.Downs, s.Window)
}

// shortDuration writes d without its zero tails: 6h, 90m, 1h30m.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
