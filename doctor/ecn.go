package doctor

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/rdmad/rdmad/client/apitype"
)

// checkECN looks at DCQCN, RoCE's congestion control, two ways:
//
//   - its configuration: the notification point (np) and the reaction point
//     (rp) must be enabled on the RoCE priority, the one the QoS policy
//     enables PFC on (as the pfc check learns it from the policy targets),
//     read from rdmad's snapshot (mlx5's ecn sysfs files, which rdmad reads
//     as root at every inventory refresh);
//   - its counters over the check interval: ECN-marked RoCE packets
//     arriving (np_ecn_marked_roce_packets) while no CNP is sent back
//     (np_cnp_sent) means the senders are never told to slow down.
func checkECN(e *Env) Result {
	var c collector
	var notes []string
	if s := e.Snapshot; s == nil {
		notes = append(notes, "rdmad not reachable, so the ECN state is unknown")
	} else {
		notes = append(notes, ecnConfig(e, s, &c)...)
	}
	notes = append(notes, ecnCounters(e, &c)...)
	return c.result(strings.Join(notes, "; "))
}

// ecnConfig checks the snapshot's ECN state against the RoCE priorities and
// returns notes for a check that finds nothing.
func ecnConfig(e *Env, s *apitype.Snapshot, c *collector) []string {
	state := map[string]apitype.NetdevECN{}
	for _, n := range s.ECN {
		state[n.Netdev] = n
	}
	var notes []string
	found := false
	for _, p := range s.Policy.Policies {
		for _, t := range p.Targets {
			if t.Kind != "qos" {
				continue
			}
			want, ok := qosField(t.Desired, "pfc")
			if !ok || want == "none" {
				continue
			}
			found = true
			n, ok := state[t.Object]
			if !ok {
				notes = append(notes, fmt.Sprintf("%s has no ECN state in rdmad (no /sys/class/net/%s/ecn: not an mlx5 netdev, or not read yet)", t.Object, t.Object))
				continue
			}
			for _, f := range strings.Split(want, ",") {
				prio, err := strconv.Atoi(f)
				if err != nil {
					continue
				}
				var off []string
				if !slices.Contains(n.NP, prio) {
					off = append(off, "np (notification point: no CNPs are sent for ECN-marked packets)")
				}
				if !slices.Contains(n.RP, prio) {
					off = append(off, "rp (reaction point: CNPs do not slow this host down)")
				}
				if len(off) == 0 {
					c.add(OK, fmt.Sprintf("%s: ECN (np and rp) on the RoCE priority %d", t.Object, prio), "")
					continue
				}
				fix := fmt.Sprintf("declare [policy.ecn] np = [%d] and rp = [%d] in the [[policy]] that selects %s (or by hand, as root: echo 1 > /sys/class/net/%s/ecn/roce_np/enable/%d and .../roce_rp/enable/%d)",
					prio, prio, t.Object, t.Object, prio, prio)
				if et, pol, ok := e.target("ecn", t.Object); ok && et.State == apitype.Drifted {
					fix = fmt.Sprintf("policy %q is in observe mode: set mode = \"enforce\"; ", pol) + fix
				}
				c.add(Warn, fmt.Sprintf("%s: ECN off on the RoCE priority %d (PFC on it, policy %q): %s", t.Object, prio, p.Name, strings.Join(off, ", ")), fix)
			}
		}
	}
	if !found {
		notes = append(notes, "no [policy.qos] pfc in rdmad's configuration, so rdmad does not know the RoCE priority to check ECN on")
	}
	return notes
}

// CNP counters of the port's hw_counters/ (mlx5).
const (
	ecnMarked  = "np_ecn_marked_roce_packets"
	cnpSent    = "np_cnp_sent"
	cnpHandled = "rp_cnp_handled"
)

// ecnCounters compares the CNP counters of the RoCE ports over the
// interval and returns notes for a check that finds nothing.
func ecnCounters(e *Env, c *collector) []string {
	if e.Interval <= 0 {
		return []string{"no interval to compare the CNP counters over (--interval 0)"}
	}
	before, err := e.Devices()
	if err != nil {
		return []string{fmt.Sprintf("cannot read the devices: %v", err)}
	}
	after, err := e.Later()
	if err != nil {
		return []string{fmt.Sprintf("second counter read: %v", err)}
	}
	old := map[string]apitype.Port{}
	for _, d := range before {
		for _, p := range d.Ports {
			old[fmt.Sprintf("%s/%d", d.Name, p.Port)] = p
		}
	}
	seen := 0
	for _, d := range after {
		for _, p := range d.Ports {
			name := fmt.Sprintf("%s/%d", d.Name, p.Port)
			prev, ok := old[name]
			if !ok || p.LinkLayer != "Ethernet" {
				continue
			}
			delta := func(n string) (uint64, bool) {
				v, ok1 := p.HWCounters[n]
				pv, ok2 := prev.HWCounters[n]
				if !ok1 || !ok2 {
					return 0, false
				}
				if v < pv {
					return 0, true // reset (driver reload)
				}
				return v - pv, true
			}
			marked, ok1 := delta(ecnMarked)
			sent, ok2 := delta(cnpSent)
			if !ok1 || !ok2 {
				continue
			}
			seen++
			handled, hasHandled := delta(cnpHandled)
			rp := ""
			if hasHandled {
				rp = fmt.Sprintf(", %s +%d", cnpHandled, handled)
			}
			who := name
			if p.Netdev != "" {
				who += " (" + p.Netdev + ")"
			}
			switch {
			case marked > 0 && sent == 0:
				c.add(Warn, fmt.Sprintf("%s: %s +%d but %s +0%s in %s: ECN-marked packets arrive and no CNP goes back, so the senders never slow down",
					who, ecnMarked, marked, cnpSent, rp, e.Interval),
					"enable DCQCN's notification point on the priority the RoCE traffic arrives on ([policy.ecn] np = [<the RoCE priority>]; rdmactl status shows the ECN state), and check that the traffic's DSCP maps to that priority ([policy.qos] dscp_to_prio, [policy.roce] tos)")
			case marked > 0:
				c.add(OK, fmt.Sprintf("%s: congestion control answers: %s +%d, %s +%d%s in %s", who, ecnMarked, marked, cnpSent, sent, rp, e.Interval), "")
			default:
				c.add(OK, fmt.Sprintf("%s: no ECN-marked packets in %s (%s +%d%s)", who, e.Interval, cnpSent, sent, rp), "")
			}
		}
	}
	if seen == 0 {
		return []string{"no RoCE port exposes the CNP counters (" + ecnMarked + ", " + cnpSent + ")"}
	}
	return nil
}
