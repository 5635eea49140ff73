package probe

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/internal/syncbuf"
	"github.com/rdmad/rdmad/probe/ud"
)

// TestGroupFaults checks the group inference on set states: a group is the
// suspect only while at least two of its peers are known, all down from
// every local port, and a peer outside it answers.
func TestGroupFaults(t *testing.T) {
	type pst struct {
		group string
		paths []string // state per local port: rxe0/1, rxe1/1
		state string   // the peer's state (the worst of its paths)
	}
	down := pst{"tor-a", []string{apitype.PeerDown, apitype.PeerDown}, apitype.PeerDown}
	up := func(g string) pst { return pst{g, []string{apitype.PeerUp, apitype.PeerUp}, apitype.PeerUp} }
	tests := []struct {
		name  string
		peers []pst
		want  string // the suspect group, "" for none
	}{
		{"a group down, another answers", []pst{down, down, up("tor-b")}, "tor-a"},
		{"a group down, an ungrouped peer answers", []pst{down, down, up("")}, "tor-a"},
		{"a degraded peer answers too", []pst{down, down, {"tor-b", []string{apitype.PeerDegraded, apitype.PeerUp}, apitype.PeerDegraded}}, "tor-a"},
		{"control endpoint silent counts as down", []pst{down, {"tor-a", nil, apitype.PeerDown}, up("tor-b")}, "tor-a"},
		{"one peer is that peer", []pst{down, up("tor-b")}, ""},
		{"one of the group answers", []pst{down, down, up("tor-a"), up("tor-b")}, ""},
		{"down from one port only", []pst{down, {"tor-a", []string{apitype.PeerDown, apitype.PeerUp}, apitype.PeerDown}, up("tor-b")}, ""},
		{"nobody else answers: not the group", []pst{down, down, {"tor-b", []string{apitype.PeerDown, apitype.PeerDown}, apitype.PeerDown}}, ""},
		{"unknown peers do not count", []pst{down, down, {"tor-a", []string{apitype.PeerUnknown, apitype.PeerUnknown}, apitype.PeerUnknown}, up("tor-b")}, "tor-a"},
		{"peers without a group are no group", []pst{{"", []string{apitype.PeerDown, apitype.PeerDown}, apitype.PeerDown}, {"", []string{apitype.PeerDown, apitype.PeerDown}, apitype.PeerDown}, up("tor-b")}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs syncbuf.Buffer
			m, err := New(Options{Transport: &fakeTransport{}, Logger: slog.New(slog.NewTextHandler(&logs, nil))}, Settings{Interval: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			m.local = []ud.LocalPort{{Key: "rxe0/1"}, {Key: "rxe1/1"}}
			for i, ps := range tt.peers {
				p := &mpeer{spec: Spec{Name: fmt.Sprint("peer", i), Group: ps.group}, state: ps.state}
				for j, st := range ps.paths {
					h := newHealth(time.Now())
					h.state = st
					p.paths = append(p.paths, &path{local: m.local[j].Key, h: h})
				}
				m.peers.byName[p.spec.Name] = p
			}
			m.localFaults()
			got := m.State().GroupFaults
			if got == nil {
				t.Fatal("GroupFaults is nil; want [] or the suspects")
			}
			if tt.want == "" {
				if len(got) != 0 {
					t.Errorf("group faults %+v, want none", got)
				}
				if strings.Contains(logs.String(), "peer group suspect") {
					t.Errorf("logged a group suspect without one:\n%s", logs.String())
				}
				return
			}
			if len(got) != 1 || got[0].Group != tt.want || !strings.Contains(got[0].Reason, "peers of group "+tt.want+" are down from every local port") {
				t.Fatalf("group faults %+v, want %s with the reason", got, tt.want)
			}
			if !strings.Contains(logs.String(), `msg="peer group suspect" group=`+tt.want) {
				t.Errorf("no log line raising the suspect:\n%s", logs.String())
			}
			for _, lp := range m.State().Ports {
				if lp.LocalFault != "" {
					t.Errorf("port %s flagged too (%q) while other groups answer", lp.Key, lp.LocalFault)
				}
			}
			// A second pass with nothing changed logs nothing new; a peer
			// of the group answering again clears the suspect, with a line.
			m.localFaults()
			if n := strings.Count(logs.String(), "peer group suspect"); n != 1 {
				t.Errorf("%d lines raising the suspect after two passes, want 1", n)
			}
			for _, p := range m.peers.byName {
				if p.spec.Group == tt.want {
					p.state = apitype.PeerUp
					for _, pa := range p.paths {
						pa.h.state = apitype.PeerUp
					}
					break
				}
			}
			m.localFaults()
			if got := m.State().GroupFaults; len(got) != 0 {
				t.Errorf("after a peer of %s came back: group faults %+v, want none", tt.want, got)
			}
			if !strings.Contains(logs.String(), `msg="peer group no longer suspect" group=`+tt.want) {
				t.Errorf("no log line clearing the suspect:\n%s", logs.String())
			}
		})
	}
}

// TestGroupFaultLive runs the inference over real managers and control
// endpoints: node a probes two peers of tor-a and one of tor-b; stopping
// both tor-a peers raises tor-a as the suspect, restarting one clears it.
func TestGroupFaultLive(t *testing.T) {
	port, f := loopbackFabric(t)

	const self = "127.0.0.2"
	groupOf := map[string]string{"127.0.0.3": "tor-a", "127.0.0.4": "tor-a", "127.0.0.5": "tor-b"}
	a := &node{pr: f.newTransport(1), done: make(chan error, 1)}
	var specs []Spec
	for name, g := range groupOf {
		specs = append(specs, Spec{Name: name, Group: g})
	}
	var logs syncbuf.Buffer
	m, err := New(Options{Transport: a.pr, NodeID: 1, ListenHost: self, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		OnState: func(ps apitype.Peers) { a.mu.Lock(); a.last = ps; a.mu.Unlock() }},
		Settings{Peers: specs, Port: port, Interval: 100 * time.Millisecond, Timeout: 50 * time.Millisecond,
			Window: 20, MaxPeers: 8, Rotate: time.Hour, Resolve: time.Minute,
			Threshold: Thresholds{DownAfter: 3, UpAfter: 3, LossPct: 5, MinLosses: 2}})
	if err != nil {
		t.Fatal(err)
	}
	a.m = m
	a.pr.onReply = m.OnReply
	ctx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	go func() { a.done <- m.Run(ctx) }()
	defer a.stop(t)

	others := map[string]*node{}
	for i, name := range []string{"127.0.0.3", "127.0.0.4", "127.0.0.5"} {
		others[name] = startNode(t, f, name, self, port, byte(2+i))
	}
	defer func() {
		for _, n := range others {
			n.stop(t)
		}
	}()
	for name := range groupOf {
		waitState(t, a, name, apitype.PeerUp, 5*time.Second)
	}
	faults := func() []apitype.GroupFault {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.last.GroupFaults
	}
	if got := faults(); len(got) != 0 {
		t.Fatalf("group faults %+v with every peer up", got)
	}

	for _, name := range []string{"127.0.0.3", "127.0.0.4"} {
		f.kill(others[name].pr)
		others[name].stop(t)
		delete(others, name)
	}
	waitFor(t, "tor-a to be the suspect", 5*time.Second, func() bool {
		got := faults()
		return len(got) == 1 && got[0].Group == "tor-a" && strings.Contains(got[0].Reason, "all 2 probed peers of group tor-a are down from every local port while 1 peers of other groups answer")
	})
	if p := a.peer("127.0.0.5"); p.State != apitype.PeerUp {
		t.Errorf("tor-b's peer is %s, want up", p.State)
	}
	if !strings.Contains(logs.String(), `msg="peer group suspect" group=tor-a`) {
		t.Errorf("no log line raising tor-a:\n%s", logs.String())
	}

	others["127.0.0.3"] = startNode(t, f, "127.0.0.3", self, port, 9)
	waitFor(t, "tor-a to be cleared", 10*time.Second, func() bool { return len(faults()) == 0 })
	if !strings.Contains(logs.String(), `msg="peer group no longer suspect" group=tor-a`) {
		t.Errorf("no log line clearing tor-a:\n%s", logs.String())
	}
}

func waitFor(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out after %v waiting for %s", limit, what)
}
