package daemon

import (
	"testing"
	"time"

	"github.com/rdmad/rdmad/verbs/loopback"
)

// TestResultGate: a port's first result and every change of its state are
// published at once; figures that only move are published together, once,
// at most minResultGap after the last publish, never lost.
func TestResultGate(t *testing.T) {
	sig := make(chan time.Time, 16)
	g := newResultGate(func() { sig <- time.Now() })
	now := func() (bool, time.Time) {
		select {
		case at := <-sig:
			return true, at
		default:
			return false, time.Time{}
		}
	}
	res := func(port int, st loopback.State) loopback.PortResult {
		return loopback.PortResult{Device: "rxe0", Port: port, State: st}
	}
	g.take(res(1, loopback.StateOK), time.Now())
	if ok, _ := now(); !ok {
		t.Fatal("a port's first result was not published at once")
	}
	start := time.Now()
	g.take(res(1, loopback.StateOK), time.Now())
	g.take(res(1, loopback.StateOK), time.Now())
	if ok, _ := now(); ok {
		t.Fatal("moving figures within minResultGap were published at once")
	}
	select {
	case at := <-sig:
		if d := at.Sub(start); d > minResultGap+500*time.Millisecond {
			t.Errorf("the held figures were published after %v, want about %v", d, minResultGap)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the held figures were never published")
	}
	if ok, _ := now(); ok {
		t.Error("two held results were published twice; want once")
	}
	// A state change goes at once, and takes the held figures with it.
	g.take(res(1, loopback.StateOK), time.Now())
	g.take(res(1, loopback.StateFailed), time.Now())
	if ok, _ := now(); !ok {
		t.Fatal("a state change (ok -> failed) was not published at once")
	}
	// Another port is a first result of its own.
	g.take(res(2, loopback.StateOK), time.Now())
	if ok, _ := now(); !ok {
		t.Fatal("port 2's first result was not published at once")
	}
	time.Sleep(minResultGap + 200*time.Millisecond)
	if ok, _ := now(); ok {
		t.Error("a held signal fired after a state change had published it")
	}
	// After the gap, figures go at once again.
	g.take(res(1, loopback.StateFailed), time.Now())
	if ok, _ := now(); !ok {
		t.Error("a result minResultGap after the last publish was held")
	}
}

// TestResultGateStop: stop cancels a held signal, so no timer outlives the
// verbs parts, and the gate signals nothing for results that still come.
func TestResultGateStop(t *testing.T) {
	sig := make(chan struct{}, 16)
	g := newResultGate(func() { sig <- struct{}{} })
	res := loopback.PortResult{Device: "rxe0", Port: 1, State: loopback.StateOK}
	g.take(res, time.Now())
	<-sig
	g.take(res, time.Now()) // held: a timer is set
	g.stop()
	res.State = loopback.StateFailed
	g.take(res, time.Now()) // a state change, after stop
	time.Sleep(minResultGap + 200*time.Millisecond)
	if n := len(sig); n != 0 {
		t.Errorf("the gate signalled %d times after stop, want none", n)
	}
	g.stop() // twice is harmless
}
