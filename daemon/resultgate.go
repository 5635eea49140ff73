package daemon

import (
	"sync"
	"time"

	"github.com/rdmad/rdmad/verbs/loopback"
)

// minResultGap bounds how often the loopback prober's figures are turned
// into a snapshot. Each publish rebuilds the D-Bus view, compares the
// snapshot for the watchers and the bus signals; at a loopback_interval of
// 10 ms that, once per round, was a third of rdmad's CPU (docs/BENCHMARKS.md,
// "Runs 4–8"). A port whose state changes (ok, failed,
// paused) is published at once; only moving numbers wait, at most this
// long. At the default interval of a second nothing waits.
const minResultGap = 100 * time.Millisecond

// A resultGate decides, per loopback result, whether it is published now
// or with the next one at most minResultGap later. It is called from the
// prober's goroutines; signal wakes the main loop.
type resultGate struct {
	signal func()

	mu      sync.Mutex
	states  map[gateKey]loopback.State // per port, the last state seen
	last    time.Time                  // when signal was last called
	pending *time.Timer                // a later signal is set; nil: none
	stopped bool                       // stop was called: nothing more is signalled
	// fires counts the timer's runs of fire, scheduled and not cancelled,
	// for stop to wait for.
	fires sync.WaitGroup
}

func newResultGate(signal func()) *resultGate {
	return &resultGate{signal: signal, states: map[gateKey]loopback.State{}}
}

type gateKey struct {
	dev  string
	port int
}

// take looks at res, which came at now, and signals at once or later.
func (g *resultGate) take(res loopback.PortResult, now time.Time) {
	key := gateKey{res.Device, res.Port}
	g.mu.Lock()
	if g.stopped {
		g.mu.Unlock()
		return
	}
	prev, seen := g.states[key]
	g.states[key] = res.State
	if !seen || prev != res.State || now.Sub(g.last) >= minResultGap {
		g.cancel()
		g.last = now
		g.mu.Unlock()
		g.signal()
		return
	}
	if g.pending == nil {
		g.fires.Add(1)
		g.pending = time.AfterFunc(g.last.Add(minResultGap).Sub(now), g.fire)
	}
	g.mu.Unlock()
}

// cancel stops the pending timer, if any; g.mu is held.
func (g *resultGate) cancel() {
	if g.pending != nil {
		if g.pending.Stop() {
			g.fires.Done() // fire will not run
		}
		g.pending = nil
	}
}

func (g *resultGate) fire() {
	defer g.fires.Done()
	g.mu.Lock()
	if g.stopped {
		g.mu.Unlock()
		return
	}
	g.pending = nil
	g.last = time.Now()
	g.mu.Unlock()
	g.signal()
}

// stop cancels a held signal and waits for a timer that already fired:
// after it, the gate signals nothing, also for results that still come.
// The verbs parts call it when they stop, so that no timer outlives them.
func (g *resultGate) stop() {
	g.mu.Lock()
	g.stopped = true
	g.cancel()
	g.mu.Unlock()
	g.fires.Wait()
}
