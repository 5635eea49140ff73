package metrics

import (
	"slices"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/inventory/ethtool"
)

// --- RoCE netdevs: pause and discard counters -------------------------------

// The pause and discard counters of the RoCE netdevs (the netdevs of the
// Ethernet RDMA ports), read at scrape time through Options.NetStats
// (inventory/ethtool: ethtool netlink and the SIOCETHTOOL ioctl). They are
// named in node_exporter's style, by what they count, with the netdev as a
// label (rdmad_infiniband_port_info joins it to its device and port):
// families of the same unit with a label for the direction, priority or
// counter, rather than node_exporter's ethtool collector's one family per
// driver statistic (node_ethtool_rx_prio3_pause), so that one query covers
// every priority. docs/METRICS.md has the mapping from ethtool -S names.
var (
	netPauseFrames = prometheus.NewDesc("rdmad_net_pause_frames_total",
		"Link-level (IEEE 802.3x) pause frames of the RoCE netdev from the standard pause statistics (ethtool -I -a): direction rx received from the link partner, tx sent to it.",
		[]string{"netdev", "direction"}, nil)
	netPriorityPauseFrames = prometheus.NewDesc("rdmad_net_priority_pause_frames_total",
		"PFC pause frames of one priority (ethtool -S rx_prioN_pause, tx_prioN_pause): direction rx received (the link partner paused this port's sending on the priority), tx sent (this port paused the partner).",
		[]string{"netdev", "direction", "priority"}, nil)
	netPriorityPauseDuration = prometheus.NewDesc("rdmad_net_priority_pause_duration_seconds_total",
		"Time the priority was paused, in seconds (ethtool -S rx_prioN_pause_duration, tx_prioN_pause_duration, which count microseconds): rx by the link partner, tx by this port.",
		[]string{"netdev", "direction", "priority"}, nil)
	netPauseStorms = prometheus.NewDesc("rdmad_net_pause_storm_events_total",
		"Pause storms of the NIC (ethtool -S tx_pause_storm_warning_events, tx_pause_storm_error_events): level warning when it sent pause frames for longer than its watermark, error when it reached the timeout and stopped sending them (drops may follow).",
		[]string{"netdev", "level"}, nil)
	netDiscards = prometheus.NewDesc("rdmad_net_discards_total",
		"Packets the NIC dropped, by the ethtool -S counter (rx_discards_phy, tx_discards_phy, rx_out_of_buffer, rx_prioN_discards, rx_prioN_buf_discard).",
		[]string{"netdev", "counter"}, nil)
	netBufferThreshold = prometheus.NewDesc("rdmad_net_rx_buffer_passed_threshold_events_total",
		"Times the port's receive buffer passed its fill threshold (ethtool -S rx_buffer_passed_thres_phy; mlx5: 85%): congestion, not yet a drop.",
		[]string{"netdev"}, nil)
)

var ethtoolSection = section{
	descs: []*prometheus.Desc{netPauseFrames, netPriorityPauseFrames, netPriorityPauseDuration, netPauseStorms, netDiscards, netBufferThreshold},
	collect: func(c *Collector, s *apitype.Snapshot, ch chan<- prometheus.Metric) {
		if c.opts.NetStats == nil {
			return
		}
		netdevs := roceNetdevs(s)
		if len(netdevs) == 0 {
			return // nothing to read: no collector to report
		}
		c.timed(collectorEthtool, ch, func() bool {
			// The source answers nothing when it cannot read at all
			// (no ethtool netlink, a deadline); a netdev without
			// some of the counters is no failure.
			ncs := c.opts.NetStats(netdevs)
			for _, nc := range ncs {
				collectNetdev(nc, ch)
			}
			return len(ncs) > 0
		})
	},
}

// roceNetdevs returns the netdevs of the snapshot's Ethernet RDMA ports,
// sorted, each once.
func roceNetdevs(s *apitype.Snapshot) []string {
	var out []string
	for _, d := range s.Devices {
		for _, p := range d.Ports {
			if p.LinkLayer == "Ethernet" && p.Netdev != "" && !slices.Contains(out, p.Netdev) {
				out = append(out, p.Netdev)
			}
		}
	}
	slices.Sort(out)
	return out
}

func collectNetdev(nc ethtool.Counters, ch chan<- prometheus.Metric) {
	nd := nc.Netdev
	if p := nc.Pause; p != nil {
		if p.HasRXFrames {
			ch <- counter(netPauseFrames, float64(p.RXFrames), nd, "rx")
		}
		if p.HasTXFrames {
			ch <- counter(netPauseFrames, float64(p.TXFrames), nd, "tx")
		}
	}
	for name, v := range nc.Driver {
		cl, ok := ethtool.Classify(name)
		if !ok {
			continue
		}
		prio := strconv.Itoa(cl.Priority)
		switch cl.Kind {
		case ethtool.PriorityPause:
			ch <- counter(netPriorityPauseFrames, float64(v), nd, cl.Direction, prio)
		case ethtool.PriorityPauseDuration:
			ch <- counter(netPriorityPauseDuration, float64(v)/1e6, nd, cl.Direction, prio)
		case ethtool.PauseStorm:
			ch <- counter(netPauseStorms, float64(v), nd, cl.Level)
		case ethtool.Discard:
			ch <- counter(netDiscards, float64(v), nd, name)
		case ethtool.BufferThreshold:
			ch <- counter(netBufferThreshold, float64(v), nd)
		}
	}
}
