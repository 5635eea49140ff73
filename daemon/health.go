package daemon

import (
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/health"
)

// healthPart decides the verdict of every published snapshot (the store's
// finish hook) from the snapshot and what the main loop tracks beside it:
// port flaps and the configuration's expectations. The main loop writes
// its fields; the hook, which runs in whichever goroutine publishes,
// reads them under mu.
type healthPart struct {
	log *slog.Logger

	mu     sync.Mutex
	flaps  *health.Flaps
	expect health.Expect
	// minRates are the [[policy]] min_rate blocks in force, matched
	// against the ports at every inventory read.
	minRates []config.Policy
	// expectRate is [health.expect] rate in force, for the ports of the
	// devices without one of their own; it joins min_rate's.
	expectRate float64
	// timer fires when a flapping port's quiet window ends, so that the
	// verdict clears without waiting for an event; main loop only.
	timer *time.Timer
	// memo decides the verdicts (finish), under mu.
	memo health.Memo
	// recPath is the flap record's file ("": flaps are not kept across
	// restarts), boot the kernel's boot ID written into it, recFailed
	// (main loop only) whether the last write failed (logged once);
	// flaprecord.go.
	recPath, boot string
	recFailed     bool
}

func newHealthPart(log *slog.Logger) *healthPart {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &healthPart{log: log, flaps: health.NewFlaps(health.FlapConfig{}), timer: t}
}

// configure takes a configuration in force. Main loop.
func (h *healthPart) configure(cfg *config.Config) {
	if h == nil {
		return // a test's bare Daemon
	}
	// The record is written after mu is released (defers run last
	// first).
	var rec []byte
	defer func() { h.writeRecord(rec) }()
	h.mu.Lock()
	defer h.mu.Unlock()
	hc := cfg.Health
	h.flaps.SetConfig(health.FlapConfig{Downs: hc.FlapDowns, Window: hc.FlapWindow.Duration, Quiet: hc.FlapQuiet.Duration,
		LongDowns: hc.FlapLongDowns, LongWindow: hc.FlapLongWindow.Duration})
	rec = h.takeRecord(time.Now())
	h.expect.Ignore = append([]string(nil), hc.Ignore...)
	h.expect.MinLoopbackGbps, h.expect.MinLoopbackShare = hc.MinLoopbackGbps, hc.MinLoopbackShare
	h.expectRate = hc.Expect.RateGbps
	h.expect.Count, h.expect.Ports, h.expect.Devices = hc.Expect.Devices, hc.Expect.Ports, nil
	for _, x := range hc.Expect.Device {
		h.expect.Devices = append(h.expect.Devices, health.ExpectedDevice{Name: x.Name, PCI: x.PCI, Rail: x.Rail, Ports: x.Ports, RateGbps: x.RateGbps})
	}
	h.minRates = h.minRates[:0]
	for _, p := range cfg.Policies {
		if p.MinRateGbps > 0 {
			h.minRates = append(h.minRates, p)
		}
	}
}

// observe records the port states of an inventory read, fills each
// port's transition count, and matches the min_rate policies against the
// ports. Main loop; devs is the read about to be published.
func (h *healthPart) observe(devs []apitype.Device, now time.Time) {
	if h == nil {
		return
	}
	// The record is written after mu is released (defers run last
	// first).
	var rec []byte
	defer func() { h.writeRecord(rec) }()
	h.mu.Lock()
	defer h.mu.Unlock()
	present := map[string]bool{}
	rates := map[string]float64{}
	for i := range devs {
		d := &devs[i]
		for j := range d.Ports {
			p := &d.Ports[j]
			key := portKey(d.Name, p.Port)
			present[key] = true
			was := h.flaps.Port(key, now).Flapping
			if h.flaps.Observe(key, p.State == "ACTIVE", now) {
				if st := h.flaps.Port(key, now); st.Flapping && !was {
					h.logFlapping(key, p.Netdev, st)
				}
			}
			for _, pol := range h.minRates {
				if r := pol.MinRateFor(d.Name, p.Netdev); r > 0 {
					rates[key] = r // later policies win, as for every setting
				}
			}
			// [health.expect] rate: the device's own, else the node's;
			// with a min_rate too, the higher holds.
			if r := h.expectedRate(*d); r > rates[key] {
				rates[key] = r
			}
		}
	}
	h.flaps.Forget(func(k string) bool { return present[k] }, now)
	for i := range devs {
		for j := range devs[i].Ports {
			devs[i].Ports[j].Transitions = h.flaps.Port(portKey(devs[i].Name, devs[i].Ports[j].Port), now).Transitions
		}
	}
	h.expect.MinRateGbps = rates
	rec = h.takeRecord(now)
	h.rearmLocked(now)
}

// expectedRate is the rate [health.expect] declares for d's ports: its
// [[health.expect.device]]'s, else [health.expect] rate; 0 none.
func (h *healthPart) expectedRate(d apitype.Device) float64 {
	for _, x := range h.expect.Devices {
		if x.RateGbps > 0 && x.Matches(d) {
			return x.RateGbps
		}
	}
	return h.expectRate
}

