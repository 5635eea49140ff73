package metrics

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/rdmad/rdmad/client/apitype"
)

// parseExposition parses a scrape's text back into metric families, as
// Prometheus would read it.
func parseExposition(t *testing.T, b []byte) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("parse the exposition: %v", err)
	}
	return mfs
}

func labelOf(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// checkHistograms checks every series of the histogram family name: the
// upper bounds are apitype.RTTBounds in order, the cumulative counts never
// fall, the last finite bucket is at most the count (the +Inf bucket, which
// the text format writes as _count's equal, is the count) and the sum is
// not negative. It returns the series by their labels.
func checkHistograms(t *testing.T, mfs map[string]*dto.MetricFamily, name string) map[string]*dto.Histogram {
	t.Helper()
	mf := mfs[name]
	if mf == nil {
		t.Fatalf("%s is not in the scrape", name)
	}
	if mf.GetType() != dto.MetricType_HISTOGRAM {
		t.Fatalf("%s is a %v, want a histogram", name, mf.GetType())
	}
	out := map[string]*dto.Histogram{}
	for _, m := range mf.GetMetric() {
		h := m.GetHistogram()
		key := fmt.Sprint(m.GetLabel())
		out[key] = h
		bs := h.GetBucket()
		// The parser keeps +Inf as a bucket of its own.
		if len(bs) != apitype.NumRTTBuckets+1 {
			t.Fatalf("%s{%s}: %d buckets, want %d and +Inf", name, key, len(bs), apitype.NumRTTBuckets)
		}
		var prev uint64
		for i, b := range bs {
			want := math.Inf(1)
			if i < apitype.NumRTTBuckets {
				want = apitype.RTTBounds[i].Seconds()
			}
			if b.GetUpperBound() != want {
				t.Errorf("%s{%s}: bucket %d has le=%g, want %g", name, key, i, b.GetUpperBound(), want)
			}
			if b.GetCumulativeCount() < prev {
				t.Errorf("%s{%s}: bucket le=%g counts %d, fewer than the one before (%d)", name, key, b.GetUpperBound(), b.GetCumulativeCount(), prev)
			}
			prev = b.GetCumulativeCount()
		}
		if inf := bs[len(bs)-1].GetCumulativeCount(); inf != h.GetSampleCount() {
			t.Errorf("%s{%s}: +Inf bucket %d, count %d", name, key, inf, h.GetSampleCount())
		}
		if h.GetSampleSum() < 0 {
			t.Errorf("%s{%s}: sum %g", name, key, h.GetSampleSum())
		}
	}
	return out
}

// TestRTTHistogramsExposition scrapes a snapshot whose paths answered
// random RTTs across the whole range (and beyond it) and checks the
// histograms as Prometheus parses them: the buckets rise, +Inf is the
// count, each path's count is its probes answered (sent - lost), the
// node's is all of them, and each bucket holds exactly the RTTs at or
// below its bound.
func TestRTTHistogramsExposition(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	snap := &apitype.Snapshot{Peers: apitype.Peers{NodeID: "1", Ports: []apitype.PeerPort{{Key: "rxe0/1"}, {Key: "rxe1/1"}}}}
	var all []time.Duration
	answered := map[string]uint64{}
	for i := range 5 {
		p := apitype.Peer{Name: fmt.Sprintf("192.0.2.%d", i+1), Group: "tor-a", State: "up"}
		for _, local := range []string{"rxe0/1", "rxe1/1"} {
			pa := apitype.PeerPath{Local: local, State: "up", RTTHist: &apitype.SharedRTTHistogram{}}
			n := rng.IntN(200)
			for range n {
				// Log-uniform from 100 ns to 1 s: every bucket, +Inf too.
				d := time.Duration(math.Pow(10, 2+7*rng.Float64()))
				pa.RTTHist.Observe(d)
				snap.Peers.RTTHist.Observe(d)
				all = append(all, d)
			}
			pa.Lost = uint64(rng.IntN(5))
			pa.Sent = uint64(n) + pa.Lost
			answered[p.Name+" "+local] = uint64(n)
			p.Paths = append(p.Paths, pa)
		}
		snap.Peers.Peers = append(snap.Peers.Peers, p)
	}
	snap.Loopback = []apitype.LoopbackPort{{Device: "rxe0", Port: 1, State: "ok",
		Write: apitype.OpStats{Count: 3, RTTHist: rtts(40*time.Microsecond, 2, 3*time.Millisecond, 1)}}}
	mfs := parseExposition(t, []byte(scrapeSnapshot(t, snap)))

	checkHistograms(t, mfs, "rdmad_peer_path_rtt_seconds")
	for _, m := range mfs["rdmad_peer_path_rtt_seconds"].GetMetric() {
		key := labelOf(m, "peer") + " " + labelOf(m, "local")
		if got, want := m.GetHistogram().GetSampleCount(), answered[key]; got != want {
			t.Errorf("path %s: count %d, want the %d probes answered", key, got, want)
		}
	}
	sent, lost := map[string]float64{}, map[string]float64{}
	for _, m := range mfs["rdmad_peer_probes_sent_total"].GetMetric() {
		sent[labelOf(m, "peer")+" "+labelOf(m, "local")] = m.GetCounter().GetValue()
	}
	for _, m := range mfs["rdmad_peer_probes_lost_total"].GetMetric() {
		lost[labelOf(m, "peer")+" "+labelOf(m, "local")] = m.GetCounter().GetValue()
	}
	for key, n := range answered {
		if sent[key]-lost[key] != float64(n) {
			t.Errorf("path %s: sent - lost = %g, the histogram counts %d", key, sent[key]-lost[key], n)
		}
	}

	node := checkHistograms(t, mfs, "rdmad_peer_probe_rtt_seconds")
	if len(node) != 1 {
		t.Fatalf("rdmad_peer_probe_rtt_seconds: %d series, want one without labels", len(node))
	}
	for _, h := range node {
		if h.GetSampleCount() != uint64(len(all)) {
			t.Errorf("node: count %d, want %d", h.GetSampleCount(), len(all))
		}
		for i, b := range h.GetBucket()[:apitype.NumRTTBuckets] {
			var want uint64
			for _, d := range all {
				if d <= apitype.RTTBounds[i] {
					want++
				}
			}
			if b.GetCumulativeCount() != want {
				t.Errorf("node: bucket le=%g counts %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), want)
			}
		}
		var sum time.Duration
		for _, d := range all {
			sum += d
		}
		if math.Abs(h.GetSampleSum()-sum.Seconds()) > 1e-9*float64(len(all)) {
			t.Errorf("node: sum %g, want %g", h.GetSampleSum(), sum.Seconds())
		}
	}

	lb := checkHistograms(t, mfs, "rdmad_loopback_probe_rtt_seconds")
	if len(lb) != 4 {
		t.Errorf("rdmad_loopback_probe_rtt_seconds: %d series, want one per operation (4)", len(lb))
	}
	for _, m := range mfs["rdmad_loopback_probe_rtt_seconds"].GetMetric() {
		want := uint64(0)
		if labelOf(m, "op") == "write" {
			want = 3
		}
		if got := m.GetHistogram().GetSampleCount(); got != want {
			t.Errorf("loopback %s: count %d, want %d", labelOf(m, "op"), got, want)
		}
	}
}

// TestRTTHistogramObserve checks the bucket edges: a bound belongs to its
// own bucket (le is "less or equal"), one nanosecond more to the next, and
// anything beyond the last bound only to the count.
func TestRTTHistogramObserve(t *testing.T) {
	var h apitype.RTTHistogram
	for _, b := range apitype.RTTBounds {
		h.Observe(b)
		h.Observe(b + 1)
	}
	h.Observe(time.Hour)
	cum := h.Cumulative()
	for i := range apitype.RTTBounds {
		// At or below bound i: both observations of every bound up to
		// i, less bound i's +1 ns.
		if want := uint64(2*(i+1) - 1); cum[i] != want {
			t.Errorf("le=%v: %d, want %d", apitype.RTTBounds[i], cum[i], want)
		}
	}
	if h.Count != 2*apitype.NumRTTBuckets+1 {
		t.Errorf("count %d, want %d", h.Count, 2*apitype.NumRTTBuckets+1)
	}
	if allocs := testing.AllocsPerRun(100, func() { h.Observe(3 * time.Microsecond) }); allocs != 0 {
		t.Errorf("Observe allocates %v times", allocs)
	}
}
