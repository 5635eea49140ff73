//go:build e2e

package e2e

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdmad/rdmad/internal/syncbuf"
)

// The file is named to run last of the package (go test runs files in
// name order on one shared bed): the drills kill, partition and step the
// clock of the nodes, and the tests after them would meet what a drill
// left behind in the moments after its cleanup.
//
// The fault drills of #24 on the 2-node bed (docs/TESTING.md, "Fault
// drills"): each breaks what rdmad depends on the way an operator's
// rehearsal would (the bus, the journal, the link, the clock, the state
// directory, rdmad itself in the middle of work) and asserts what the
// operator needs: rdmad keeps running or systemd restarts it, it finds the
// bus and the journal again, reports the fault, recovers its state and
// loses nothing. Each drill leaves both nodes healthy (later tests of the
// package share the bed) and logs its recovery time, which the table in
// docs/TESTING.md quotes.

// drillPoll is how often a drill samples: fine enough for the 3 s bounds,
// coarse enough for TCG, where one rdmactl call takes 50-300 ms.
const drillPoll = 250 * time.Millisecond

// drillSame fails t unless rdmad on this node is the process of before:
// the drill did not make systemd restart it.
func drillSame(t *testing.T, before unit, what string) {
	t.Helper()
	after := showUnit(t)
	// "reloading" is the same process answering a SIGHUP (a drill's own
	// reload, or the config watcher's): not a restart.
	if (after.ActiveState != "active" && after.ActiveState != "reloading") || after.MainPID != before.MainPID || after.NRestarts != before.NRestarts {
		t.Errorf("%s: rdmad was restarted or is not active: before %+v, after %+v", what, before, after)
	}
}

// drillHealthy is the cleanup of every drill: both nodes healthy and
// seeing each other, as the next test expects.
func drillHealthy(t *testing.T, other string) {
	t.Helper()
	t.Cleanup(func() {
		start := time.Now()
		waitActive(t)
		d1 := peersWait(t, 1, other, "up", 120*time.Second)
		d2 := peersWait(t, 2, nodeAddr(t), "up", 120*time.Second)
		waitHealthy(t, 120*time.Second)
		// What the drill's cleanup waited for (a window still holding
		// the drill's losses says degraded for up to peer_window
		// probes): the suite's time is the sum of such waits.
		t.Logf("cleanup: node 1 saw its peer up after %v, node 2 after %v, both healthy after %v",
			d1.Round(10*time.Millisecond), d2.Round(10*time.Millisecond), time.Since(start).Round(10*time.Millisecond))
	})
}

// drillUnit2 is showUnit for node 2's rdmad.
func drillUnit2(t *testing.T) unit {
	t.Helper()
	out := mustRun(t, "vmnode", "2", "systemctl", "show", "--property=ActiveState,MainPID,NRestarts", "rdmad.service")
	var u unit
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		k, v, _ := strings.Cut(line, "=")
		switch k {
		case "ActiveState":
			u.ActiveState = v
		case "MainPID":
			u.MainPID, _ = strconv.Atoi(v)
		case "NRestarts":
			u.NRestarts, _ = strconv.Atoi(v)
		}
	}
	return u
}

// drillResNow counts, in the kernel's view (rdma resource, not rdmad's
// own report), the RDMA objects rdmad (pid, for the messages) holds on
// node (1 or 2), by kind.
func drillResNow(t *testing.T, node, pid int) map[string]int {
	t.Helper()
	n := map[string]int{}
	for _, kind := range []string{"qp", "cq", "mr", "pd"} {
		args := []string{"rdma", "-j", "resource", "show", kind}
		if node != 1 {
			args = append([]string{"vmnode", "2"}, args...)
		}
		out, err := run(args[0], args[1:]...)
		if err != nil {
			t.Fatalf("node %d: %v", node, err)
		}
		var objs []map[string]any
		if err := json.Unmarshal([]byte(out), &objs); err != nil {
			t.Fatalf("node %d: rdma -j resource show %s: %v: %s", node, kind, err, out)
		}
		// The kernel records the thread that created an object, and Go
		// creates them on any of rdmad's threads: its objects are those
		// of the threads of pid, all named rdmad (the only one per node).
		for _, o := range objs {
			if c, _ := o["comm"].(string); c == "rdmad" {
				n[kind]++
			}
		}
	}
	return n
}

// drillRes is drillResNow for a baseline: it fails t when pid holds no
// QP, as then a comparison would prove nothing.
func drillRes(t *testing.T, node, pid int) map[string]int {
	t.Helper()
	n := drillResNow(t, node, pid)
	if n["qp"] == 0 {
		t.Fatalf("node %d: rdmad (pid %d) holds no QP in rdma resource: %v", node, pid, n)
	}
	return n
}

// drillResSettle waits until pid's objects on node are want again (a
// probe QP being recreated is not a leak) and fails naming the difference.
func drillResSettle(t *testing.T, node, pid int, want map[string]int, limit time.Duration) {
	t.Helper()
	waitFor(t, limit, fmt.Sprintf("node %d: rdmad (pid %d) holds the RDMA objects it held before", node, pid), func() (bool, string) {
		got := drillResNow(t, node, pid)
		return fmt.Sprint(got) == fmt.Sprint(want), fmt.Sprintf("holds %v, held %v", got, want)
	})
}

// drillNameOwned reports whether rdmad owns its bus name.
func drillNameOwned() (bool, string) {
	out, err := run("busctl", "--system", "call", "org.freedesktop.DBus", "/org/freedesktop/DBus",
		"org.freedesktop.DBus", "NameHasOwner", "s", dbusName)
	if err != nil {
		return false, err.Error()
	}
	return strings.TrimSpace(out) == "b true", strings.TrimSpace(out)
}

// drillJournal returns rdmad's journal entries on this node since since,
// as JSON objects.
func drillJournal(t *testing.T, since time.Time) []map[string]any {
	t.Helper()
	out := mustRun(t, "journalctl", "-u", "rdmad", "--no-pager", "-o", "json", "--since", "@"+strconv.FormatInt(since.Unix(), 10))
	var es []map[string]any
	for _, line := range strings.Split(out, "\n") {
		if line == "" {
			continue
		}
		var e map[string]any
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("journalctl -o json: %v in %q", err, line)
		}
		es = append(es, e)
	}
	return es
}

// TestDrillDBusRestart: `systemctl restart dbus`. rdmad is not restarted,
// owns org.rdmad.Agent1 again within 5 s of the bus being back (issue
// #24; TCG polling adds up to 5 s) and serves its properties; the dbus
// component says error while the bus is gone and ok again after.
func TestDrillDBusRestart(t *testing.T) {
	other := peersOther(t)
	dbusReady(t)
	healthDiag(t)
	drillHealthy(t, other)
	before := waitActive(t)
	start := time.Now()
	mustRun(t, "systemctl", "restart", "dbus")
	busBack := time.Since(start)
	t.Logf("systemctl restart dbus returned after %v", busBack.Round(10*time.Millisecond))
	took := waitFor(t, 60*time.Second, "rdmad owns "+dbusName+" again (from the bus being back)", drillNameOwned)
	if took > 10*time.Second {
		t.Errorf("rdmad owned its name %v after the bus was back; want within 5 s (+5 s for polling under TCG)", took)
	}
	if g := dbusGeneration(t); g == 0 {
		t.Errorf("ConfigGeneration over the restarted bus = %d, want the running generation", g)
	}
	waitFor(t, 30*time.Second, "the dbus component is ok", func() (bool, string) {
		s, err := status()
		if err != nil {
			return false, err.Error()
		}
		c := s.Components["dbus"]
		return c.State == "ok", fmt.Sprintf("%+v", c)
	})
	// The loss was reported: the journal says the bus went and came back.
	var lost, back bool
	for _, e := range drillJournal(t, start.Add(-time.Second)) {
		m, _ := e["MESSAGE"].(string)
		lost = lost || strings.Contains(m, "component dbus is error")
		back = back || strings.Contains(m, "D-Bus name acquired")
	}
	// The name acquired again is always logged. The component's error is
	// logged only when rdmad noticed the bus gone before it was back: a
	// reconnect within a second (one full run) may come first, so its
	// absence is reported, not failed.
	if !back {
		t.Errorf("rdmad's journal since the restart: name acquired logged %v (component error logged %v); want the name acquired", back, lost)
	}
	t.Logf("journal since the restart: component error logged %v, name acquired logged %v", lost, back)
	drillSame(t, before, "dbus restart")
}

