//go:build e2e

package e2e

import (
	"strings"
	"testing"
	"time"
)

//e2e:nodes 2

// fleetPeer is what node 1's status says of a peer's fingerprint.
type fleetPeer struct {
	Name               string `json:"name"`
	FingerprintUnknown bool   `json:"fingerprint_unknown"`
	Fingerprint        *struct {
		Ports []struct {
			Key string `json:"key"`
			MTU int    `json:"mtu"`
		} `json:"ports"`
	} `json:"fingerprint"`
	Mismatches []struct {
		Field string `json:"field"`
		Local string `json:"local"`
		Peer  string `json:"peer"`
	} `json:"mismatches"`
}

// fleetView returns node 1's view of peer.
func fleetView(t *testing.T, peer string) fleetPeer {
	t.Helper()
	var v struct {
		Peers []fleetPeer `json:"peers"`
	}
	out := peersJSON(t, &v)
	for _, p := range v.Peers {
		if p.Name == peer {
			if p.Mismatches == nil {
				t.Fatalf("peer %s: mismatches is null in %s; want [] when there are none", peer, out)
			}
			return p
		}
	}
	t.Fatalf("node 1 does not probe %s: %s", peer, out)
	return fleetPeer{}
}

func (p fleetPeer) mtuMismatch() (local, peer string, ok bool) {
	for _, m := range p.Mismatches {
		if m.Field == "mtu" {
			return m.Local, m.Peer, true
		}
	}
	return "", "", false
}

// fleetWait polls node 1's view of peer until ok holds.
func fleetWait(t *testing.T, peer, what string, limit time.Duration, ok func(fleetPeer) bool) (fleetPeer, time.Duration) {
	t.Helper()
	start := time.Now()
	var p fleetPeer
	for time.Since(start) < limit {
		if p = fleetView(t, peer); ok(p) {
			return p, time.Since(start)
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("node 1's view of %s after %v: %+v; want %s", peer, limit, p, what)
	return p, 0
}

// TestFleetMTUMismatch: the nodes exchange fingerprints in the control
// messages. Raising node 2's eth0 MTU to 4200 makes node 1 report an MTU
// mismatch with node 2 (status, rdmactl peers, doctor's fleet check naming
// both values); restoring it clears the mismatch. The bed is left as it was.
func TestFleetMTUMismatch(t *testing.T) {
	other := peersOther(t)
	peersWait(t, 1, other, "up", 90*time.Second)
	// Right after a boot a node's first fingerprint may come before its
	// inventory is in its state, without the port's netdev and MTU (both
	// nodes' then: no mismatch to see); its next, 5 s later, has them,
	// and the peers are asked again with it at once.
	p, took := fleetWait(t, other, "its fingerprint with the port's netdev MTU, without an MTU mismatch", 60*time.Second, func(p fleetPeer) bool {
		_, _, bad := p.mtuMismatch()
		return !p.FingerprintUnknown && p.Fingerprint != nil && !bad && len(p.Fingerprint.Ports) > 0 && p.Fingerprint.Ports[0].MTU > 0
	})
	t.Logf("node 2's fingerprint with its netdev MTU %d after %v", p.Fingerprint.Ports[0].MTU, took)

	localMTU := strings.TrimSpace(mustRun(t, "cat", "/sys/class/net/eth0/mtu"))
	origMTU := strings.TrimSpace(mustRun(t, "vmnode", "2", "cat", "/sys/class/net/eth0/mtu"))
	if origMTU == "4200" || localMTU == "4200" {
		t.Fatalf("eth0 MTU already 4200 (node 1 %s, node 2 %s): the bed was left changed", localMTU, origMTU)
	}
	mustRun(t, "vmnode", "2", "ip", "link", "set", "eth0", "mtu", "4200")
	restored := false
	t.Cleanup(func() {
		if restored {
			return
		}
		if _, err := run("vmnode", "2", "ip", "link", "set", "eth0", "mtu", origMTU); err != nil {
			t.Errorf("restore node 2's eth0 MTU %s: %v", origMTU, err)
			return
		}
		fleetWait(t, other, "no MTU mismatch after the cleanup", 60*time.Second, func(p fleetPeer) bool { _, _, bad := p.mtuMismatch(); return !bad })
	})

	// Node 2 rebuilds its fingerprint within 5 s and asks node 1 again
	// with it at its next turn; 60 s leaves room for TCG.
	_, took = fleetWait(t, other, "an MTU mismatch "+localMTU+" vs 4200", 60*time.Second, func(p fleetPeer) bool {
		l, r, ok := p.mtuMismatch()
		return ok && l == localMTU && r == "4200"
	})
	t.Logf("node 2's MTU raised -> node 1 reports the mismatch after %v", took)

	text, err := run("rdmactl", "peers")
	if err != nil && !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("rdmactl peers: %v", err)
	}
	if want := "MISMATCH " + other + ": mtu " + localMTU + " here"; !strings.Contains(text, want) || !strings.Contains(text, "4200 on the peer") {
		t.Errorf("rdmactl peers lacks %q ... 4200 on the peer:\n%s", want, text)
	}

	// D-Bus shows the same mismatch (busctl prints a(sssssss) as
	// count "peer" "field" "local" "peer value" ...).
	if got := dbusGet(t, "FleetMismatches"); !strings.Contains(got, `"`+other+`" "mtu" "`+localMTU+`" "4200" "must"`) {
		t.Errorf("D-Bus FleetMismatches = %s; want an entry %q mtu %s 4200 must", got, other, localMTU)
	}

	r, _ := doctorRun(t)
	v, msg := r.verdict("fleet")
	var fix string
	for _, c := range r.Checks {
		if c.ID == "fleet" {
			fix = c.Fix
		}
	}
	if v != "warn" || !strings.Contains(msg, other) || !strings.Contains(msg, "mtu "+localMTU) || !strings.Contains(msg, "4200") || !strings.Contains(fix, "[[policy]] mtu") {
		t.Errorf("doctor fleet check: %s %q (fix %q); want warn naming %s, mtu %s and 4200, fix with [[policy]] mtu", v, msg, fix, other, localMTU)
	}
	if pv, _ := r.verdict("peers"); pv == "fail" {
		t.Errorf("doctor peers check failed: an MTU mismatch must not take the peer down in the probes' view")
	}

	mustRun(t, "vmnode", "2", "ip", "link", "set", "eth0", "mtu", origMTU)
	restored = true
	_, took = fleetWait(t, other, "the MTU mismatch cleared", 60*time.Second, func(p fleetPeer) bool { _, _, bad := p.mtuMismatch(); return !bad })
	t.Logf("node 2's MTU restored -> mismatch cleared after %v", took)
	r, _ = doctorRun(t)
	if v, msg := r.verdict("fleet"); v == "warn" && strings.Contains(msg, "mtu") {
		t.Errorf("after restoring the MTU the fleet check still warns: %s", msg)
	}
}
