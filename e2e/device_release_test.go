//go:build e2e

package e2e

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"
)

// TestDeviceReleaseOnRemoval is issue #14 item 4: with rdmad holding rxe0
// in all its parts (MR pool, loopback prober and, with peers configured as
// in the two-node test bed, the peer engine's probe port), `rdma link del
// rxe0` must not wait for any of them. Linux 6.1's rxe cannot disassociate
// its users, so ib_unregister_device, and with it the command, waits until
// every process has closed the device; rdmad lets go as soon as the kernel
// removes the device's uverbs node (uevent) or one of its parts notices,
// instead of at the MR pool's next canary (up to 30 s; 26.6 s measured).
// The goal is under 1 s; the test fails above 5 s. Then rxe0 is added
// again and rdmad must register its pool, probe it again and open its peer
// probe port again, driven by the uevents of the returning device, not by
// the canary or the resync.
func TestDeviceReleaseOnRemoval(t *testing.T) {
	requireVM(t)
	before := waitActive(t)
	// The peer engine holds rxe0 only where it has peers to probe (the
	// package runs with two nodes: test/vm/run --nodes 2 sets RDMAD_PEERS).
	peers := len(strings.Fields(os.Getenv("RDMAD_PEERS"))) > 0
	if !peers {
		t.Log("RDMAD_PEERS is empty: one node, no peer engine; the removal is tested with the MR pool and the loopback prober only")
	}
	holders := "the MR pool and the loopback prober"
	if peers {
		holders = "the MR pool, the loopback prober and the peer engine"
	}
	t.Cleanup(func() {
		// Leave rxe0 for the next test whatever happened here.
		if _, err := os.Stat("/sys/class/infiniband/" + roceDev); err != nil {
			if _, err := run("rdma", "link", "add", roceDev, "type", "rxe", "netdev", "eth0"); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
	})
	waitFor(t, 60*time.Second, "rxe0 held by "+holders, func() (bool, string) {
		s := releaseStatusNow(t)
		return holdsRxe(s, peers), s.String()
	})

	since := time.Now().Add(-time.Second).Format("2006-01-02 15:04:05")
	start := time.Now()
	mustRun(t, "rdma", "link", "del", roceDev)
	took := time.Since(start)
	t.Logf("rdma link del %s with rdmad running returned after %v (goal < 1s, limit 5s)", roceDev, took.Round(time.Millisecond))
	journal, _ := run("journalctl", "-u", "rdmad", "--since", since, "--no-pager", "-o", "cat")
	if took > 5*time.Second {
		t.Errorf("rdma link del %s took %v: rdmad held the device (limit 5s); rdmad's journal since:\n%s", roceDev, took, journal)
	} else if took > time.Second {
		t.Logf("slower than the 1s goal; rdmad's journal since:\n%s", journal)
	}
	if !strings.Contains(journal, "every part let it go") {
		t.Errorf("rdmad's journal has no release of %s:\n%s", roceDev, journal)
	}
	if _, err := os.Stat("/sys/class/infiniband/" + roceDev); err == nil {
		t.Errorf("/sys/class/infiniband/%s still exists after rdma link del returned", roceDev)
	}
	// The snapshot follows the release on the main loop's next turn.
	waitFor(t, 5*time.Second, "status shows rxe0's pool released, its loopback and its peer probe port gone", func() (bool, string) {
		s := releaseStatusNow(t)
		for _, d := range s.MRPool {
			if d.Device == roceDev && d.Registered {
				return false, "mrpool " + mustJSON(s.MRPool)
			}
		}
		for _, p := range s.Loopback {
			if p.Device == roceDev && p.State == "ok" {
				return false, "loopback " + mustJSON(s.Loopback)
			}
		}
		if s.peerPortOnRxe() {
			return false, "peer probe ports " + mustJSON(s.Peers.Ports)
		}
		return true, ""
	})

	mustRun(t, "rdma", "link", "add", roceDev, "type", "rxe", "netdev", "eth0")
	back := time.Now()
	// Under TCG a few seconds are already slow; the canary (30 s) and the
	// resync (5 min) must not be what brings the pool back. Polling goes on
	// past the limit so that a failure says "slow" or "never".
	const follow, patience = 15 * time.Second, 90 * time.Second
	took = waitFor(t, patience, "rxe0 back in "+holders, func() (bool, string) {
		s := releaseStatusNow(t)
		return holdsRxe(s, peers), s.String()
	})
	if took > follow {
		t.Errorf("rdma link add %s: %s back after %v, want within %v (uevents, not the canary)", roceDev, holders, took, follow)
	}
	t.Logf("%s of %s back %v after rdma link add returned", holders, roceDev, time.Since(back).Round(time.Millisecond))

	after := showUnit(t)
	if after.MainPID != before.MainPID || after.NRestarts != before.NRestarts {
		t.Errorf("rdmad restarted during the removal: before %+v, after %+v", before, after)
	}
}

// releaseStatus is the status this test reads: daemonStatus and the peer
// engine's probe ports.
type releaseStatus struct {
	daemonStatus
	Peers struct {
		Ports []struct {
			Key string `json:"key"`
			QPN uint32 `json:"qpn"`
		} `json:"ports"`
	} `json:"peers"`
}

func releaseStatusNow(t *testing.T) releaseStatus {
	t.Helper()
	out, _ := run("rdmactl", "status", "--json")
	var s releaseStatus
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("decode status: %v\n%s", err, out)
	}
	return s
}

// String is what a failed wait shows of s.
func (s releaseStatus) String() string {
	return "mrpool " + mustJSON(s.MRPool) + " loopback " + mustJSON(s.Loopback) + " peer probe ports " + mustJSON(s.Peers.Ports)
}

// peerPortOnRxe reports whether the peer engine has a probe port (a QP) on
// rxe0.
func (s releaseStatus) peerPortOnRxe() bool {
	for _, p := range s.Peers.Ports {
		if strings.HasPrefix(p.Key, roceDev+"/") && p.QPN != 0 {
			return true
		}
	}
	return false
}

// holdsRxe reports whether s shows rxe0's MR pool registered, its port 1
// probed successfully and, with peers, a peer probe port on it.
func holdsRxe(s releaseStatus, peers bool) bool {
	if peers && !s.peerPortOnRxe() {
		return false
	}
	pool, loop := false, false
	for _, d := range s.MRPool {
		if d.Device == roceDev && d.Registered && d.RegisteredBytes > 0 {
			pool = true
		}
	}
	for _, p := range s.Loopback {
		if p.Device == roceDev && p.Port == 1 && p.State == "ok" {
			loop = true
		}
	}
	return pool && loop
}