// TestDrillJournaldRestart: `systemctl restart systemd-journald`. rdmad
// is not restarted and its next records reach the new journald natively
// (the structured fields, not the stderr fallback), none lost.
func TestDrillJournaldRestart(t *testing.T) {
	other := peersOther(t)
	healthDiag(t)
	drillHealthy(t, other)
	before := waitActive(t)
	start := time.Now()
	mustRun(t, "systemctl", "restart", "systemd-journald")
	// Three reloads, three records "configuration loaded": each one
	// must reach the journal.
	for range 3 {
		mustRun(t, "rdmactl", "reload")
	}
	took := waitFor(t, 30*time.Second, "three reload records in the new journal, sent natively", func() (bool, string) {
		var native, stderr int
		for _, e := range drillJournal(t, start) {
			m, _ := e["MESSAGE"].(string)
			if !strings.HasPrefix(m, "configuration loaded") {
				continue
			}
			if e["_TRANSPORT"] == "journal" {
				native++
			} else {
				stderr++
			}
		}
		return native >= 3, fmt.Sprintf("%d native, %d by another transport", native, stderr)
	})
	t.Logf("rdmad's records reach the restarted journald %v after the restart", took)
	drillSame(t, before, "journald restart")
}

// TestDrillPartition: node 2's link down for 10 s, then up. Node 1 reports
// the peer down within 3 s (+2 s for polling under TCG, as
// TestPeersDownAndBack) and up within 3 s of the link's return (+0.5 s
// polling, +1 s for TCG; the return is logged step by step); node 2's verdict is a
// problem while its port is down and healthy after; neither rdmad
// restarts, and both hold the RDMA objects they held before (no leaked
// QPs, CQs, MRs or PDs).
func TestDrillPartition(t *testing.T) {
	other := peersOther(t)
	healthDiag(t)
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		if out, err := run("vmnode", "2", "journalctl", "-u", "rdmad", "--since", "-3min", "--no-pager", "-o", "short-monotonic"); err == nil {
			t.Logf("node 2's rdmad journal:\n%s", out)
		}
		if out, err := run("vmnode", "2", "journalctl", "-k", "--since", "-3min", "--no-pager", "-o", "short-monotonic"); err == nil {
			t.Logf("node 2's kernel log:\n%s", out)
		}
	})
	drillHealthy(t, other)
	// Right after the bed's boot a peer can stay degraded for its first
	// 100 probes (those lost while the other rdmad started).
	peersWait(t, 1, other, "up", 150*time.Second)
	peersWait(t, 2, nodeAddr(t), "up", 150*time.Second)
	waitHealthy(t, 60*time.Second)
	u1, u2 := waitActive(t), drillUnit2(t)
	res1, res2 := drillRes(t, 1, u1.MainPID), drillRes(t, 2, u2.MainPID)
	t.Logf("before: node 1 rdmad holds %v, node 2 rdmad holds %v", res1, res2)

	n2 := drillNode2Clock(t)
	t.Cleanup(func() { run("vmnode", "2", "ip", "link", "set", "eth0", "up") })
	mustRun(t, "vmnode", "2", "ip", "link", "set", "eth0", "down")
	down := time.Now()
	var downAfter time.Duration
	var code2 int
	for time.Since(down) < 10*time.Second {
		if downAfter == 0 {
			if st, _ := peersState(t, 1, other); st == "down" {
				downAfter = time.Since(down)
			}
		}
		if code2 == 0 {
			out, err := run("vmnode", "2", "rdmactl", "check")
			if err != nil && strings.Contains(err.Error(), "exit status 1") {
				code2 = 1
				t.Logf("node 2's verdict during the partition: %s", strings.TrimSpace(out))
			}
		}
		time.Sleep(drillPoll)
	}
	// The link's return, step by step (docs/TESTING.md, "Fault drills"):
	// a watcher on node 2 brings the link up itself and stamps, on node
	// 2's monotonic clock, rxe's port ACTIVE and its IPv4 GID back; node
	// 2's and node 1's journals stamp the probe port reopened and the
	// paths up; node 1's published view stamps the new QPN learned and
	// the first answers. Node 2's clock is mapped onto node 1's by the
	// vmnode round trip that read it (its uncertainty is logged).
	// Node 1 pings node 2 every 50 ms: its first reply stamps the link's
	// return on node 1's clock, to within the ping interval and a round
	// trip; node 2's stamps are placed by it (the vmnode round trip that
	// maps the clocks takes a second under TCG).
	firstReply := drillPing(t, other)
	c1, c2 := drillCounters(t, 1), drillCounters(t, 2)
	linkCmd := time.Now()
	mustRun(t, "vmnode", "2", "sh", "-c", drillLinkWatch)
	upAfter, seen := drillWatchUp(t, other, 90*time.Second)
	tl := drillLinkTimeline(t, n2, linkCmd, firstReply())
	tl.add(seen...)
	tl.log(t)
	if tl.linkUp.IsZero() {
		t.Fatalf("node 2's link watcher left no link-up stamp")
	}
	upAfter = seen[len(seen)-1].at.Sub(tl.linkUp)
	// What the probe engines and control endpoints counted over the
	// link's return (a probe from a sender not admitted yet, an answer
	// not posted): published about once a second, so taken a moment on.
	time.Sleep(1500 * time.Millisecond)
	t.Logf("counters over the link's return: node 1 %v, node 2 %v", drillCountersSince(drillCounters(t, 1), c1), drillCountersSince(drillCounters(t, 2), c2))
	// The poll above also asks node 2 over vmnode each round (1-2 s under
	// TCG): rdmad's own "peer down" in node 1's journal is when it said
	// so, and is what the bound is for when it is there.
	polled := downAfter
	for _, e := range drillJournal(t, down.Add(-time.Second)) {
		m, _ := e["MESSAGE"].(string)
		us, _ := e["__REALTIME_TIMESTAMP"].(string)
		n, err := strconv.ParseInt(us, 10, 64)
		if m == "peer down" && e["PEER"] == other && err == nil && time.UnixMicro(n).After(down) {
			downAfter = time.UnixMicro(n).Sub(down)
			break
		}
	}
	t.Logf("partition: peer down after %v (the status polled: %v), up %v after the link returned (%s)", downAfter.Round(10*time.Millisecond), polled.Round(10*time.Millisecond), upAfter.Round(10*time.Millisecond), tl.anchor)
	if downAfter == 0 || downAfter > 5*time.Second {
		t.Errorf("node 1 reported the peer down after %v (0: not within the 10 s); want within 3 s (+2 s polling)", downAfter)
	}
	// The bound is #24's 3 s, this test's polling (rdmactl peers every
	// 50 ms, each call 0.1-0.5 s under TCG: 0.1-0.7 s between rdmad's
	// "peer up" in the journal and the status seen here) and TCG's own
	// share of the link's return (`ip link set eth0 up` alone took
	// 0.43-1.23 s to return, rxe's port and the probe port's QPs come
	// after it): in nine runs 1.8-4.1 s (docs/TESTING.md).
	if upAfter > 4500*time.Millisecond {
		t.Errorf("node 1 reported the peer up %v after the link returned; want within 3 s (+0.5 s polling, +1 s TCG)", upAfter)
	}
	if code2 != 1 {
		t.Errorf("node 2's rdmactl check never exited 1 while its port was down")
	}
	back := waitHealthy(t, 60*time.Second)
	t.Logf("node 1 healthy again %v after the peer was up", back)
	waitFor(t, 60*time.Second, "node 2 healthy again", func() (bool, string) {
		out, err := run("vmnode", "2", "rdmactl", "check")
		return err == nil, fmt.Sprintf("%v: %s", err, out)
	})
	drillSame(t, u1, "partition, node 1")
	if a := drillUnit2(t); a.MainPID != u2.MainPID || a.NRestarts != u2.NRestarts || a.ActiveState != "active" {
		t.Errorf("partition: node 2's rdmad was restarted: before %+v, after %+v", u2, a)
	}
	drillResSettle(t, 1, u1.MainPID, res1, 30*time.Second)
	drillResSettle(t, 2, u2.MainPID, res2, 30*time.Second)
}

