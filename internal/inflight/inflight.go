// Package inflight counts the calls a server runs on goroutines it does not
// own (godbus's per-call goroutines, net/http's per-connection ones), so
// that the server can wait for them before it returns: every goroutine
// that reaches rdmad's code then has an owner that waits for it.
package inflight

import "sync"

// A Group counts calls in progress. The zero Group is ready to use.
type Group struct {
	mu       sync.Mutex
	draining bool
	wg       sync.WaitGroup
}

// Enter starts a call; it reports false while the group drains, and the
// call must then not run. A call that entered must Leave.
func (g *Group) Enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.draining {
		return false
	}
	g.wg.Add(1)
	return true
}

// Leave ends a call that entered.
func (g *Group) Leave() { g.wg.Done() }

// Drain refuses new calls and waits for those in progress; afterwards the
// group takes calls again (a server that reconnects uses it anew).
func (g *Group) Drain() {
	g.mu.Lock()
	g.draining = true
	g.mu.Unlock()
	g.wg.Wait()
	g.mu.Lock()
	g.draining = false
	g.mu.Unlock()
}
