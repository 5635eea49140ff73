package state

import (
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
