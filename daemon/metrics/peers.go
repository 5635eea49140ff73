package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/rdmad/rdmad/client/apitype"
)

// --- peer probes ------------------------------------------------------------

var (
	peerUp = prometheus.NewDesc("rdmad_peer_up",
		"1 when the peer is up (answers probes within the thresholds), else 0.", []string{"peer", "group"}, nil)
	peerState = prometheus.NewDesc("rdmad_peer_state",
		"1 for the peer's current state: unknown, up, degraded or down.", []string{"peer", "group", "state"}, nil)
	peerInfo = prometheus.NewDesc("rdmad_peer_info",
		"A probed peer and the node id it answered with (empty until it answered); always 1.", []string{"peer", "group", "node_id"}, nil)
	peerNodeInfo = prometheus.NewDesc("rdmad_peer_node_info",
		"The node id this node answers its peers with (the node_id of rdmad_peer_info on the other nodes); always 1.", []string{"node_id"}, nil)
	peerRTT = prometheus.NewDesc("rdmad_peer_rtt_seconds",
		"Probe round-trip time on the path as this node measured it, the responder's host delay included: stat p50, p99 or last.", []string{"peer", "group", "local", "stat"}, nil)
	peerClockOffset = prometheus.NewDesc("rdmad_peer_clock_offset_seconds",
		"How far the peer's realtime clock is ahead of this node's (negative: behind), from the control exchange's timestamps (NTP's on-wire method, the best of the recent exchanges); only once the peer sent timestamps.", []string{"peer", "group"}, nil)
	peerClockError = prometheus.NewDesc("rdmad_peer_clock_offset_error_seconds",
		"Error bound of rdmad_peer_clock_offset_seconds: the true offset lies within offset plus or minus this (half the exchange's round trip less the peer's claimed hold).", []string{"peer", "group"}, nil)
	peerHostDelay = prometheus.NewDesc("rdmad_peer_host_delay_p99_seconds",
		"p99 of the time the peer says its host held the probe between receiving and answering it (its claim; not taken out of the RTT).", []string{"peer", "group", "local"}, nil)
	peerLoss = prometheus.NewDesc("rdmad_peer_loss_ratio",
		"Share of the last window's probes on the path that went unanswered (0 to 1).", []string{"peer", "group", "local"}, nil)
	peerSent = prometheus.NewDesc("rdmad_peer_probes_sent_total",
		"Probes sent on the path.", []string{"peer", "group", "local"}, nil)
	peerLost = prometheus.NewDesc("rdmad_peer_probes_lost_total",
		"Probes on the path that went unanswered.", []string{"peer", "group", "local"}, nil)
	peerLossyFlows = prometheus.NewDesc("rdmad_peer_path_lossy_flows",
		"Probe flows ([probe] flows: UDP source ports, so ECMP paths of the fabric) of the path that are lossy now; some lossy while others are clean makes the path degraded.", []string{"peer", "group", "local"}, nil)
	peerControl = prometheus.NewDesc("rdmad_peer_control_messages_total",
		"Control endpoint messages by outcome: answered, refused (source not allowed), malformed, unauthenticated (no tag while the fleet key is required), bad_tag, rate_limited or overflow (dropped by the kernel: the socket's receive buffer was full).", []string{"outcome"}, nil)
	peerLocalFault = prometheus.NewDesc("rdmad_peer_local_fault",
		"1 while every peer (at least two) is down from this local port: the port, its link or this host is the likelier fault.", []string{"local"}, nil)
	peerPortStuck = prometheus.NewDesc("rdmad_peer_port_stuck",
		"1 while this local port is cut off from the probes because its post of probes (ibv_post_send) has not returned for more than a second: its paths are unknown, the other ports are probed as usual, and DaemonDegraded names it.", []string{"local"}, nil)
	peerGroupFault = prometheus.NewDesc("rdmad_peer_group_fault",
		"1 while every probed peer (at least two) of the group is down from every local port and peers of other groups answer: the group's switch or uplink is the likelier fault.", []string{"group"}, nil)
	peerMismatches = prometheus.NewDesc("rdmad_peer_fingerprint_mismatches",
		"Probed peers whose fingerprint disagrees with this node's on the field (mtu, active_mtu, link_layer, roce_mode, roce_tos, trust, pfc, firmware, driver) on some path.", []string{"field"}, nil)
	peerNotSent = prometheus.NewDesc("rdmad_peer_probes_not_sent_total",
		"Probes this node could not post (all send slots in flight, or the port being rebuilt); not counted as lost.", nil, nil)
	peerProbesIn = prometheus.NewDesc("rdmad_peer_probes_received_total",
		"Probe payloads received by outcome: answered (probes of other nodes), unadmitted (sender did not query first), malformed, unsolicited (a reply matching no probe in flight), bad_tag or untagged (no tag while the fleet key is required).", []string{"outcome"}, nil)
)

