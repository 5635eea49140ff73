package probe

import (
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
)

// TestStalledPass: a post into the provider that does not return (here
// the transport's ProbeBatch blocked) no longer holds the pass: the
// manager is never reported as stalled, the port is cut off after
// PostBound with its path unknown, not down, and when the post returns the
// probes go again and the peer comes back up. Stalled still reports a
// pass that stands (it is the daemon's watchdog of the manager), which
// only something other than a post can now cause.
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
	deadline := time.Now().Add(PostBound + 2*time.Second)
	for time.Now().Before(deadline) {
		if _, doing, stalled := a.m.Stalled(time.Now(), 300*time.Millisecond); stalled {
			t.Fatalf("a blocked post stalled the pass (%s)", doing)
		}
		if p := a.peer("127.0.0.3"); p.State == apitype.PeerDown {
			t.Fatalf("the peer is down (%s) while this node's port cannot post: want unknown", p.Reason)
		}
		time.Sleep(20 * time.Millisecond)
	}
	p := a.peer("127.0.0.3")
	if p.State != apitype.PeerUnknown || !strings.Contains(p.Reason, "ibv_post_send") {
		t.Errorf("with its only port cut off the peer is %s (%q), want unknown saying the post does not return", p.State, p.Reason)
	}
	a.mu.Lock()
	stuck := a.last.Ports[0].Stuck
	a.mu.Unlock()
	if stuck == "" {
		t.Error("the port whose post does not return has no Stuck text")
	}

	f.mu.Lock()
	a.pr.postHold = nil
	sent := a.pr.sentTo[b.pr.qpn]
	f.mu.Unlock()
	close(hold)
	waitState(t, a, "127.0.0.3", apitype.PeerUp, 5*time.Second)
	f.mu.Lock()
	now := a.pr.sentTo[b.pr.qpn]
	f.mu.Unlock()
	if now <= sent {
		t.Errorf("after the post returned no probe went to b (%d, were %d)", now, sent)
	}
	a.mu.Lock()
	stuck = a.last.Ports[0].Stuck
	a.mu.Unlock()
	if stuck != "" {
		t.Errorf("the port is still Stuck after its post returned: %q", stuck)
	}
}
