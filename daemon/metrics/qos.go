package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rdmad/rdmad/client/apitype"
)

// --- RoCE netdevs: DCB (QoS) ------------------------------------------------

// The snapshot's QoS list (dcbnl, read at every inventory refresh) as
// metrics. At most 8 series per netdev and family: the DSCP map is
// exported as how many DSCP values each priority receives, not as one
// series per DSCP value (64 per netdev, which a fleet pays for on every
// node while it almost never changes); status and `rdmactl qos` have the
// whole map.
var (
	qosSupported = prometheus.NewDesc("rdmad_qos_supported",
		"1 when rdmad reads the DCB state of the RoCE netdev over dcbnl; 0 when its driver has none (veth, virtio, Soft-RoCE's netdevs) or the read failed (status qos[].error says which).",
		[]string{"netdev"}, nil)
	qosTrust = prometheus.NewDesc("rdmad_qos_trust",
		"1 for the trust mode the RoCE netdev classifies received traffic by (pcp: the VLAN priority; dscp: the IP DSCP through the DSCP map; a kernel trust table with other contents names its selectors, none for an empty one), 0 for the other of pcp and dscp.",
		[]string{"netdev", "mode"}, nil)
	qosPFCEnabled = prometheus.NewDesc("rdmad_qos_pfc_enabled",
		"1 when priority flow control is on for the priority of the RoCE netdev, else 0 (only for netdevs whose driver reports PFC).",
		[]string{"netdev", "priority"}, nil)
	qosDSCPMapped = prometheus.NewDesc("rdmad_qos_dscp_mapped",
		"How many DSCP values (of 64) the RoCE netdev's DSCP map sends to the priority (APP table entries with the DSCP selector).",
		[]string{"netdev", "priority"}, nil)
	qosPrioTC = prometheus.NewDesc("rdmad_qos_priority_traffic_class",
		"The ETS traffic class the priority of the RoCE netdev is queued in (only for netdevs whose driver reports ETS).",
		[]string{"netdev", "priority"}, nil)
	qosTCBandwidth = prometheus.NewDesc("rdmad_qos_traffic_class_bandwidth_percent",
		"The ETS traffic class's share of the link in percent, with its transmission selection algorithm (tsa: ets, strict, cbs, vendor).",
		[]string{"netdev", "tc", "tsa"}, nil)
)

var qosSection = section{
	descs: []*prometheus.Desc{qosSupported, qosTrust, qosPFCEnabled, qosDSCPMapped, qosPrioTC, qosTCBandwidth},
	collect: func(c *Collector, s *apitype.Snapshot, ch chan<- prometheus.Metric) {
		for _, q := range s.QoS {
			ch <- gauge(qosSupported, b2f(q.Supported), q.Netdev)
			if !q.Supported {
				continue
			}
			for _, m := range []string{apitype.TrustPCP, apitype.TrustDSCP} {
				ch <- gauge(qosTrust, b2f(q.Trust == m), q.Netdev, m)
			}
			switch q.Trust {
			case apitype.TrustPCP, apitype.TrustDSCP:
			case "":
				ch <- gauge(qosTrust, 1, q.Netdev, "none") // an empty trust table
			default:
				ch <- gauge(qosTrust, 1, q.Netdev, q.Trust)
			}
			// A DSCP value counts once, for the priority the NIC goes by
			// (the first of the kernel's entries for it).
			var mapped [8]int
			seen := map[int]bool{}
			for _, m := range q.DSCP {
				if !seen[m.DSCP] && m.Priority >= 0 && m.Priority < len(mapped) {
					mapped[m.Priority]++
				}
				seen[m.DSCP] = true
			}
			for p := range 8 {
				prio := strconv.Itoa(p)
				if q.HasPFC {
					ch <- gauge(qosPFCEnabled, b2f(q.PFCOn(p)), q.Netdev, prio)
				}
				ch <- gauge(qosDSCPMapped, float64(mapped[p]), q.Netdev, prio)
				if q.ETS != nil && p < len(q.ETS.PrioTC) {
					ch <- gauge(qosPrioTC, float64(q.ETS.PrioTC[p]), q.Netdev, prio)
				}
			}
			if q.ETS != nil {
				for _, tc := range q.ETS.TCs {
					ch <- gauge(qosTCBandwidth, float64(tc.Bandwidth), q.Netdev, strconv.Itoa(tc.TC), tc.TSA)
				}
			}
		}
	},
}