var peerStates = []string{"unknown", "up", "degraded", "down"}

var peerSection = section{
	descs: []*prometheus.Desc{peerInfo, peerNodeInfo, peerUp, peerState, peerRTT, peerHostDelay, peerLoss, peerSent, peerLost, peerLossyFlows, peerControl, peerProbesIn, peerLocalFault, peerPortStuck, peerGroupFault, peerNotSent, peerMismatches, peerProbeRTTHist, peerPathRTTHist, peerClockOffset, peerClockError},
	collect: func(c *Collector, s *apitype.Snapshot, ch chan<- prometheus.Metric) {
		if s.Peers.NodeID != "" {
			ch <- gauge(peerNodeInfo, 1, s.Peers.NodeID)
		}
		for i := range s.Peers.Peers {
			collectPeer(&s.Peers.Peers[i], ch)
		}
		for _, lp := range s.Peers.Ports {
			ch <- gauge(peerLocalFault, b2f(lp.LocalFault != ""), lp.Key)
			ch <- gauge(peerPortStuck, b2f(lp.Stuck != ""), lp.Key)
		}
		// Every group of a probed peer, 1 for the suspects: a cleared
		// fault reads 0 rather than vanishing.
		groups := map[string]bool{}
		for _, p := range s.Peers.Peers {
			if p.Group != "" {
				groups[p.Group] = false
			}
		}
		for _, g := range s.Peers.GroupFaults {
			groups[g.Group] = true
		}
		for g, fault := range groups {
			ch <- gauge(peerGroupFault, b2f(fault), g)
		}
		k := s.Peers.Counters
		if len(s.Peers.Ports) > 0 || len(s.Peers.Peers) > 0 {
			// Every field, 0 when no peer mismatches on it: a cleared
			// mismatch reads 0 rather than vanishing.
			count := make(map[string]int, len(apitype.MismatchFields))
			for _, f := range apitype.MismatchFields {
				count[f] = 0
			}
			for _, p := range s.Peers.Peers {
				seen := map[string]bool{}
				for _, x := range p.Mismatches {
					if !seen[x.Field] {
						seen[x.Field] = true
						count[x.Field]++
					}
				}
			}
			for f, n := range count {
				ch <- gauge(peerMismatches, float64(n), f)
			}
			ch <- rttHist(peerProbeRTTHist, &s.Peers.RTTHist)
			ch <- counter(peerNotSent, float64(k.ProbesNotSent))
			ch <- counter(peerControl, float64(k.ControlAnswered), "answered")
			ch <- counter(peerControl, float64(k.ControlRefused), "refused")
			ch <- counter(peerControl, float64(k.ControlMalformed), "malformed")
			ch <- counter(peerControl, float64(k.ControlUnauthenticated), "unauthenticated")
			ch <- counter(peerControl, float64(k.ControlBadTag), "bad_tag")
			ch <- counter(peerControl, float64(k.ControlRateLimited), "rate_limited")
			ch <- counter(peerControl, float64(k.ControlOverflow), "overflow")
			ch <- counter(peerProbesIn, float64(k.ProbesAnswered), "answered")
			ch <- counter(peerProbesIn, float64(k.ProbeUnadmitted), "unadmitted")
			ch <- counter(peerProbesIn, float64(k.ProbeMalformed), "malformed")
			ch <- counter(peerProbesIn, float64(k.ProbeUnsolicited), "unsolicited")
			ch <- counter(peerProbesIn, float64(k.ProbeBadTag), "bad_tag")
			ch <- counter(peerProbesIn, float64(k.ProbeUntagged), "untagged")
		}
	},
}

// --- per peer, at scale -------------------------------------------------------
//
// A node probing ten thousand peers exports some 130,000 peer series.
// prometheus.MustNewConstMetric checks and copies the labels of each (some
// 17 allocations per series, 2.3 million per scrape); the series below share
// the label pairs of their peer and path and are allocated a peer at a
// time. The labels are in name order, as the registry wants them.

var (
	nameGroup, nameLocal, nameNodeID, namePeer, nameStat, nameState = "group", "local", "node_id", "peer", "stat", "state"
	// statPairs and statePairs are the stat and state labels' pairs.
	statPairs  = [3]*dto.LabelPair{{Name: &nameStat, Value: new("p50")}, {Name: &nameStat, Value: new("p99")}, {Name: &nameStat, Value: new("last")}}
	statePairs = func() []*dto.LabelPair {
		out := make([]*dto.LabelPair, len(peerStates))
		for i := range peerStates {
			out[i] = &dto.LabelPair{Name: &nameState, Value: &peerStates[i]}
		}
		return out
	}()
)

