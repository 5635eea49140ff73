package probe

import (
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
)

// TestPartialPublish: when only some peers' own states changed and nobody
// asks for figures, the publish builds those peers alone (issue #29,
// "incrementally"): the changed peer shows its new state at once, the
// others' entries are the last state's (their figures as of the last full
// build), and the figures' age that Fresh answers by does not move, so a
// reader's request then gets a full build with every peer's figures.
func TestPartialPublish(t *testing.T) {
	m, got, now := probedManager(t)
	peers := m.peers.inOrder()
	m.publish(now) // the first state: full
	if len(*got) != 1 {
		t.Fatalf("%d publishes at the start, want 1", len(*got))
	}
	full := (*got)[0]
	freshAt := m.pub.fresh.at

	// Figures move on every peer, and one peer goes down.
	now = now.Add(time.Second)
	probeRound(m, peers, -1, now)
	changed := peers[3]
	m.setPeerState(changed, apitype.PeerDown, "a test", now)
	now = now.Add(minPublishGap)
	m.publish(now)
	if len(*got) != 2 {
		t.Fatalf("%d publishes after a peer's state changed, want 2", len(*got))
	}
	part := (*got)[1]
	if len(part.Peers) != len(full.Peers) {
		t.Fatalf("partial state lists %d peers, the full one %d", len(part.Peers), len(full.Peers))
	}
	for i, p := range part.Peers {
		switch {
		case p.Name == changed.spec.Name:
			if p.State != apitype.PeerDown || p.Reason != "a test" {
				t.Errorf("changed peer %s published as %s (%q), want down (\"a test\")", p.Name, p.State, p.Reason)
			}
			if p.Paths[0].Sent == full.Peers[i].Paths[0].Sent {
				t.Errorf("changed peer %s built again with its old figures (sent %d)", p.Name, p.Paths[0].Sent)
			}
		case p.Paths[0].Sent != full.Peers[i].Paths[0].Sent || &p.Paths[0] != &full.Peers[i].Paths[0]:
			t.Errorf("unchanged peer %s built again in a partial publish (sent %d, was %d)", p.Name, p.Paths[0].Sent, full.Peers[i].Paths[0].Sent)
		}
	}
	if &part.Peers[0] == &full.Peers[0] {
		t.Fatal("the partial state shares the published state's peer array: a published state would change")
	}
	if m.pub.fresh.at != freshAt {
		t.Errorf("a partial publish moved the figures' age from %v to %v", freshAt, m.pub.fresh.at)
	}

	// A reader's request: a full build, every peer's figures current.
	now = now.Add(2 * time.Second)
	if ch, err := m.pub.fresh.request(now, time.Second); ch == nil || err != nil {
		t.Fatalf("request 2 s after the last full build = %v, %v; want a wait", ch, err)
	}
	m.publish(now)
	if len(*got) != 3 {
		t.Fatalf("%d publishes after a reader asked, want 3", len(*got))
	}
	for i, p := range (*got)[2].Peers {
		if p.Paths[0].Sent == full.Peers[i].Paths[0].Sent {
			t.Errorf("peer %s after a reader's request: figures of the first state (sent %d)", p.Name, p.Paths[0].Sent)
		}
	}

	// A change of who is selected is never partial.
	m.drop(peers[0])
	m.setPeerState(peers[5], apitype.PeerDown, "another", now)
	if m.partialOK() {
		t.Error("partial publish allowed after a peer left the table")
	}
}

// probedManager is resolvedManager's 20 peers after five rounds of
// probes, with the states it publishes recorded in got.
func probedManager(t *testing.T) (m *Manager, got *[]apitype.Peers, now time.Time) {
	m = resolvedManager(t, 20)
	got = new([]apitype.Peers)
	m.opts.OnState = func(st apitype.Peers) { *got = append(*got, st) }
	peers := m.peers.inOrder()
	now = time.Now()
	for range 5 {
		now = now.Add(time.Second)
		probeRound(m, peers, -1, now)
	}
	return m, got, now
}

// TestPartialPublishSuspects: a partial publish finds the suspects again
// when a path's state crosses what they count (every peer of the port
// down, then back), and leaves them when nothing they count moved.
func TestPartialPublishSuspects(t *testing.T) {
	m, got, now := probedManager(t)
	peers := m.peers.inOrder()
	m.publish(now)
	freshAt := m.pub.fresh.at
	last := func() apitype.Peers { return (*got)[len(*got)-1] }
	if f := last().Ports[0].LocalFault; f != "" {
		t.Fatalf("a suspect with every peer up: %q", f)
	}
	// Every probe lost for down_after rounds: every path down.
	for range m.cfg.Threshold.DownAfter {
		now = now.Add(time.Second)
		for _, p := range peers {
			for _, pa := range p.paths {
				m.send(p, pa, now)
			}
		}
		m.sched.flush(m.opts.Transport, m.log)
		m.expire(now.Add(time.Second))
	}
	now = now.Add(2 * time.Second)
	n := len(*got)
	m.publish(now)
	if len(*got) != n+1 || m.pub.fresh.at != freshAt {
		t.Fatalf("after every peer went down: %d publishes (want %d), figures' age moved %v: not a partial publish", len(*got), n+1, m.pub.fresh.at != freshAt)
	}
	if f := last().Ports[0].LocalFault; f == "" {
		t.Error("every peer of the port down, published in a partial publish without the port suspect")
	}
	if m.pub.suspects {
		t.Error("the suspects were found again, but still marked as moved")
	}
	// Back up: the suspect clears, again in a partial publish.
	for range m.cfg.Threshold.UpAfter {
		now = now.Add(time.Second)
		probeRound(m, peers, -1, now)
	}
	now = now.Add(2 * time.Second)
	m.publish(now)
	if m.pub.fresh.at != freshAt {
		t.Fatal("the recovery's publish was not partial")
	}
	if f := last().Ports[0].LocalFault; f != "" {
		t.Errorf("every peer up again, the port still suspect: %q", f)
	}
}

// TestPeerStateApartFollowsPaths: a peer's state set apart from its paths
// (a failed lookup) is set from its paths again at their next sample,
// though that sample moves neither the path's state nor its reason (which
// otherwise leaves the peer untouched).
func TestPeerStateApartFollowsPaths(t *testing.T) {
	m, _, now := probedManager(t)
	peers := m.peers.inOrder()
	p := peers[2]
	if p.state != apitype.PeerUp {
		t.Fatalf("peer %s is %s after five answered rounds, want up", p.spec.Name, p.state)
	}
	m.setPeerStateApart(p, apitype.PeerDown, "cannot resolve a test", now)
	now = now.Add(time.Second)
	probeRound(m, peers, -1, now)
	if p.state != apitype.PeerUp || p.reason != "" {
		t.Errorf("after its paths answered again: peer %s %s (%q), want up", p.spec.Name, p.state, p.reason)
	}
	if pa := p.paths[0]; pa.stale {
		t.Error("the path still marks its peer's state as set apart")
	}
}