// drillSetClock steps this node's wall clock to w.
func drillSetClock(t *testing.T, w time.Time) {
	t.Helper()
	mustRun(t, "date", "-s", "@"+strconv.FormatInt(w.Unix(), 10))
}

// drillPeer returns node 1's state of peer, its paths' largest last RTT
// and the probes lost on them since rdmad started.
func drillPeer(t *testing.T, peer string) (state string, rtt time.Duration, lost uint64) {
	t.Helper()
	var v struct {
		Peers []struct {
			Name  string `json:"name"`
			State string `json:"state"`
			Paths []struct {
				LastRTT int64  `json:"last_rtt_ns"`
				Lost    uint64 `json:"lost"`
			} `json:"paths"`
		} `json:"peers"`
	}
	peersJSON(t, &v)
	for _, p := range v.Peers {
		if p.Name != peer {
			continue
		}
		for _, pa := range p.Paths {
			rtt = max(rtt, time.Duration(pa.LastRTT))
			lost += pa.Lost
		}
		return p.State, rtt, lost
	}
	return "absent", 0, 0
}

// TestDrillClockStep: node 1's wall clock one hour ahead, then back. The
// peer never changes state for it (RTTs and timeouts are monotonic), its
// RTTs stay under a second, and rdmad is not restarted.
func TestDrillClockStep(t *testing.T) {
	other := peersOther(t)
	healthDiag(t)
	drillHealthy(t, other)
	peersWait(t, 1, other, "up", 90*time.Second)
	before := waitActive(t)
	// The wall clock is restored from the monotonic one (time.Since
	// reads it), whatever fails.
	wall0 := time.Now()
	t.Cleanup(func() { drillSetClock(t, wall0.Add(time.Since(wall0))) })

	// watch samples the peer for d and returns the states it went
	// through, the largest last RTT and how many probes were lost.
	watch := func(what string, d time.Duration) ([]string, time.Duration, uint64) {
		var states []string
		var maxRTT time.Duration
		_, _, lost0 := drillPeer(t, other)
		lost := lost0
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(drillPoll) {
			var st string
			var rtt time.Duration
			st, rtt, lost = drillPeer(t, other)
			if len(states) == 0 || states[len(states)-1] != st {
				states = append(states, st)
			}
			maxRTT = max(maxRTT, rtt)
		}
		t.Logf("%s: peer states %v, largest last RTT %v, %d probe(s) lost", what, states, maxRTT, lost-lost0)
		return states, maxRTT, lost - lost0
	}
	// A step must not take the peer down or make its RTTs absurd. A
	// "degraded" (loss over 1 % of the last 100 probes) is logged with
	// the probes lost, not failed: on a loaded bed the link loses probes
	// by itself (docs/TESTING.md, "Fault drills").
	check := func(what string, states []string, maxRTT time.Duration) {
		t.Helper()
		for _, st := range states {
			if st != "up" && st != "degraded" {
				t.Errorf("%s: the peer went %s (states %v); a wall clock step must not change it", what, st, states)
			}
		}
		if maxRTT <= 0 || maxRTT > time.Second {
			t.Errorf("%s: largest last RTT %v; want above 0 and under 1 s", what, maxRTT)
		}
	}
	// Without a step first: on a loaded host the bed's own loss can
	// flap the peer, and then a step's effect cannot be told apart.
	if states, _, _ := watch("no step (control)", 10*time.Second); len(states) != 1 || states[0] != "up" {
		t.Skipf("the peer is not steadily up without a clock step (states %v): the bed is too loaded to tell a step's effect", states)
	}
	drillSetClock(t, wall0.Add(time.Hour))
	states, rtt, _ := watch("clock +1 h", 15*time.Second)
	check("clock +1 h", states, rtt)
	drillSetClock(t, wall0.Add(time.Since(wall0)))
	states, rtt, _ = watch("clock back", 15*time.Second)
	check("clock back", states, rtt)
	drillSame(t, before, "clock step")
}

// The tagged clock step drill's fleet key and the drop-in that sets it
// (and [probe] bandwidth) on both nodes.
const (
	drillKeyFile     = "/etc/rdmad/e2e-drill-fleet.key"
	drillKeyDropin   = "/etc/rdmad/rdmad.d/81-e2e-drill-key.toml"
	drillKeyDropBody = "[probe]\nkey_file = \"" + drillKeyFile + "\"\nbandwidth = true\n"
)

// drillBW runs `rdmactl --json bw peer --duration 1s` on node (1 or 2)
// and returns how long it took and its error (the refusal's text in it).
func drillBW(node int, peer string) (time.Duration, error) {
	args := []string{"rdmactl", "--json", "bw", peer, "--duration", "1s"}
	if node != 1 {
		args = append([]string{"vmnode", "2"}, args...)
	}
	start := time.Now()
	_, err := run(args[0], args[1:]...)
	return time.Since(start).Round(10 * time.Millisecond), err
}

// drillBWOK runs a test on node to peer and fails t unless it ran. A
// "busy" refusal (the responder still freeing the last test, if its done
// message was lost) is retried once after the responder's bound.
func drillBWOK(t *testing.T, node int, peer, what string) {
	t.Helper()
	took, err := drillBW(node, peer)
	if err != nil && strings.Contains(err.Error(), "running there already") {
		time.Sleep(7 * time.Second)
		took, err = drillBW(node, peer)
	}
	if err != nil {
		t.Errorf("%s: node %d's bandwidth test to %s: %v", what, node, peer, err)
		return
	}
	t.Logf("%s: node %d's bandwidth test to %s ran (%v)", what, node, peer, took)
}

