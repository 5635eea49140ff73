package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/rdmad/rdmad/client/apitype"
)

// --- bandwidth tests (rdmactl bw) -------------------------------------------

// The snapshot's bandwidth part: whether this node answers other nodes'
// tests, what it served and refused, and the last test it ran itself
// (one series: the labels name that test's peer and operation).
var (
	bwEnabled = prometheus.NewDesc("rdmad_bandwidth_enabled",
		"1 when this node answers other nodes' RC bandwidth tests ([probe] bandwidth = true), else 0.", nil, nil)
	bwServed = prometheus.NewDesc("rdmad_bandwidth_tests_served_total",
		"RC bandwidth tests this node accepted as responder since rdmad started.", nil, nil)
	bwRefused = prometheus.NewDesc("rdmad_bandwidth_requests_refused_total",
		"Bandwidth test requests this node refused, by reason (disabled, busy, bad_request, unavailable).", []string{"reason"}, nil)
	bwLastGbps = prometheus.NewDesc("rdmad_bandwidth_last_gbps",
		"Gb/s of the last bandwidth test this node ran (rdmactl bw), to the peer with the operation.", []string{"peer", "op"}, nil)
	bwLastMsgRate = prometheus.NewDesc("rdmad_bandwidth_last_messages_per_second",
		"Messages per second of the last bandwidth test this node ran (rdmactl bw).", []string{"peer", "op"}, nil)
	bwLastTime = prometheus.NewDesc("rdmad_bandwidth_last_timestamp_seconds",
		"When the last bandwidth test this node ran ended, as a Unix time.", []string{"peer", "op"}, nil)
)

var bandwidthSection = section{
	descs: []*prometheus.Desc{bwEnabled, bwServed, bwRefused, bwLastGbps, bwLastMsgRate, bwLastTime},
	collect: func(c *Collector, s *apitype.Snapshot, ch chan<- prometheus.Metric) {
		b := s.Bandwidth
		if b == nil {
			return
		}
		ch <- gauge(bwEnabled, b2f(b.Enabled))
		ch <- counter(bwServed, float64(b.Served))
		for reason, n := range b.Refused {
			ch <- counter(bwRefused, float64(n), reason)
		}
		if l := b.Last; l != nil {
			ch <- gauge(bwLastGbps, l.Gbps, l.Peer, l.Op)
			ch <- gauge(bwLastMsgRate, l.MsgRate, l.Peer, l.Op)
			ch <- gauge(bwLastTime, float64(l.Time.UnixNano())/1e9, l.Peer, l.Op)
		}
	},
}
