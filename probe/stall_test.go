package probe

import (
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
)

// TestStalledPass: a pass that blocks in posting probes (the provider's
// call does not return) is reported by Stalled once it has stood longer
// than the bound, with what it is doing; when the post returns, the pass
// ends, Stalled says nothing, and the probes go again.
func TestStalledPass(t *testing.T) {
	port, f := loopbackFabric(t)
	a := startNode(t, f, "127.0.0.2", "127.0.0.3", port, 1)
	defer a.stop(t)
	b := startNode(t, f, "127.0.0.3", "127.0.0.2", port, 2)
	defer b.stop(t)
	waitState(t, a, "127.0.0.3", apitype.PeerUp, 5*time.Second)
	// A pass takes well under 50 ms: a healthy manager is never stalled.
	for range 10 {
		if _, doing, stalled := a.m.Stalled(time.Now(), 50*time.Millisecond); stalled {
			t.Fatalf("Stalled reports a healthy manager (%s)", doing)
		}
		time.Sleep(15 * time.Millisecond)
	}

	hold := make(chan struct{})
	f.mu.Lock()
	a.pr.postHold = hold
	f.mu.Unlock()
	const bound = 300 * time.Millisecond
	deadline := time.Now().Add(5 * time.Second)
	var since time.Time
	var doing string
	for {
		var stalled bool
		if since, doing, stalled = a.m.Stalled(time.Now(), bound); stalled {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a pass blocked in ProbeBatch for 5 s was not reported as stalled")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if age := time.Since(since); age < bound || age > 5*time.Second {
		t.Errorf("stalled since %v ago, want between the bound %v and 5 s", age, bound)
	}
	if !strings.Contains(doing, "ibv_post_send") {
		t.Errorf("stalled pass is %q, want it to say it is posting probes", doing)
	}
	// A bound longer than the stall: not reported.
	if _, _, stalled := a.m.Stalled(time.Now(), time.Hour); stalled {
		t.Error("Stalled with a one-hour bound reports a stall of seconds")
	}

	f.mu.Lock()
	a.pr.postHold = nil
	sent := a.pr.sentTo[b.pr.qpn]
	f.mu.Unlock()
	close(hold)
	waitFor := time.Now().Add(5 * time.Second)
	for {
		f.mu.Lock()
		now := a.pr.sentTo[b.pr.qpn]
		f.mu.Unlock()
		more := now > sent+2
		_, _, stalled := a.m.Stalled(time.Now(), bound)
		if more && !stalled {
			break
		}
		if time.Now().After(waitFor) {
			t.Fatalf("after the post returned: stalled %v, probes to b %d (were %d)", stalled, now, sent)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