// A peerSeries is one sample of a peer's or a path's: it implements
// prometheus.Metric over label pairs its peer's series share.
type peerSeries struct {
	desc    *prometheus.Desc
	labels  []*dto.LabelPair
	value   float64
	gauge   dto.Gauge
	counter dto.Counter
	isCount bool
}

func (m *peerSeries) Desc() *prometheus.Desc { return m.desc }

func (m *peerSeries) Write(out *dto.Metric) error {
	out.Label = m.labels
	if m.isCount {
		out.Counter = &m.counter
	} else {
		out.Gauge = &m.gauge
	}
	return nil
}

// A peerLabels holds the label values and pairs of one peer.
type peerLabels struct {
	name, group, nodeID  string
	pName, pGroup, pNode dto.LabelPair
}

// A pathLabels holds the local label of one path.
type pathLabels struct {
	local  string
	pLocal dto.LabelPair
}

// collectPeer sends p's series: info, up and state, and per path the RTT,
// host delay and loss (once it has samples) and the probe counters. Path
// series carry the peer's group, so that a query over paths can group them
// by ToR without a join.
func collectPeer(p *apitype.Peer, ch chan<- prometheus.Metric) {
	pl := &peerLabels{name: p.Name, group: p.Group, nodeID: p.NodeID}
	pl.pName = dto.LabelPair{Name: &namePeer, Value: &pl.name}
	pl.pGroup = dto.LabelPair{Name: &nameGroup, Value: &pl.group}
	pl.pNode = dto.LabelPair{Name: &nameNodeID, Value: &pl.nodeID}
	// info (group, node_id, peer), up (group, peer), state (group, peer,
	// state) x 4.
	pairs := make([]*dto.LabelPair, 0, 3+2+3*len(peerStates))
	pairs = append(pairs, &pl.pGroup, &pl.pNode, &pl.pName, &pl.pGroup, &pl.pName)
	info, up := pairs[0:3:3], pairs[3:5:5]
	series := make([]peerSeries, 0, 4+len(peerStates)+8*len(p.Paths))
	send := func(desc *prometheus.Desc, labels []*dto.LabelPair, v float64, count bool) {
		series = append(series, peerSeries{desc: desc, labels: labels, value: v, isCount: count})
		m := &series[len(series)-1]
		if count {
			m.counter.Value = &m.value
		} else {
			m.gauge.Value = &m.value
		}
		ch <- m
	}
	send(peerInfo, info, 1, false)
	send(peerUp, up, b2f(p.State == "up"), false)
	for i, st := range peerStates {
		k := len(pairs)
		pairs = append(pairs, &pl.pGroup, &pl.pName, statePairs[i])
		send(peerState, pairs[k:k+3:k+3], b2f(p.State == st), false)
	}
	if p.ClockSamples > 0 {
		send(peerClockOffset, up, p.ClockOffset.Seconds(), false)
		send(peerClockError, up, p.ClockOffsetError.Seconds(), false)
	}
	if len(p.Paths) == 0 {
		return
	}
	paths := make([]pathLabels, len(p.Paths))
	hists := make([]rttSeries, len(p.Paths))
	// Per path: (group, local, peer) and (group, local, peer, stat) x 3.
	pp := make([]*dto.LabelPair, 0, 15*len(p.Paths))
	for i := range p.Paths {
		path := &p.Paths[i]
		pa := &paths[i]
		pa.local = path.Local
		pa.pLocal = dto.LabelPair{Name: &nameLocal, Value: &pa.local}
		k := len(pp)
		pp = append(pp, &pl.pGroup, &pa.pLocal, &pl.pName)
		l := pp[k : k+3 : k+3]
		if path.Samples > 0 {
			for j, v := range []time.Duration{path.RTTP50, path.RTTP99, path.LastRTT} {
				k := len(pp)
				pp = append(pp, &pl.pGroup, &pa.pLocal, &pl.pName, statPairs[j])
				send(peerRTT, pp[k:k+4:k+4], v.Seconds(), false)
			}
			send(peerHostDelay, l, path.HostDelayP99.Seconds(), false)
			send(peerLoss, l, path.LossPct/100, false)
		}
		send(peerSent, l, float64(path.Sent), true)
		send(peerLost, l, float64(path.Lost), true)
		send(peerLossyFlows, l, float64(path.LossyFlows), false)
		h := path.RTTHist.Load()
		hists[i].set(peerPathRTTHist, l, &h)
		ch <- &hists[i]
	}
}
