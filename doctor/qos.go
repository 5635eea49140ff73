package doctor

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/rdmad/rdmad/client/apitype"
)

// The pfc and dscp-trust checks judge two things:
//
//   - what a [policy.qos] declares against what the netdev has (the policy
//     targets), as before;
//   - the DCB state every RoCE netdev runs, declared or not (the snapshot's
//     QoS list, or read now through Env.QoS): PFC must be on for the
//     priority RoCE traffic is classified into, and a port that RoCE sends
//     DSCP-marked traffic to must trust DSCP and map that DSCP.
//
// The priority of RoCE traffic follows from its ToS (RoCE v2: the IP ToS
// byte; DSCP = ToS >> 2) through the netdev's DSCP map when it trusts
// DSCP. rdmad knows the ToS from the [policy.roce] tos of a port over the
// netdev, else from the traffic class its probes use there when that is
// not 0 ([probe] traffic_class).

// observedQoS returns the DCB state of the RoCE netdevs the snapshot
// lists, each read again through e.QoS when it is set (once per Env).
func (e *Env) observedQoS() []apitype.NetdevQoS {
	e.qosOnce.Do(func() {
		if e.Snapshot == nil {
			return
		}
		e.qos = slices.Clone(e.Snapshot.QoS)
		if e.QoS != nil {
			for i, q := range e.qos {
				e.qos[i] = e.QoS(q.Netdev, q.Device)
			}
		}
	})
	return e.qos
}

// roceToS is the ToS RoCE traffic over a netdev carries, as far as rdmad
// knows it, and where that comes from.
type roceToS struct {
	tos int
	src string
}

// dscp is the DSCP of the ToS.
func (t roceToS) dscp() int { return t.tos >> 2 }

func (t roceToS) String() string {
	return fmt.Sprintf("ToS %d from %s, DSCP %d", t.tos, t.src, t.dscp())
}

// roceToSOf returns the ToS of RoCE traffic over netdev: the RDMA-CM
// default ToS of a port over it that a [policy.roce] tos manages (what the
// kernel has), else the traffic class of rdmad's probes on such a port
// when it is not 0; false when neither says.
func roceToSOf(s *apitype.Snapshot, netdev string) (roceToS, bool) {
	var ports []string
	for _, d := range s.Devices {
		for _, p := range d.Ports {
			if p.Netdev == netdev {
				ports = append(ports, fmt.Sprintf("%s/%d", d.Name, p.Port))
			}
		}
	}
	for _, pol := range s.Policy.Policies {
		for _, t := range pol.Targets {
			if t.Kind != "roce" || !slices.Contains(ports, t.Object) {
				continue
			}
			v, ok := qosField(t.Actual, "tos")
			if !ok {
				v, ok = qosField(t.Desired, "tos")
			}
			if tos, err := strconv.Atoi(v); ok && err == nil {
				return roceToS{tos, fmt.Sprintf("[policy.roce] tos of %s", t.Object)}, true
			}
		}
	}
	for _, l := range s.Loopback {
		if l.TrafficClass != 0 && slices.Contains(ports, fmt.Sprintf("%s/%d", l.Device, l.Port)) {
			return roceToS{int(l.TrafficClass), fmt.Sprintf("the probes' traffic class on %s/%d", l.Device, l.Port)}, true
		}
	}
	return roceToS{}, false
}

// trustsDSCP reports whether q classifies by DSCP first.
func trustsDSCP(q apitype.NetdevQoS) bool {
	return q.Trust == apitype.TrustDSCP || strings.HasPrefix(q.Trust, apitype.TrustDSCP+" ")
}

// ecnOn returns the priorities on which DCQCN's np and rp are both on for
// netdev, from the snapshot.
func ecnOn(s *apitype.Snapshot, netdev string) []int {
	var out []int
	for _, n := range s.ECN {
		if n.Netdev != netdev {
			continue
		}
		for _, p := range n.NP {
			if slices.Contains(n.RP, p) {
				out = append(out, p)
			}
		}
	}
	return out
}

// pfcMask is mlnx_qos's --pfc argument that enables PFC on prio alone.
func pfcMask(prio int) string {
	m := make([]string, 8)
	for i := range m {
		m[i] = "0"
	}
	m[prio] = "1"
	return strings.Join(m, ",")
}

func checkPFC(e *Env) Result {
	if e.Snapshot == nil {
		return notReachable(e)
	}
	var c collector
	declared := policyQoS(e, &c, "pfc", "PFC")
	var notes []string
	for _, q := range e.observedQoS() {
		if n := observedPFC(e, &c, q, declared[q.Netdev]); n != "" {
			notes = append(notes, n)
		}
	}
	if len(notes) == 0 {
		notes = append(notes, "no RoCE netdev whose DCB state rdmad reads, and no [policy.qos] pfc in rdmad's configuration")
	}
	return c.result(strings.Join(notes, "; "))
}

