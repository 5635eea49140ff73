package state

import (
	"slices"
	"testing"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/test/bench/peersnap"
)

// peersByName is comparePeers as it was, two maps of the peers: the
// reference the side-by-side walk must agree with.
func peersByName(prev, next []apitype.Peer) []PeerChange {
	var out []PeerChange
	before := map[string]string{}
	for _, p := range prev {
		before[p.Name] = p.State
	}
	seen := map[string]bool{}
	for _, p := range next {
		seen[p.Name] = true
		from, ok := before[p.Name]
		if !ok {
			from = apitype.PeerUnknown
		}
		if from != p.State {
			out = append(out, PeerChange{Name: p.Name, From: from, To: p.State, Reason: p.Reason})
		}
	}
	for _, p := range prev {
		if !seen[p.Name] {
			out = append(out, PeerChange{Name: p.Name, From: p.State, Removed: true})
		}
	}
	return out
}

// TestComparePeers: the peer changes are those of matching the peers by
// name, whether the lists are one, hold the same peers in the same order
// (a publish of the peer manager), or not (a peer came, went, or moved).
func TestComparePeers(t *testing.T) {
	peer := func(name, st string) apitype.Peer { return apitype.Peer{Name: name, State: st, Reason: "r-" + name} }
	a := []apitype.Peer{peer("10.0.0.1", "up"), peer("10.0.0.2", "up"), peer("10.0.0.3", "down")}
	cases := map[string][2][]apitype.Peer{
		"one list":      {a, a},
		"none":          {nil, {}},
		"states moved":  {a, {peer("10.0.0.1", "down"), peer("10.0.0.2", "up"), peer("10.0.0.3", "up")}},
		"a peer came":   {a, {peer("10.0.0.1", "up"), peer("10.0.0.2", "up"), peer("10.0.0.3", "down"), peer("10.0.0.4", "up")}},
		"a peer went":   {a, {peer("10.0.0.1", "up"), peer("10.0.0.3", "up")}},
		"one replaced":  {a, {peer("10.0.0.1", "up"), peer("10.0.0.9", "up"), peer("10.0.0.3", "down")}},
		"reordered":     {a, {peer("10.0.0.3", "up"), peer("10.0.0.1", "up"), peer("10.0.0.2", "degraded")}},
		"from nothing":  {nil, a},
		"to nothing":    {a, nil},
		"last replaced": {a, {peer("10.0.0.1", "up"), peer("10.0.0.2", "down"), peer("10.0.0.7", "down")}},
	}
	for name, c := range cases {
		got, want := comparePeers(c[0], c[1]), peersByName(c[0], c[1])
		if !slices.Equal(got, want) {
			t.Errorf("%s: %+v, want %+v", name, got, want)
		}
	}
	if got := comparePeers(a, slices.Clone(a)); got != nil {
		t.Errorf("an unchanged copy: %+v, want none", got)
	}
}

// The watch stream's and D-Bus's share of a publish at scale: one
// comparison of two peer manager states of n peers (the states of some
// peers moved).
//
//	go test -run '^$' -bench 'Compare' ./daemon/state

func BenchmarkCompare1000(b *testing.B)  { benchCompare(b, 1000) }
func BenchmarkCompare10000(b *testing.B) { benchCompare(b, 10000) }

func benchCompare(b *testing.B, n int) {
	prev, next := peersnap.Snapshot(n, 1), peersnap.Snapshot(n, 2)
	for i := 0; i < n; i += 100 {
		next.Peers.Peers[i].State = apitype.PeerDown
	}
	want := len(peersByName(prev.Peers.Peers, next.Peers.Peers))
	b.ReportAllocs()
	for b.Loop() {
		if d := Compare(prev, next); len(d.Peers) != want {
			b.Fatalf("%d peer changes, want %d", len(d.Peers), want)
		}
	}
}
