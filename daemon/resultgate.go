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
	prev, seen := g.states[key]
	g.states[key] = res.State
	if !seen || prev != res.State || now.Sub(g.last) >= minResultGap {
		if g.pending != nil {
			g.pending.Stop()
			g.pending = nil
		}
		g.last = now
		g.mu.Unlock()
		g.signal()
		return
	}
	if g.pending == nil {
		g.pending = time.AfterFunc(g.last.Add(minResultGap).Sub(now), g.fire)
	}
	g.mu.Unlock()
}

func (g *resultGate) fire() {
	g.mu.Lock()
	g.pending = nil
	g.last = time.Now()
	g.mu.Unlock()
	g.signal()
}