// drillBWStale runs a test on node to peer, which must be refused at once
// (not a timeout) with an error that names the clocks and what to do.
func drillBWStale(t *testing.T, node int, peer, what string) {
	t.Helper()
	took, err := drillBW(node, peer)
	switch {
	case err == nil:
		t.Errorf("%s: node %d's bandwidth test to %s ran; want it refused (the request's time is an hour off)", what, node, peer)
	case !strings.Contains(err.Error(), "clocks") || !strings.Contains(err.Error(), "NTP"):
		t.Errorf("%s: node %d's bandwidth test to %s: %v; want a refusal that names the clocks and NTP", what, node, peer, err)
	case took > 5*time.Second:
		t.Errorf("%s: node %d's bandwidth test to %s refused after %v; want at once (the refusal is an answer, not a timeout)", what, node, peer, took)
	default:
		t.Logf("%s: node %d's bandwidth test to %s refused after %v: %v", what, node, peer, took, err)
	}
}

// drillStale returns node 2's count of bandwidth requests refused as stale.
func drillStale(t *testing.T, node int) uint64 {
	t.Helper()
	args := []string{"rdmactl", "--json", "status"}
	if node != 1 {
		args = append([]string{"vmnode", "2"}, args...)
	}
	out, _ := run(args[0], args[1:]...)
	var s struct {
		Bandwidth struct {
			Refused map[string]uint64 `json:"refused"`
		} `json:"bandwidth"`
	}
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("node %d: rdmactl --json status: %v", node, err)
	}
	return s.Bandwidth.Refused["stale"]
}

// TestDrillClockStepTagged: with a fleet key on both nodes, bandwidth
// requests carry their time (tagged; #24 item 3), and a responder takes
// one within ±30 s of its clock and with a nonce not seen. Node 1's clock
// one hour ahead: the peer stays up (no false state change; probes do not
// carry a time), RTTs stay sane, and a test either way is refused at once
// as stale, with an error that names the clocks and NTP: node 2 sees node
// 1's request an hour ahead, node 1 sees node 2's an hour old. The clock
// back: tests both ways run again at once. Refused requests are not
// remembered (the nonce table holds only requests within the window; a
// future-dated one is refused before it is stored: verbs/bw
// TestHandleReplay), so nothing blocks the first test after the step back.
// The key is removed again on both nodes at the end.
func TestDrillClockStepTagged(t *testing.T) {
	other := peersOther(t)
	self := nodeAddr(t)
	healthDiag(t)
	drillHealthy(t, other)
	peersWait(t, 1, other, "up", 90*time.Second)
	before := waitActive(t)
	wall0 := time.Now()
	t.Cleanup(func() { drillSetClock(t, wall0.Add(time.Since(wall0))) })

	// A key as docs/SECURITY.md says to make one: 32 random bytes in
	// base64, root's, mode 0600, on both nodes.
	var raw [32]byte
	rand.Read(raw[:])
	key := base64.StdEncoding.EncodeToString(raw[:])
	t.Cleanup(func() {
		os.Remove(drillKeyDropin)
		run("vmnode", "2", "rm", "-f", drillKeyDropin)
		run("rdmactl", "reload")
		run("vmnode", "2", "rdmactl", "reload")
		os.Remove(drillKeyFile)
		run("vmnode", "2", "rm", "-f", drillKeyFile)
	})
	if err := os.WriteFile(drillKeyFile, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	mustRun(t, "vmnode", "2", "sh", "-c", fmt.Sprintf("umask 077 && printf '%%s\\n' %s > %s", key, drillKeyFile))
	if err := os.WriteFile(drillKeyDropin, []byte(drillKeyDropBody), 0o644); err != nil {
		t.Fatal(err)
	}
	mustRun(t, "vmnode", "2", "sh", "-c", fmt.Sprintf("printf '%s' > %s", drillKeyDropBody, drillKeyDropin))
	mustRun(t, "rdmactl", "reload")
	mustRun(t, "vmnode", "2", "rdmactl", "reload")
	// Until both have the key, each drops the other's untagged (or
	// tagged) messages: the peer answers again once both do. Its window
	// (the last 100 probes) may still hold those losses and say
	// degraded for up to 100 s: that is not waited for.
	drillAnswers := func(node int, peer string) {
		t.Helper()
		waitFor(t, 90*time.Second, fmt.Sprintf("node %d's peer %s answers with the key", node, peer), func() (bool, string) {
			st, v := peersState(t, node, peer)
			return st == "up" || st == "degraded", fmt.Sprintf("%s: %+v", st, v)
		})
	}
	drillAnswers(1, other)
	drillAnswers(2, self)
	drillBWOK(t, 1, other, "with the key")
	drillBWOK(t, 2, self, "with the key")
	stale1, stale2 := drillStale(t, 1), drillStale(t, 2)

	drillSetClock(t, wall0.Add(time.Since(wall0)+time.Hour))
	stepped := time.Now()
	drillBWStale(t, 1, other, "clock +1 h")
	drillBWStale(t, 2, self, "clock +1 h")
	// The peer was not taken down by the step, nor made slow.
	if st, rtt, _ := drillPeer(t, other); st != "up" && st != "degraded" || rtt <= 0 || rtt > time.Second {
		t.Errorf("clock +1 h: node 1's peer %s is %s, last RTT %v; want up (or degraded on a lossy bed), under 1 s", other, st, rtt)
	}
	if st, _ := peersState(t, 2, self); st != "up" && st != "degraded" {
		t.Errorf("clock +1 h: node 2's peer %s is %s; want up", self, st)
	}
	if s1, s2 := drillStale(t, 1), drillStale(t, 2); s1 <= stale1 || s2 <= stale2 {
		t.Errorf("stale refusals counted: node 1 %d (was %d), node 2 %d (was %d); want more on each", s1, stale1, s2, stale2)
	}
	// Once the probes measured the step (a clock exchange every 15 s),
	// the refusal says which clock is off and by how much, on both
	// sides: node 1 sees node 2's clock an hour behind, node 2 sees node
	// 1's an hour ahead.
	waitOffset(t, other, -time.Hour, 5*time.Second, 60*time.Second)
	for _, side := range []struct {
		node       int
		peer, want string
	}{{1, other, "behind this node's"}, {2, self, "ahead of this node's"}} {
		var last error
		waitFor(t, 40*time.Second, fmt.Sprintf("node %d's refusal names the offset the probes measured", side.node), func() (bool, string) {
			_, last = drillBW(side.node, side.peer)
			return last != nil && strings.Contains(last.Error(), "the probes measure its clock") && strings.Contains(last.Error(), side.want), fmt.Sprint(last)
		})
		t.Logf("clock +1 h, measured: node %d's bandwidth test to %s: %v", side.node, side.peer, last)
	}
	t.Logf("an hour ahead for %v", time.Since(stepped).Round(10*time.Millisecond))

	drillSetClock(t, wall0.Add(time.Since(wall0)))
	drillBWOK(t, 1, other, "clock back")
	drillBWOK(t, 2, self, "clock back")
	if st, rtt, _ := drillPeer(t, other); st != "up" && st != "degraded" || rtt <= 0 || rtt > time.Second {
		t.Errorf("clock back: node 1's peer %s is %s, last RTT %v; want up, under 1 s", other, st, rtt)
	}
	drillSame(t, before, "tagged clock step")
}

// drillStateDir is rdmad's state directory; drillLimits the limits file
// the state drills make rdmad write (not the default one, so that no
// other test's file is touched).
const (
	drillStateDir = "/var/lib/rdmad"
	drillLimits   = "/etc/security/limits.d/91-e2e-drill.conf"
	drillDropin   = "/etc/rdmad/rdmad.d/80-e2e-drill.toml"
)

// drillRecorded reports whether rdmad's record of the limits files it
// wrote (the state directory's limits-files) lists path.
func drillRecorded(path string) bool {
	b, err := os.ReadFile(filepath.Join(drillStateDir, "limits-files"))
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if l == path {
			return true
		}
	}
	return false
}

