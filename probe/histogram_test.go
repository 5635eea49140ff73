package probe

import (
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
)

// TestRTTHistogramCounts runs rounds of probes with a loss on another peer
// each round and a peer dropped from the selection midway, and checks the
// histograms the state carries: each path counts exactly its probes
// answered (sent - lost), every one in the bucket of the RTT it answered
// with, and the node's histogram all answered probes, the dropped peer's
// included.
func TestRTTHistogramCounts(t *testing.T) {
	m := resolvedManager(t, 10)
	peers := m.peers.inOrder()
	now := time.Now()
	for round := range 50 {
		now = now.Add(time.Second)
		probeRound(m, peers, round%len(peers), now)
	}
	var answered uint64
	dropped := peers[3]
	for _, pa := range dropped.paths {
		answered += pa.sent - pa.lost
	}
	m.drop(dropped)
	peers = m.peers.inOrder()
	for round := range 20 {
		now = now.Add(time.Second)
		probeRound(m, peers, round%len(peers), now)
	}
	st := m.State()
	// probeRound answers every probe with an RTT of 30 µs: bucket 50 µs.
	bucket := 0
	for bucket < apitype.NumRTTBuckets && apitype.RTTBounds[bucket] < 30*time.Microsecond {
		bucket++
	}
	for _, p := range st.Peers {
		for _, pa := range p.Paths {
			h := pa.RTTHist.Load()
			if pa.Sent-pa.Lost == 0 || pa.Lost == 0 {
				t.Fatalf("peer %s path %s: sent %d lost %d; the scenario should answer and lose probes on every path", p.Name, pa.Local, pa.Sent, pa.Lost)
			}
			if h.Count != pa.Sent-pa.Lost {
				t.Errorf("peer %s path %s: histogram counts %d, sent %d - lost %d = %d answered", p.Name, pa.Local, h.Count, pa.Sent, pa.Lost, pa.Sent-pa.Lost)
			}
			if h.Buckets[bucket] != h.Count || h.Sum != time.Duration(h.Count)*30*time.Microsecond {
				t.Errorf("peer %s path %s: buckets %v sum %v, want all %d in le=%v", p.Name, pa.Local, h.Buckets, h.Sum, h.Count, apitype.RTTBounds[bucket])
			}
			answered += h.Count
		}
	}
	if st.Peers[0].Paths[0].RTTHist.Load().Count == 0 || st.RTTHist.Count != answered {
		t.Errorf("node histogram counts %d, the paths answered %d (the dropped peer's included)", st.RTTHist.Count, answered)
	}
}
