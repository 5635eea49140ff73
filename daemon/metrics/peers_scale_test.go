package metrics

import (
	"testing"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/internal/rusage"
	"github.com/rdmad/rdmad/test/bench/peersnap"
)

// The metrics' share at scale (docs/BENCHMARKS.md, "Peer probes at scale
// (host)"): one collection (what a scrape does before it encodes) of a
// snapshot of n peers whose statistics moved since the last one. The
// Collector works at scrape time only; core-% counts one collection per
// publish (a second at 1 Hz), an upper bound for scrapes every 15 s or
// more.
//
//	go test -run '^$' -bench 'PeersCollect' ./daemon/metrics

func BenchmarkPeersCollect100(b *testing.B)   { benchCollect(b, 100) }
func BenchmarkPeersCollect1000(b *testing.B)  { benchCollect(b, 1000) }
func BenchmarkPeersCollect10000(b *testing.B) { benchCollect(b, 10000) }

func benchCollect(b *testing.B, n int) {
	snaps := []*apitype.Snapshot{peersnap.Snapshot(n, 1), peersnap.Snapshot(n, 2)}
	i := 0
	reg := NewRegistry(NewCollector(Options{Snapshot: func() *apitype.Snapshot { return snaps[i%2] }, SysfsRoot: b.TempDir()}), false)
	b.ReportAllocs()
	cpu0 := rusage.CPU()
	for b.Loop() {
		i++
		mfs, err := reg.Gather()
		if err != nil || len(mfs) == 0 {
			b.Fatalf("Gather: %d families, %v", len(mfs), err)
		}
	}
	b.ReportMetric(100*(rusage.CPU()-cpu0).Seconds()/float64(b.N), "core-%")
}