// drillMemlock makes rdmad keep drillLimits ([memlock] users) and removes
// it again in the cleanup, waiting until rdmad removed its file.
func drillMemlock(t *testing.T) {
	t.Helper()
	body := fmt.Sprintf("[memlock]\nusers = \"unlimited\"\nlimits_file = %q\n", drillLimits)
	if err := os.WriteFile(drillDropin, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.Remove(drillDropin)
		if _, err := run("rdmactl", "reload"); err != nil {
			t.Errorf("reload without the drill's drop-in: %v", err)
		}
		waitFor(t, 30*time.Second, "rdmad removed "+drillLimits, func() (bool, string) {
			_, err := os.Stat(drillLimits)
			return os.IsNotExist(err), fmt.Sprint(err)
		})
	})
}

// drillLeftovers lists temporary files of an atomic write left behind in
// the state directory and limits.d.
func drillLeftovers(t *testing.T) []string {
	t.Helper()
	var left []string
	for _, dir := range []string{drillStateDir, "/etc/security/limits.d"} {
		m, err := filepath.Glob(filepath.Join(dir, ".*.tmp-*"))
		if err != nil {
			t.Fatal(err)
		}
		left = append(left, m...)
	}
	return left
}

// drillMemlockError returns the error of the memlock target in the
// status, the state component's error, and what the status held (for a
// failure's message).
func drillMemlockError() (target, state, last string) {
	out, _ := run("rdmactl", "--json", "status")
	var s struct {
		Components map[string]Component `json:"components"`
		Policy     struct {
			Policies []struct {
				Targets []struct {
					Kind, Object, State, Error string
				} `json:"targets"`
			} `json:"policies"`
		} `json:"policy"`
	}
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		return "", "", err.Error()
	}
	for _, p := range s.Policy.Policies {
		for _, tg := range p.Targets {
			if tg.Kind == "memlock" {
				target = tg.Error
			}
		}
	}
	if c, ok := s.Components["state"]; ok {
		state = c.Error
	}
	return target, state, fmt.Sprintf("policies %+v, components %+v", s.Policy.Policies, s.Components)
}

// TestDrillStateDirReadOnly: the state directory made unwritable
// (chattr +i) while a memlock policy makes rdmad write a limits file.
// rdmad keeps running, writes the file, says in its status that the record
// of it is not saved, and once the directory is writable again saves the
// record (nothing lost): a later start still knows the file is its own.
func TestDrillStateDirReadOnly(t *testing.T) {
	other := peersOther(t)
	healthDiag(t)
	drillHealthy(t, other)
	before := waitActive(t)
	if _, err := run("chattr", "+i", drillStateDir); err != nil {
		t.Skipf("cannot make %s immutable: %v", drillStateDir, err)
	}
	t.Cleanup(func() { run("chattr", "-i", drillStateDir) })
	if err := os.WriteFile(filepath.Join(drillStateDir, "e2e-probe"), nil, 0o600); err == nil {
		t.Fatalf("%s is still writable after chattr +i", drillStateDir)
	}
	drillMemlock(t)
	mustRun(t, "rdmactl", "reload")
	waitFor(t, 30*time.Second, "rdmad wrote "+drillLimits, func() (bool, string) {
		_, err := os.Stat(drillLimits)
		return err == nil, fmt.Sprint(err)
	})
	var said string
	waitFor(t, 30*time.Second, "the status says the state directory cannot be written", func() (bool, string) {
		e, c, last := drillMemlockError()
		if strings.Contains(e, "limits file record") {
			said = e
			return true, ""
		}
		if c != "" {
			said = c
			return true, ""
		}
		return false, last
	})
	t.Logf("the status says: %s", said)
	drillSame(t, before, "state directory read-only")

	mustRun(t, "chattr", "-i", drillStateDir)
	took := waitFor(t, 60*time.Second, "rdmad saved the record once the directory is writable", func() (bool, string) {
		if drillRecorded(drillLimits) {
			return true, ""
		}
		// The record is saved at the next pass; a reload is one.
		run("rdmactl", "reload")
		return false, "not recorded yet"
	})
	t.Logf("record saved %v after the directory was writable again", took)
	if left := drillLeftovers(t); len(left) > 0 {
		t.Errorf("temporary files left behind: %v", left)
	}
	drillSame(t, before, "state directory writable again")
}

// drillStateFiles reads the files of the state directory rdmad writes
// (the record of limits files, the accepted configuration's copy): both
// are written atomically (a temporary file renamed over the old one), so
// a write that fails leaves the old file whole.
func drillStateFiles(t *testing.T) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	for _, name := range []string{"limits-files", "accepted-config.json"} {
		b, err := os.ReadFile(filepath.Join(drillStateDir, name))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		files[name] = b
	}
	return files
}

// drillStateBackup is where the state full drill keeps the real state
// directory's contents while a tmpfs is mounted over it.
const drillStateBackup = "/root/e2e-drill-state"

// drillStateDirRestore ends the state full drill: rdmad stopped, what it
// wrote to the tmpfs copied back to the real state directory, the tmpfs
// unmounted, rdmad started again.
func drillStateDirRestore(t *testing.T) {
	t.Helper()
	run("systemctl", "stop", "rdmad")
	os.Remove(filepath.Join(drillStateDir, "e2e-filler"))
	if out, err := run("findmnt", "-n", "-o", "FSTYPE", drillStateDir); err == nil && strings.TrimSpace(out) == "tmpfs" {
		// The tmpfs holds the state as rdmad left it: that is what the
		// real directory gets back.
		if _, err := run("sh", "-c", "rm -rf "+drillStateBackup+".after && cp -a "+drillStateDir+" "+drillStateBackup+".after"); err != nil {
			t.Errorf("state full drill: save the tmpfs's state: %v", err)
		}
		if _, err := run("umount", drillStateDir); err != nil {
			t.Errorf("state full drill: umount %s: %v", drillStateDir, err)
		}
		if _, err := os.Stat(drillStateBackup + ".after"); err == nil {
			if _, err := run("sh", "-c", "find "+drillStateDir+" -mindepth 1 -delete && cp -a "+drillStateBackup+".after/. "+drillStateDir+"/"); err != nil {
				t.Errorf("state full drill: copy the state back: %v", err)
			}
		}
	}
	run("rm", "-rf", drillStateBackup, drillStateBackup+".after")
	if _, err := run("systemctl", "start", "rdmad"); err != nil {
		t.Errorf("state full drill: start rdmad again: %v", err)
	}
}

