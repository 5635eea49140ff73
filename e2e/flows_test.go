//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Probe flows on the wire (issue #26 item 1). With [probe] flows = 4 each
// probe port has 4 UD QPs, and Soft-RoCE gives every packet of a UD QP the
// UDP source port 0xc000 + hash_32(qpn, 14) (rxe_qp_init_req), which the
// status reports per flow (paths[].flows[].source_port). A u32 filter per
// reported source port on eth0's egress counts the RoCE v2 packets (UDP
// destination port 4791) node 1 sends with it: each flow's port carries
// probes (the path's turns walk the flows round-robin, one probe a turn),
// and together they carry every RoCE v2 packet node 1 sends (the
// answers to node 2's probes leave from flow 0). A filter that drops one of
// the ports stands for an ECMP path that drops the flows hashed onto it:
// the path must be degraded with "1 of 4 flows" within seconds, and clean
// again once the drop is gone.

const flowsDropin = "/etc/rdmad/rdmad.d/70-e2e-flows.toml"

// flowsView is the part of rdmactl --json peers this test reads.
type flowsView struct {
	Peers []struct {
		Name   string          `json:"name"`
		State  string          `json:"state"`
		Reason string          `json:"reason"`
		Paths  []flowsPathView `json:"paths"`
	} `json:"peers"`
}

// flowsPathView is a path with its flows.
type flowsPathView struct {
	Local      string `json:"local"`
	State      string `json:"state"`
	LossyFlows int    `json:"lossy_flows"`
	Flows      []struct {
		Flow       int     `json:"flow"`
		SourcePort uint16  `json:"source_port"`
		QPN        uint32  `json:"qpn"`
		Sent       uint64  `json:"sent"`
		Lost       uint64  `json:"lost"`
		LossPct    float64 `json:"loss_pct"`
		Lossy      bool    `json:"lossy"`
	} `json:"flows"`
}

// flowsPath returns node 1's path to peer on rxe0/1, its peer's state and
// reason.
func flowsPath(t *testing.T, peer string) (state, reason string, pa flowsPathView, ok bool) {
	t.Helper()
	var v flowsView
	peersJSON(t, &v)
	for _, p := range v.Peers {
		if p.Name != peer {
			continue
		}
		for _, x := range p.Paths {
			if x.Local == roceDev+"/1" {
				return p.State, p.Reason, x, true
			}
		}
	}
	return "", "", flowsPathView{}, false
}

// flowsAll is the filter preference of the catch-all counter of RoCE v2
// packets; flowsDrop the one of the drop; the flows' counters follow
// flowsFirst.
const (
	flowsDrop  = 5
	flowsAll   = 90
	flowsFirst = 10
)

var (
	flowsPref = regexp.MustCompile(`\bpref (\d+)\b`)
	flowsSent = regexp.MustCompile(`Sent \d+ bytes (\d+) pkt`)
)

// flowsCounts reads every egress filter's packet counter of eth0 in one
// dump, by preference.
func flowsCounts(t *testing.T) map[int]uint64 {
	t.Helper()
	out := mustRun(t, "tc", "-s", "filter", "show", "dev", "eth0", "egress")
	c := map[int]uint64{}
	cur := -1
	for _, l := range strings.Split(out, "\n") {
		if m := flowsPref.FindStringSubmatch(l); m != nil {
			cur, _ = strconv.Atoi(m[1])
		}
		if m := flowsSent.FindStringSubmatch(l); m != nil && cur >= 0 {
			n, _ := strconv.ParseUint(m[1], 10, 64)
			c[cur] += n
		}
	}
	return c
}

// flowsFilter adds a u32 filter on eth0's egress for RoCE v2 packets (UDP
// to 4791), from source port sport unless it is 0, with action.
func flowsFilter(t *testing.T, pref int, sport uint16, action string) {
	t.Helper()
	args := []string{"filter", "add", "dev", "eth0", "egress", "pref", strconv.Itoa(pref), "protocol", "ip", "u32",
		"match", "ip", "protocol", "17", "0xff", "match", "ip", "dport", "4791", "0xffff"}
	if sport != 0 {
		args = append(args, "match", "ip", "sport", strconv.Itoa(int(sport)), "0xffff")
	}
	mustRun(t, "tc", append(args, "action", action)...)
}

