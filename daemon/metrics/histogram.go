package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/rdmad/rdmad/client/apitype"
)

// --- RTT histograms -----------------------------------------------------------
//
// The probes count every RTT into apitype.RTTBounds' buckets as they take
// it (cumulative counters since the prober started); a scrape exposes the
// counts of the snapshot. Classic buckets, the same on every node, so that
// a fleet's p99 is histogram_quantile(0.99, sum by (le) (rate(..._bucket[5m]))).

var (
	peerProbeRTTHist = prometheus.NewDesc("rdmad_peer_probe_rtt_seconds",
		"Round-trip time of every answered peer probe, all peers and paths of this node together, as this node measured it (the responder's host delay included).", nil, nil)
	peerPathRTTHist = prometheus.NewDesc("rdmad_peer_path_rtt_seconds",
		"Round-trip time of the answered probes on the path, as this node measured it (the responder's host delay included).", []string{"peer", "group", "local"}, nil)
	loopbackRTTHist = prometheus.NewDesc("rdmad_loopback_probe_rtt_seconds",
		"Round-trip time of the loopback probe's successful operations on the port, from posting to completion.", []string{"device", "port", "op"}, nil)
)

// rttUpper are the buckets' upper bounds in seconds, shared by every series.
var rttUpper = func() (out [apitype.NumRTTBuckets]float64) {
	for i, b := range apitype.RTTBounds {
		out[i] = b.Seconds()
	}
	return out
}()

// rttHist returns h as a constant histogram (for the few series of the
// node and the loopback ports; the per-path ones are rttSeries).
func rttHist(d *prometheus.Desc, h *apitype.RTTHistogram, labels ...string) prometheus.Metric {
	cum := h.Cumulative()
	buckets := make(map[float64]uint64, len(cum))
	for i, n := range cum {
		buckets[rttUpper[i]] = n
	}
	return prometheus.MustNewConstHistogram(d, h.Count, h.Sum.Seconds(), buckets, labels...)
}

// An rttSeries is one path's histogram: a prometheus.Metric over label
// pairs its peer's series share, its buckets in the same allocation
// (ten thousand peers must not cost a map and 17 label copies each).
type rttSeries struct {
	desc    *prometheus.Desc
	labels  []*dto.LabelPair
	h       dto.Histogram
	count   uint64
	sum     float64
	cum     [apitype.NumRTTBuckets]uint64
	buckets [apitype.NumRTTBuckets]dto.Bucket
	ptrs    [apitype.NumRTTBuckets]*dto.Bucket
}

func (m *rttSeries) Desc() *prometheus.Desc { return m.desc }

func (m *rttSeries) Write(out *dto.Metric) error {
	out.Label = m.labels
	out.Histogram = &m.h
	return nil
}

// set fills m with h's counts.
func (m *rttSeries) set(desc *prometheus.Desc, labels []*dto.LabelPair, h *apitype.RTTHistogram) {
	m.desc, m.labels = desc, labels
	m.count, m.sum, m.cum = h.Count, h.Sum.Seconds(), h.Cumulative()
	for i := range m.buckets {
		m.buckets[i].CumulativeCount = &m.cum[i]
		m.buckets[i].UpperBound = &rttUpper[i]
		m.ptrs[i] = &m.buckets[i]
	}
	m.h.SampleCount, m.h.SampleSum, m.h.Bucket = &m.count, &m.sum, m.ptrs[:]
}