// TestDrillStateDirFull: the state directory full (ENOSPC) while a
// memlock policy makes rdmad write a limits file. The guest's root is not
// filled (journald and everything else would fail first): with rdmad
// stopped, a small tmpfs is mounted over /var/lib/rdmad with its contents
// copied in (so the unit's mount namespace, made at start with
// StateDirectory= binding that path under ProtectSystem=strict, has the
// tmpfs from the start), rdmad started, and the tmpfs filled. rdmad keeps
// running, writes the limits file, says in the memlock target's status
// that the record is not saved and why (no space left on device); neither
// the record nor the accepted configuration's copy is replaced by a
// truncated file (atomic writes: the temporary file fails, the old file
// stays whole), and no temporary file is left. Once there is room, the next
// pass saves the record (nothing lost), the error goes and the copy of the
// new configuration is saved.
func TestDrillStateDirFull(t *testing.T) {
	other := peersOther(t)
	healthDiag(t)
	drillHealthy(t, other)
	waitActive(t)
	if out, err := run("findmnt", "-n", "-o", "FSTYPE", drillStateDir); err == nil && strings.TrimSpace(out) == "tmpfs" {
		t.Fatalf("%s is a tmpfs already (an earlier run's left over?)", drillStateDir)
	}
	mustRun(t, "systemctl", "stop", "rdmad")
	t.Cleanup(func() { drillStateDirRestore(t) })
	mustRun(t, "sh", "-c", "rm -rf "+drillStateBackup+" && cp -a "+drillStateDir+" "+drillStateBackup)
	// 64 KiB: room for the state files (a few KiB) and the start.
	mustRun(t, "mount", "-t", "tmpfs", "-o", "size=64k,mode=0750", "e2e-drill-state", drillStateDir)
	mustRun(t, "cp", "-a", drillStateBackup+"/.", drillStateDir+"/")
	mustRun(t, "systemctl", "start", "rdmad")
	before := waitActive(t)
	peersWait(t, 1, other, "up", 90*time.Second)
	// What the unit sees is the tmpfs: rdmad's own mount namespace.
	if out, err := run("nsenter", "-t", strconv.Itoa(before.MainPID), "-m", "findmnt", "-n", "-o", "FSTYPE,OPTIONS", drillStateDir); err != nil {
		t.Logf("rdmad's view of %s not checked: %v", drillStateDir, err)
	} else if f := strings.Fields(out); len(f) < 2 || f[0] != "tmpfs" || !strings.HasPrefix(f[1], "rw") {
		t.Fatalf("rdmad's mount namespace has %q at %s, want the tmpfs, writable", strings.TrimSpace(out), drillStateDir)
	}
	old := drillStateFiles(t)
	if len(old["accepted-config.json"]) == 0 {
		t.Fatalf("no accepted configuration's copy in %s before the drill", drillStateDir)
	}
	// Full: the filler takes every block left. dd ends with ENOSPC.
	filler := filepath.Join(drillStateDir, "e2e-filler")
	run("dd", "if=/dev/zero", "of="+filler, "bs=4k")
	if err := os.WriteFile(filepath.Join(drillStateDir, "e2e-probe"), make([]byte, 8192), 0o600); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("a write to %s after the filler: %v, want ENOSPC", drillStateDir, err)
	}
	os.Remove(filepath.Join(drillStateDir, "e2e-probe"))
	t.Logf("state directory full: %s", strings.TrimSpace(mustRun(t, "df", "-k", drillStateDir)))

	since := time.Now()
	drillMemlock(t)
	mustRun(t, "rdmactl", "reload")
	waitFor(t, 30*time.Second, "rdmad wrote "+drillLimits, func() (bool, string) {
		_, err := os.Stat(drillLimits)
		return err == nil, fmt.Sprint(err)
	})
	var said string
	took := waitFor(t, 30*time.Second, "the memlock target's status says the record is not saved: no space left", func() (bool, string) {
		e, _, last := drillMemlockError()
		said = e
		return strings.Contains(e, "limits file record not saved") && strings.Contains(e, "no space left on device"), last
	})
	t.Logf("the status says (%v after the reload): %s", took, said)
	drillSame(t, before, "state directory full")
	// Neither state file was replaced by a truncated one: both are as
	// they were (the copy of the new configuration could not be saved,
	// and says so in the journal).
	for name, b := range drillStateFiles(t) {
		if string(b) != string(old[name]) {
			t.Errorf("%s changed while the state directory was full: %d bytes before, %d now", name, len(old[name]), len(b))
		}
	}
	if drillRecorded(drillLimits) {
		t.Errorf("%s is recorded though the state directory is full", drillLimits)
	}
	if left := drillLeftovers(t); len(left) > 0 {
		t.Errorf("temporary files left behind while full: %v", left)
	}
	var copyWarned bool
	for _, e := range drillJournal(t, since) {
		m, _ := e["MESSAGE"].(string)
		copyWarned = copyWarned || strings.Contains(m, "copy of the accepted configuration not saved")
	}
	if !copyWarned {
		t.Errorf("rdmad's journal does not say the accepted configuration's copy was not saved")
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	waitFor(t, 60*time.Second, "rdmad saved the record once there is room", func() (bool, string) {
		if drillRecorded(drillLimits) {
			return true, ""
		}
		// The record is saved at the next pass; a reload is one.
		run("rdmactl", "reload")
		return false, "not recorded yet"
	})
	t.Logf("record saved %v after the filler was removed", time.Since(freed).Round(10*time.Millisecond))
	waitFor(t, 30*time.Second, "the memlock target's error is gone", func() (bool, string) {
		e, _, _ := drillMemlockError()
		return e == "", e
	})
	waitFor(t, 30*time.Second, "the copy of the configuration with the drill's drop-in is saved", func() (bool, string) {
		b := drillStateFiles(t)["accepted-config.json"]
		var v struct {
			Files []struct {
				Path string `json:"path"`
			} `json:"files"`
		}
		if err := json.Unmarshal(b, &v); err != nil {
			return false, err.Error()
		}
		for _, f := range v.Files {
			if f.Path == drillDropin {
				return true, ""
			}
		}
		run("rdmactl", "reload")
		return false, fmt.Sprintf("files %+v", v.Files)
	})
	if left := drillLeftovers(t); len(left) > 0 {
		t.Errorf("temporary files left behind: %v", left)
	}
	drillSame(t, before, "state directory with room again")
}

// TestDrillKillDuringApply: rdmad killed (SIGKILL) right after a reload
// that makes it write a limits file, at several points of the pass.
// systemd restarts it each time; the restarted rdmad converges (the file
// written, recorded) and leaves no half-written file behind.
func TestDrillKillDuringApply(t *testing.T) {
	other := peersOther(t)
	healthDiag(t)
	drillHealthy(t, other)
	drillMemlock(t)
	for _, delay := range []time.Duration{0, 20 * time.Millisecond, 80 * time.Millisecond, 200 * time.Millisecond} {
		before := waitActive(t)
		os.Remove(drillLimits)
		if err := syscall.Kill(before.MainPID, syscall.SIGHUP); err != nil {
			t.Fatalf("SIGHUP rdmad: %v", err)
		}
		time.Sleep(delay)
		if err := syscall.Kill(before.MainPID, syscall.SIGKILL); err != nil {
			t.Fatalf("SIGKILL rdmad: %v", err)
		}
		start := time.Now()
		waitFor(t, 60*time.Second, fmt.Sprintf("killed %v after SIGHUP: restarted by systemd", delay), func() (bool, string) {
			u := showUnit(t)
			return u.ActiveState == "active" && u.MainPID != before.MainPID, fmt.Sprintf("%+v", u)
		})
		waitFor(t, 60*time.Second, "the restarted rdmad wrote and recorded "+drillLimits, func() (bool, string) {
			b, err := os.ReadFile(drillLimits)
			return err == nil && strings.Contains(string(b), "memlock") && drillRecorded(drillLimits), fmt.Sprintf("%v, recorded %v", err, drillRecorded(drillLimits))
		})
		t.Logf("killed %v after SIGHUP: converged %v after the kill", delay, time.Since(start).Round(10*time.Millisecond))
		if left := drillLeftovers(t); len(left) > 0 {
			t.Errorf("killed %v after SIGHUP: temporary files left behind: %v", delay, left)
		}
	}
}