// logFlapping logs that port key (over netdev) turned flapping, with the
// rule that fired.
func (h *healthPart) logFlapping(key, netdev string, st health.FlapState) {
	attrs := []any{apitype.MessageIDKey, apitype.MsgPortFlapping, "port", key, "detail", st.Why(key, netdev)}
	if st.Long {
		attrs = append(attrs, "rule", "flap_long_window", "downs", st.LongDowns, "kernel_link_downs", st.LongKernelDowns,
			"window", st.LongWindow.String())
	} else {
		attrs = append(attrs, "rule", "flap_window", "downs", st.Downs, "kernel_link_downs", st.KernelDowns, "window", st.Window.String())
	}
	h.log.Warn("RDMA port flapping", attrs...)
}

// rearm sets the timer to the next moment the flaps change by themselves
// (a quiet window ends, the long window lets go of a down): the main loop
// calls it when the timer fired.
func (h *healthPart) rearm() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.rearmLocked(time.Now())
}

func (h *healthPart) rearmLocked(now time.Time) {
	if next := h.flaps.NextChange(now); !next.IsZero() {
		h.timer.Reset(max(next.Sub(now), 0) + 10*time.Millisecond)
	}
}

// observeKernel counts the link downs of the kernel log's faults, as the
// follower publishes them, toward the flap rule of the ports of devs.
// Main loop.
func (h *healthPart) observeKernel(devs []apitype.Device, faults []apitype.KernelFault, now time.Time) {
	if h == nil {
		return
	}
	// The record is written after mu is released (defers run last
	// first).
	var rec []byte
	defer func() { h.writeRecord(rec) }()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, key := range h.flaps.ObserveKernelFaults(devs, faults, now) {
		h.logFlapping(key, netdevOf(devs, key), h.flaps.Port(key, now))
	}
	rec = h.takeRecord(now)
	h.rearmLocked(now)
}

// netdevOf is the netdev of port key of devs ("" if none).
func netdevOf(devs []apitype.Device, key string) string {
	for _, d := range devs {
		for _, p := range d.Ports {
			if portKey(d.Name, p.Port) == key {
				return p.Netdev
			}
		}
	}
	return ""
}

// finish is the store's finish hook: it decides next's verdict, keeps the
// daemon's state (running or degraded) and summary in line with it, and
// logs each condition that changed.
func (h *healthPart) finish(d *Daemon, prev, next *apitype.Snapshot) {
	now := time.Now()
	h.mu.Lock()
	// Decided anew only when something it reads changed: most publishes
	// are the peers' figures (#29 item 2).
	next.Health = h.memo.Evaluate(health.Input{Snap: next, Prev: prev.Health, Now: now, Expect: h.expect}, h.flaps)
	h.mu.Unlock()
	if next.State == apitype.Running || next.State == apitype.Degraded {
		d.summarise(next, apitype.Running)
	}
	if prev.Health.Status == "" {
		return // the first verdict: "rdmad started" says how it stands
	}
	h.logChanges(prev.Health, next.Health)
}

// logChanges logs the conditions that matter to an operator reading the
// journal: one that became a problem (WARN), one that is no longer a
// problem (INFO), and one that became unknown after it was ok (INFO: what
// rdmad could tell it cannot any more). A condition that turns ok from
// unknown (the first inventory read, the first probe round) is no news.
func (h *healthPart) logChanges(prev, next apitype.Health) {
	for _, c := range next.Conditions {
		old, _ := prev.Condition(c.Type)
		if old.Status == c.Status {
			continue
		}
		attrs := []any{"condition", c.Type, "status", c.Status, "reason", c.Reason,
			"objects", strings.Join(c.Objects, ","), "detail", c.Message}
		switch {
		case c.Status == apitype.ConditionProblem:
			h.log.Warn("health condition problem", append([]any{apitype.MessageIDKey, apitype.MsgHealthProblem}, attrs...)...)
		case old.Status == apitype.ConditionProblem && c.Status == apitype.ConditionOK:
			h.log.Info("health condition ok again", append([]any{apitype.MessageIDKey, apitype.MsgHealthOK}, attrs...)...)
		case old.Status == apitype.ConditionProblem || old.Status == apitype.ConditionOK:
			// problem -> unknown, ok -> unknown
			h.log.Info("health condition unknown", append([]any{apitype.MessageIDKey, apitype.MsgHealthProblem}, attrs...)...)
		}
	}
}

func portKey(dev string, port int) string { return dev + "/" + strconv.Itoa(port) }

// loopbackThreshold is the least loopback bandwidth [health] declares for
// port p in Gb/s (0: none), as the verdict judges it.
func (h *healthPart) loopbackThreshold(p apitype.Port) float64 {
	if h == nil {
		return 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.expect.LoopbackThreshold(p)
}