// observedPFC judges the PFC state q runs, into c, or returns a note when
// there is nothing to judge.
func observedPFC(e *Env, c *collector, q apitype.NetdevQoS, declared bool) string {
	nd := q.Netdev
	switch {
	case !q.Supported:
		if declared {
			return "" // the policy's target says it
		}
		return nd + ": " + q.Error
	case !q.HasPFC:
		return nd + ": its driver reports no PFC object over dcbnl"
	}
	lossy := ""
	if ecn := ecnOn(e.Snapshot, nd); len(q.PFCEnabled) == 0 && len(ecn) > 0 {
		lossy = fmt.Sprintf("%s: PFC off on every priority: lossy RoCE, with ECN (DCQCN np and rp) on priority %s", nd, apitype.FormatPriorities(ecn))
	}
	tos, known := roceToSOf(e.Snapshot, nd)
	if known && trustsDSCP(q) {
		prio, mapped := q.DSCPToPriority(tos.dscp())
		switch {
		case !mapped:
			// The trust check names the unmapped DSCP; judge PFC as if
			// the priority were unknown.
		case q.PFCOn(prio):
			c.add(OK, fmt.Sprintf("%s: PFC on priority %d, the one RoCE traffic is classified into (%s → priority %d)", nd, prio, tos, prio), "")
			return ""
		case lossy != "":
			c.add(OK, lossy, "")
			return ""
		default:
			c.add(Warn, fmt.Sprintf("%s: PFC off on priority %d, the one RoCE traffic is classified into (%s → priority %d); PFC is on for: %s",
				nd, prio, tos, prio, apitype.FormatPriorities(q.PFCEnabled)),
				fmt.Sprintf("enable PFC on priority %d on the NIC and the switch: [policy.qos] pfc = [%d] in the [[policy]] that selects %s (by hand: mlnx_qos -i %s --pfc %s, or dcb pfc set dev %s prio-pfc %d:on)",
					prio, prio, nd, nd, pfcMask(prio), nd, prio))
			return ""
		}
	}
	switch {
	case len(q.PFCEnabled) > 0:
		c.add(OK, fmt.Sprintf("%s: PFC on priority %s", nd, apitype.FormatPriorities(q.PFCEnabled)), "")
	case lossy != "":
		c.add(OK, lossy, "")
	default:
		c.add(Warn, fmt.Sprintf("%s: PFC off on every priority and no ECN (DCQCN) known on it: RoCE traffic is lossy, and a drop costs a retransmission timeout", nd),
			"for lossless RoCE enable PFC on the RoCE priority on the NIC and the switch ([policy.qos] pfc = [3]); for lossy RoCE enable ECN ([policy.ecn] np = [3], rp = [3])")
	}
	return ""
}

func checkTrust(e *Env) Result {
	if e.Snapshot == nil {
		return notReachable(e)
	}
	var c collector
	declared := policyQoS(e, &c, "trust", "trust")
	var notes []string
	for _, q := range e.observedQoS() {
		if n := observedTrust(e, &c, q, declared[q.Netdev]); n != "" {
			notes = append(notes, n)
		}
	}
	if len(notes) == 0 {
		notes = append(notes, "no RoCE netdev whose DCB state rdmad reads, and no [policy.qos] trust in rdmad's configuration")
	}
	return c.result(strings.Join(notes, "; "))
}

// observedTrust judges the trust mode and DSCP map q runs against the ToS
// of RoCE traffic, into c, or returns a note when there is nothing to
// judge.
func observedTrust(e *Env, c *collector, q apitype.NetdevQoS, declared bool) string {
	nd := q.Netdev
	if !q.Supported {
		if declared {
			return ""
		}
		return nd + ": " + q.Error
	}
	tos, known := roceToSOf(e.Snapshot, nd)
	switch {
	case trustsDSCP(q) && known:
		prio, mapped := q.DSCPToPriority(tos.dscp())
		if !mapped {
			c.add(Warn, fmt.Sprintf("%s: trusts DSCP, but the DSCP of RoCE traffic is not in its DSCP map (%s)", nd, tos),
				fmt.Sprintf("map it to the PFC priority: [policy.qos] dscp_to_prio = { %d = <priority> } in the [[policy]] that selects %s (by hand: dcb app add dev %s dscp-prio %d:<priority>)",
					tos.dscp(), nd, nd, tos.dscp()))
			return ""
		}
		c.add(OK, fmt.Sprintf("%s: trusts DSCP; RoCE traffic goes to priority %d (%s)", nd, prio, tos), "")
	case trustsDSCP(q):
		c.add(OK, fmt.Sprintf("%s: trusts DSCP (%d DSCP values mapped)", nd, len(q.DSCP)), "")
	case known && tos.dscp() != 0:
		c.add(Warn, fmt.Sprintf("%s: trust is %s, but RoCE traffic is DSCP-marked (%s): the NIC ignores the DSCP and classifies by the VLAN priority (untagged traffic: priority 0), so the marking selects no PFC priority",
			nd, dash(q.Trust), tos),
			fmt.Sprintf("trust DSCP: [policy.qos] trust = \"dscp\" with dscp_to_prio = { %d = <the PFC priority> } in the [[policy]] that selects %s (by hand: mlnx_qos -i %s --trust dscp)",
				tos.dscp(), nd, nd))
	default:
		why := "rdmad does not know RoCE's ToS: no [policy.roce] tos, and the probes use traffic class 0"
		if known {
			why = fmt.Sprintf("RoCE traffic carries DSCP 0 (%s)", tos)
		}
		c.add(OK, fmt.Sprintf("%s: trust %s: traffic is classified by its VLAN priority (untagged: priority 0); %s", nd, dash(q.Trust), why), "")
	}
	return ""
}