// TestDrillKillDuringBandwidth: rdmad killed during a bandwidth test, on
// each side. The other side's test ends with an error, not a hang; the
// killed rdmad is restarted; the surviving rdmad releases the test's QP,
// CQs and MRs (the kernel's view) and serves the next test.
func TestDrillKillDuringBandwidth(t *testing.T) {
	other := peersOther(t)
	healthDiag(t)
	drillHealthy(t, other)
	peersWait(t, 1, other, "up", 90*time.Second)
	bwEnable(t, true)
	t.Cleanup(func() { run("vmnode", "2", "rm", "-f", bwDropin); run("vmnode", "2", "rdmactl", "reload") })

	// The requester (node 1) killed: node 2's responder is left with a
	// test nobody finishes.
	u2 := drillUnit2(t)
	peersWait(t, 1, other, "up", 90*time.Second)
	res2 := drillRes(t, 2, u2.MainPID)
	u1 := waitActive(t)
	done := make(chan error, 1)
	go func() {
		_, err := run("rdmactl", "bw", other, "--duration", "8s")
		done <- err
	}()
	time.Sleep(3 * time.Second)
	if err := syscall.Kill(u1.MainPID, syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL rdmad: %v", err)
	}
	killed := time.Now()
	if err := <-done; err == nil {
		t.Errorf("rdmactl bw succeeded though its rdmad was killed in the middle")
	} else {
		t.Logf("rdmactl bw on the killed node: %v", err)
	}
	waitFor(t, 60*time.Second, "node 1's rdmad restarted", func() (bool, string) {
		u := showUnit(t)
		return u.ActiveState == "active" && u.MainPID != u1.MainPID, fmt.Sprintf("%+v", u)
	})
	drillResSettle(t, 2, u2.MainPID, res2, 60*time.Second)
	t.Logf("requester killed: the responder released the test's objects %v after the kill", time.Since(killed).Round(10*time.Millisecond))
	peersWait(t, 1, other, "up", 90*time.Second)
	bwRun(t, other, "--duration", "2s")

	// The responder (node 2) killed: node 1's test ends with an error in
	// bounded time and node 1 releases its side.
	u1 = waitActive(t)
	res1 := drillRes(t, 1, u1.MainPID)
	u2 = drillUnit2(t)
	go func() {
		_, err := run("rdmactl", "bw", other, "--duration", "8s")
		done <- err
	}()
	time.Sleep(3 * time.Second)
	mustRun(t, "vmnode", "2", "kill", "-9", strconv.Itoa(u2.MainPID))
	killed = time.Now()
	if err := <-done; err == nil {
		t.Errorf("rdmactl bw succeeded though the responder was killed in the middle")
	} else {
		t.Logf("rdmactl bw with its responder killed: %v after %v", err, time.Since(killed).Round(10*time.Millisecond))
	}
	waitFor(t, 60*time.Second, "node 2's rdmad restarted", func() (bool, string) {
		u := drillUnit2(t)
		return u.ActiveState == "active" && u.MainPID != u2.MainPID, fmt.Sprintf("%+v", u)
	})
	drillResSettle(t, 1, u1.MainPID, res1, 60*time.Second)
	peersWait(t, 1, other, "up", 90*time.Second)
	bwRun(t, other, "--duration", "2s")
}

// drillLinkWatch is the script node 2 runs (in the background, so that
// vmnode returns at once) to bring its link up and stamp, on its
// monotonic clock (/proc/uptime, 10 ms), what the kernel does with it:
// rxe's port ACTIVE (rdma link) and an IPv4-mapped GID in the port's
// table again. It writes drillLinkLog.
const drillLinkLog = "/run/e2e-drill-link.log"

const drillLinkWatch = `(
log=` + drillLinkLog + `
gids() { cat /sys/class/infiniband/*/ports/1/gids/* 2>/dev/null | grep -q ':ffff:'; }
gd=no; gids && gd=yes
pd=$(rdma link show | grep -o 'state [A-Z_]*' | head -n1)
u=$(cut -d' ' -f1 /proc/uptime); ip link set eth0 up; r=$(cut -d' ' -f1 /proc/uptime)
echo "link_up $u gid_during_down=$gd port_during_down=$pd" >$log
echo "ip_returned $r" >>$log
a=; g=; i=0
while [ $i -lt 1000 ]; do
	now=$(cut -d' ' -f1 /proc/uptime)
	if [ -z "$a" ] && rdma link show | grep -q 'state ACTIVE'; then a=$now; echo "port_active $now" >>$log; fi
	if [ -z "$g" ] && gids; then g=$now; echo "gid_back $now" >>$log; fi
	[ -n "$a" ] && [ -n "$g" ] && break
	sleep 0.01; i=$((i+1))
done
echo end >>$log
) >/dev/null 2>&1 </dev/null &`

// A drillStamp is one step of the link's return on node 1's clock.
type drillStamp struct {
	at   time.Time
	what string
}

// drillClock maps node 2's monotonic clock (seconds of /proc/uptime or
// the journal's __MONOTONIC_TIMESTAMP) onto node 1's wall clock: the
// reading of the shortest of a few vmnode round trips, taken at its
// middle; err is half that round trip.
type drillClock struct {
	base time.Time
	up   float64
	err  time.Duration
}

func (c drillClock) at(up float64) time.Time {
	return c.base.Add(time.Duration((up - c.up) * float64(time.Second)))
}

func drillNode2Clock(t *testing.T) drillClock {
	t.Helper()
	var c drillClock
	for i := 0; i < 5; i++ {
		a := time.Now()
		out := mustRun(t, "vmnode", "2", "cut", "-d", " ", "-f1", "/proc/uptime")
		b := time.Now()
		up, err := strconv.ParseFloat(strings.TrimSpace(out), 64)
		if err != nil {
			t.Fatalf("node 2's /proc/uptime: %v in %q", err, out)
		}
		if half := b.Sub(a) / 2; i == 0 || half < c.err {
			c = drillClock{base: a.Add(half), up: up, err: half}
		}
	}
	return c
}

// drillPathView is the part of node 1's published path the partition
// drill follows.
type drillPathView struct {
	State     string `json:"state"`
	RemoteQPN uint32 `json:"remote_qpn"`
	Sent      uint64 `json:"sent"`
	Lost      uint64 `json:"lost"`
}

func drillPaths(t *testing.T, peer string) (string, []drillPathView) {
	t.Helper()
	var v struct {
		Peers []struct {
			Name  string          `json:"name"`
			State string          `json:"state"`
			Paths []drillPathView `json:"paths"`
		} `json:"peers"`
	}
	peersJSON(t, &v)
	for _, p := range v.Peers {
		if p.Name == peer {
			return p.State, p.Paths
		}
	}
	return "absent", nil
}

