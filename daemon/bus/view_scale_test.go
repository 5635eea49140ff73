package bus

import (
	"testing"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/internal/rusage"
	"github.com/rdmad/rdmad/test/bench/peersnap"
)

// The D-Bus service's share of a publish at scale (docs/BENCHMARKS.md, "Peer
// probes at scale (host)"): every snapshot the peer probes publish (once a
// second at 1 Hz) makes the service build the view of it and the signals
// from the previous one (service.go, session). Each op is one publish of
// n peers whose statistics moved; core-% is its CPU time at one publish a
// second, in percent of one core.
//
//	go test -run '^$' -bench 'PeersPublish' ./daemon/bus

func BenchmarkPeersPublish100(b *testing.B)   { benchPublish(b, 100) }
func BenchmarkPeersPublish1000(b *testing.B)  { benchPublish(b, 1000) }
func BenchmarkPeersPublish10000(b *testing.B) { benchPublish(b, 10000) }

func benchPublish(b *testing.B, n int) {
	snaps := []*apitype.Snapshot{peersnap.Snapshot(n, 1), peersnap.Snapshot(n, 2)}
	cur := newView(snaps[0])
	i := 0
	b.ReportAllocs()
	cpu0 := rusage.CPU()
	for b.Loop() {
		i++
		next := newView(snaps[i%2])
		if sigs := changes(cur, next); len(sigs) != 0 {
			b.Fatalf("%d signals between two publishes in which only statistics moved: %v", len(sigs), sigs)
		}
		cur = next
	}
	b.ReportMetric(100*(rusage.CPU()-cpu0).Seconds()/float64(b.N), "core-%")
}