// TestFlowsOnTheWire: with flows = 4, node 1's RoCE v2 packets to node 2
// leave with the 4 distinct UDP source ports the status reports (each
// carrying probes, together all of node 1's RoCE v2 packets); dropping one
// of them on node 1's egress makes the path degraded with "1 of 4 flows"
// within a few seconds, the dropped flow marked lossy; without the drop the
// path is up again.
func TestFlowsOnTheWire(t *testing.T) {
	other := peersOther(t)
	waitActive(t)
	// A short window, so that the flow is clean again within seconds of
	// the drop's end (the flow's window must forget its losses). The
	// flows take a restart: the ports' QPs are made at the start.
	if err := os.WriteFile(flowsDropin, []byte("[probe]\nflows = 4\nwindow = 10\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.Remove(flowsDropin)
		run("systemctl", "restart", "rdmad")
	})
	mustRun(t, "systemctl", "restart", "rdmad")
	waitActive(t)
	stallDiag(t)
	peersWait(t, 1, other, "up", 90*time.Second)

	var pa flowsPathView
	waitFor(t, 30*time.Second, "4 flows with 4 distinct source ports on the path to "+other, func() (bool, string) {
		var ok bool
		_, _, pa, ok = flowsPath(t, other)
		ports := map[uint16]bool{}
		for _, f := range pa.Flows {
			if f.SourcePort >= 0xc000 && f.Sent > 0 {
				ports[f.SourcePort] = true
			}
		}
		return ok && len(pa.Flows) == 4 && len(ports) == 4, mustJSON(pa)
	})

	run("tc", "qdisc", "del", "dev", "eth0", "clsact") // a leftover of an aborted run
	mustRun(t, "tc", "qdisc", "add", "dev", "eth0", "clsact")
	t.Cleanup(func() { run("tc", "qdisc", "del", "dev", "eth0", "clsact") })
	for i, f := range pa.Flows {
		flowsFilter(t, flowsFirst+i, f.SourcePort, "pass")
	}
	flowsFilter(t, flowsAll, 0, "pass")

	// On the wire: each flow's source port carries probes (a path's turns
	// walk its 4 flows round-robin at 1 Hz: one probe a flow every 4 s, so
	// at least 2 in 13 s, 3 expected), and nothing of node 1's RoCE v2
	// traffic leaves with another port.
	const span = 13 * time.Second
	before := flowsCounts(t)
	time.Sleep(span)
	after := flowsCounts(t)
	var sum uint64
	for i, f := range pa.Flows {
		d := after[flowsFirst+i] - before[flowsFirst+i]
		sum += d
		if d < 2 {
			t.Errorf("flow %d: %d RoCE v2 packets with UDP source port %d in %v, want at least 2 (counters before %v, after %v)", i, d, f.SourcePort, span, before, after)
		}
	}
	// Every packet passes the first filter that matches, so the
	// catch-all counts only those with none of the flows' ports.
	if other := after[flowsAll] - before[flowsAll]; other > 0 {
		t.Errorf("%d RoCE v2 packets left with a source port that is none of the flows' %v (%d with theirs): the reported source ports are not what rxe sends", other, pa.Flows, sum)
	}
	// One probe a turn whatever the flows (docs/PROBES.md, "Flows"): node
	// 1's probes to node 2 are about one a second, and the answers to node
	// 2's as many, so 4 flows must not have made it 4 probes a turn (some
	// 8 packets a second); the clock's and a burst's probes fit under 5.
	if rate := float64(sum) / span.Seconds(); rate > 5 {
		t.Errorf("%.1f RoCE v2 packets a second from node 1 on the flows' ports (%d in %v), want about 2 (a probe a turn and an answer a turn): the flows multiply the probes", rate, sum, span)
	}
	t.Logf("%v of RoCE v2 from node 1: %d packets on the 4 flows' source ports, counters %v", span, sum, after)

	// Drop flow 2's source port: one ECMP path that drops.
	dropped := pa.Flows[2].SourcePort
	// "trap", not "drop": both discard the packet, but a drop makes the
	// transmit return NET_XMIT_DROP, on which rxe rolls the send back and
	// retries it (rxe_requester, -EAGAIN), for as long as the filter
	// stays; the retry can run inside the next ibv_post_send on that QP,
	// which then blocks the caller (rdmad's probe pass: 14-16 s stalls,
	// every flow's figures frozen, seen in about one run in four). A
	// trapped packet is consumed with NET_XMIT_SUCCESS, as a fabric's
	// drop is invisible to the sender.
	flowsFilter(t, flowsDrop, dropped, "trap")
	start := time.Now()
	waitFor(t, 20*time.Second, fmt.Sprintf("the path degraded with 1 of 4 flows lossy after dropping source port %d", dropped), func() (bool, string) {
		st, reason, pa, _ := flowsPath(t, other)
		lossy := len(pa.Flows) == 4 && pa.Flows[2].Lossy && !pa.Flows[0].Lossy && !pa.Flows[1].Lossy && !pa.Flows[3].Lossy
		return st == "degraded" && pa.State == "degraded" && pa.LossyFlows == 1 && lossy && strings.Contains(reason, "1 of 4 flows"),
			fmt.Sprintf("peer %s (%s), path %s", st, reason, mustJSON(pa))
	})
	took := time.Since(start)
	t.Logf("source port %d dropped -> degraded with 1 of 4 flows after %v (poll latency included)", dropped, took)
	// Flow 2's turn comes within 4 s; its loss brings the path's next
	// turn forward as a burst of every flow, whose probe on flow 2 is the
	// second loss that makes it lossy: 4 s + 2 timeouts, +2 s for polling
	// under TCG.
	if took > 10*time.Second {
		t.Errorf("degraded after %v; want within 10 s (flow 2's turn within 4 s, its loss and the burst's at 1 s each, +2 s for polling under TCG)", took)
	}
	out, _ := run("rdmactl", "peers")
	if !strings.Contains(out, "FLOWS "+other) || !strings.Contains(out, strconv.Itoa(int(dropped))) || !strings.Contains(out, "LOSSY") {
		t.Errorf("rdmactl peers does not list the flows of the degraded path with the lossy one:\n%s", out)
	}

	// The drop gone: clean again once flow 2's window (10/4 samples, at
	// least 5) forgot it: some 4 of its turns, 16 s.
	mustRun(t, "tc", "filter", "del", "dev", "eth0", "egress", "pref", strconv.Itoa(flowsDrop))
	waitFor(t, 60*time.Second, "the path up again with no lossy flow", func() (bool, string) {
		st, reason, pa, _ := flowsPath(t, other)
		return st == "up" && pa.State == "up" && pa.LossyFlows == 0, fmt.Sprintf("peer %s (%s), path %s", st, reason, mustJSON(pa))
	})
}

// stallDiag logs, when t failed, every goroutine's stack of rdmad as it
// is at the failure (SIGQUIT makes the Go runtime print them to stderr,
// which is the journal; the unit restarts it, and the test's cleanup
// restarts it anyway), then its journal since the test began. Nothing
// asks rdmad anything first: a request could end what is to be seen.
// TestFlowsOnTheWire has failed a few times with every flow's figures
// stuck for 15 s while the flows' probes left on the wire.
func stallDiag(t *testing.T) {
	start := time.Now()
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		if _, err := run("systemctl", "kill", "-s", "QUIT", "--kill-who=main", "rdmad"); err != nil {
			t.Logf("no goroutine dump: %v", err)
		}
		time.Sleep(3 * time.Second)
		out, err := run("journalctl", "-u", "rdmad", "--since", start.Add(-time.Second).Format("2006-01-02 15:04:05"), "-n", "6000", "--no-pager", "-o", "short-precise")
		if err != nil {
			t.Logf("no journal: %v", err)
			return
		}
		t.Logf("rdmad's journal since the test began, its goroutines at SIGQUIT last:\n%s", out)
	})
}