// drillWatchUp polls node 1's view of peer until it is up and returns how
// long that took and the stamps of what it saw on the way (the first
// publish with a new remote QPN, the first with answers again, up), the
// last being up. The view is published at once on a state change and
// about once a second while only numbers move: the first two stamps are
// late by up to that.
func drillWatchUp(t *testing.T, peer string, limit time.Duration) (time.Duration, []drillStamp) {
	t.Helper()
	start := time.Now()
	_, paths0 := drillPaths(t, peer)
	qpn0 := map[int]uint32{}
	ok0 := map[int]uint64{}
	for i, pa := range paths0 {
		qpn0[i], ok0[i] = pa.RemoteQPN, pa.Sent-pa.Lost
	}
	var stamps []drillStamp
	var qpnSeen, okSeen bool
	for time.Since(start) < limit {
		st, paths := drillPaths(t, peer)
		now := time.Now()
		for i, pa := range paths {
			if !qpnSeen && pa.RemoteQPN != 0 && pa.RemoteQPN != qpn0[i] {
				qpnSeen = true
				stamps = append(stamps, drillStamp{now, fmt.Sprintf("node 1 published node 2's new QPN %#x (was %#x)", pa.RemoteQPN, qpn0[i])})
			}
			if !okSeen && pa.Sent-pa.Lost > ok0[i] {
				okSeen = true
				stamps = append(stamps, drillStamp{now, fmt.Sprintf("node 1 published answered probes (%d more)", pa.Sent-pa.Lost-ok0[i])})
			}
		}
		if st == "up" {
			stamps = append(stamps, drillStamp{now, "node 1 status: peer up"})
			return time.Since(start), stamps
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("node 1: peer %s not up after %v", peer, limit)
	return 0, nil
}

// drillCounters returns node's peer counters (control endpoint and probe
// QPs, rdmactl --json peers).
func drillCounters(t *testing.T, node int) map[string]uint64 {
	t.Helper()
	args := []string{"rdmactl", "--json", "peers"}
	if node != 1 {
		args = append([]string{"vmnode", "2"}, args...)
	}
	out, err := run(args[0], args[1:]...)
	if err != nil && !strings.Contains(err.Error(), "exit status 3") {
		t.Fatal(err)
	}
	var v struct {
		Counters map[string]uint64 `json:"counters"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("node %d: rdmactl --json peers: %v", node, err)
	}
	return v.Counters
}

// drillCountersSince returns the counters that grew since before, by how
// much.
func drillCountersSince(now, before map[string]uint64) map[string]uint64 {
	d := map[string]uint64{}
	for k, v := range now {
		if v > before[k] {
			d[k] = v - before[k]
		}
	}
	return d
}

// A drillTimeline is the link's return, step by step, on node 1's clock.
type drillTimeline struct {
	linkUp time.Time
	steps  []drillStamp
	anchor string // how node 2's stamps were placed on node 1's clock
}

// drillPing pings addr from node 1 every 50 ms from now on and returns a
// function that stops it and returns the time of the first reply (zero:
// none).
func drillPing(t *testing.T, addr string) func() time.Time {
	t.Helper()
	cmd := exec.Command("ping", "-n", "-D", "-i", "0.05", addr)
	var out syncbuf.Buffer
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Logf("ping %s: %v; the link's return is stamped by node 2's clock alone", addr, err)
		return func() time.Time { return time.Time{} }
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	stop := func() {
		cmd.Process.Kill()
		<-done
	}
	t.Cleanup(stop)
	return func() time.Time {
		stop()
		for _, line := range strings.Split(out.String(), "\n") {
			// [1795000000.123456] 64 bytes from 192.0.2.2: icmp_seq=...
			if !strings.Contains(line, "bytes from") || !strings.HasPrefix(line, "[") {
				continue
			}
			end := strings.IndexByte(line, ']')
			if end < 0 {
				continue
			}
			sec, err := strconv.ParseFloat(line[1:end], 64)
			if err != nil {
				continue
			}
			return time.Unix(0, int64(sec*1e9))
		}
		return time.Time{}
	}
}

func (tl *drillTimeline) add(s ...drillStamp) { tl.steps = append(tl.steps, s...) }

func (tl *drillTimeline) log(t *testing.T) {
	t.Helper()
	slices.SortStableFunc(tl.steps, func(a, b drillStamp) int { return a.at.Compare(b.at) })
	var b strings.Builder
	for _, s := range tl.steps {
		fmt.Fprintf(&b, "\n  %+7.3fs  %s", s.at.Sub(tl.linkUp).Seconds(), s.what)
	}
	t.Logf("the link's return (seconds from node 2's ip link set eth0 up):%s", b.String())
}

// drillLinkTimeline reads node 2's link watcher's stamps and the journal
// records of both rdmads since the link command (those about ports,
// probe ports and peers) into a timeline.
func drillLinkTimeline(t *testing.T, n2 drillClock, since, firstReply time.Time) *drillTimeline {
	t.Helper()
	tl := &drillTimeline{anchor: fmt.Sprintf("node 2's clock mapped by vmnode, ±%v", n2.err.Round(10*time.Millisecond))}
	var node2 []drillStamp
	var out string
	for end := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		out, _ = run("vmnode", "2", "cat", drillLinkLog)
		if strings.Contains(out, "end") || time.Now().After(end) {
			break
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		up, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			continue
		}
		at := n2.at(up)
		switch f[0] {
		case "link_up":
			tl.linkUp = at
			node2 = append(node2, drillStamp{at, "node 2: ip link set eth0 up (" + strings.Join(f[2:], ", ") + ")"})
		case "ip_returned":
			node2 = append(node2, drillStamp{at, "node 2: ip link set returned (the watcher's first look follows)"})
		case "port_active":
			node2 = append(node2, drillStamp{at, "node 2: rxe port ACTIVE (rdma link)"})
		case "gid_back":
			node2 = append(node2, drillStamp{at, "node 2: IPv4 GID in the port's table"})
		}
	}
	interesting := func(m string) bool {
		for _, k := range []string{"peer", "probe port", "port state", "GID", "rebuild"} {
			if strings.Contains(m, k) {
				return true
			}
		}
		return false
	}
	entry := func(e map[string]any) string {
		m, _ := e["MESSAGE"].(string)
		for _, k := range []string{"PEER", "PORT", "FROM", "TO", "REASON", "ERR"} {
			if v, ok := e[k].(string); ok {
				m += " " + strings.ToLower(k) + "=" + v
			}
		}
		return m
	}
	// Node 2's journal, on its monotonic clock.
	j2, err := run("vmnode", "2", "journalctl", "-u", "rdmad", "--no-pager", "-o", "json", "--since", "-2min")
	if err != nil {
		t.Logf("node 2's journal: %v", err)
	}
	for _, line := range strings.Split(j2, "\n") {
		var e map[string]any
		if json.Unmarshal([]byte(line), &e) != nil {
			continue
		}
		us, _ := e["__MONOTONIC_TIMESTAMP"].(string)
		n, err := strconv.ParseInt(us, 10, 64)
		if err != nil {
			continue
		}
		at := n2.at(float64(n) / 1e6)
		if m := entry(e); at.After(since.Add(-n2.err)) && interesting(m) {
			node2 = append(node2, drillStamp{at, "node 2 journal: " + m})
		}
	}
	// The first ping reply places node 2's stamps: the link came back
	// at most an interval (50 ms) and a round trip before it.
	if !firstReply.IsZero() && !tl.linkUp.IsZero() {
		shift := firstReply.Sub(tl.linkUp)
		for i := range node2 {
			node2[i].at = node2[i].at.Add(shift)
		}
		tl.add(drillStamp{firstReply, "node 1: first ping reply from node 2"})
		tl.anchor = fmt.Sprintf("node 2's stamps placed by node 1's first ping reply; the vmnode mapping (±%v) put them %+.3fs off", n2.err.Round(10*time.Millisecond), shift.Seconds())
		tl.linkUp = firstReply
	}
	tl.add(node2...)
	// Node 1's journal, on its wall clock (this test's).
	for _, e := range drillJournal(t, since) {
		us, _ := e["__REALTIME_TIMESTAMP"].(string)
		n, err := strconv.ParseInt(us, 10, 64)
		if err != nil {
			continue
		}
		if m := entry(e); interesting(m) {
			tl.add(drillStamp{time.UnixMicro(n), "node 1 journal: " + m})
		}
	}
	return tl
}
