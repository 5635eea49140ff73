package inflight

import (
	"sync/atomic"
	"testing"
	"time"
)

// TestDrainWaits: Drain returns only after the calls in progress left,
// refuses calls while it waits, and takes them again after.
func TestDrainWaits(t *testing.T) {
	var g Group
	var left atomic.Bool
	if !g.Enter() {
		t.Fatal("a zero Group refused a call")
	}
	go func() {
		time.Sleep(100 * time.Millisecond)
		if g.Enter() {
			t.Error("a call entered while the group drained")
			g.Leave()
		}
		left.Store(true)
		g.Leave()
	}()
	g.Drain()
	if !left.Load() {
		t.Fatal("Drain returned before the call in progress left")
	}
	if !g.Enter() {
		t.Fatal("the group refuses calls after Drain")
	}
	g.Leave()
}
