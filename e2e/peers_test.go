//go:build e2e

package e2e

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"
)

//e2e:nodes 2

// The peer-probe tests need two nodes: test/vm/run --nodes 2 writes a
// [[peer]] drop-in on each node naming the other, and sets RDMAD_PEERS.

type peersView struct {
	Ports []struct {
		Key string `json:"key"`
		QPN uint32 `json:"qpn"`
	} `json:"ports"`
	Peers []struct {
		Name   string `json:"name"`
		State  string `json:"state"`
		Reason string `json:"reason"`
		Paths  []struct {
			Local   string  `json:"local"`
			State   string  `json:"state"`
			LastRTT int64   `json:"last_rtt_ns"`
			RTTP50  int64   `json:"rtt_p50_ns"`
			LossPct float64 `json:"loss_pct"`
			Samples int     `json:"samples"`
		} `json:"paths"`
	} `json:"peers"`
}

// peersOther returns the other node's address, skipping without one.
func peersOther(t *testing.T) string {
	t.Helper()
	requireVM(t)
	p := strings.Fields(os.Getenv("RDMAD_PEERS"))
	if len(p) == 0 {
		t.Skip("needs two nodes (RDMAD_PEERS is empty): run this binary with test/vm/run --nodes 2")
	}
	return p[0]
}

// peersState returns the state node (1: local, 2: via vmnode) reports
// for peer, and the whole view.
func peersState(t *testing.T, node int, peer string) (string, peersView) {
	t.Helper()
	var out string
	var err error
	if node == 1 {
		out, err = run("rdmactl", "--json", "peers")
	} else {
		out, err = run("vmnode", "2", "rdmactl", "--json", "peers")
	}
	// Exit status 3 means "not every peer is up": still a valid answer.
	if err != nil && !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("node %d: %v", node, err)
	}
	var v peersView
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("node %d: rdmactl --json peers: %v in %q", node, err, out)
	}
	for _, p := range v.Peers {
		if p.Name == peer {
			return p.State, v
		}
	}
	return "absent", v
}

// peersWait polls until node reports want for peer and returns how long it
// took, failing after limit.
func peersWait(t *testing.T, node int, peer, want string, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	var last string
	var v peersView
	for time.Since(start) < limit {
		if last, v = peersState(t, node, peer); last == want {
			return time.Since(start)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("node %d: peer %s is %s after %v, want %s; view %+v", node, peer, last, limit, want, v)
	return 0
}

func TestPeersSeeEachOther(t *testing.T) {
	other := peersOther(t)
	peersWait(t, 1, other, "up", 90*time.Second)
	peersWait(t, 2, nodeAddr(t), "up", 90*time.Second)
	_, v := peersState(t, 1, other)
	if len(v.Ports) == 0 || v.Ports[0].Key != "rxe0/1" || v.Ports[0].QPN == 0 {
		t.Errorf("probe ports = %+v, want rxe0/1 with a QPN", v.Ports)
	}
	for _, p := range v.Peers {
		for _, pa := range p.Paths {
			if pa.Local != "rxe0/1" || pa.State != "up" || pa.LastRTT <= 0 || pa.Samples == 0 {
				t.Errorf("path to %s = %+v, want rxe0/1 up with an RTT", p.Name, pa)
			}
		}
	}
	// One-shot probe: answers with a fresh RTT, exit 0.
	out := mustRun(t, "rdmactl", "--json", "probe", other)
	var one struct {
		State string `json:"state"`
		Paths []struct {
			LastRTT int64 `json:"last_rtt_ns"`
		} `json:"paths"`
	}
	if err := json.Unmarshal([]byte(out), &one); err != nil || one.State != "up" || len(one.Paths) == 0 || one.Paths[0].LastRTT <= 0 {
		t.Errorf("rdmactl probe %s = %s (%v), want up with an RTT", other, out, err)
	}
	if _, err := run("rdmactl", "probe", "198.51.100.9"); err == nil {
		t.Errorf("rdmactl probe of an unconfigured address succeeded; want an error")
	}
}

func TestPeersDownAndBack(t *testing.T) {
	other := peersOther(t)
	peersWait(t, 1, other, "up", 90*time.Second)
	mustRun(t, "vmnode", "2", "systemctl", "stop", "rdmad")
	defer run("vmnode", "2", "systemctl", "start", "rdmad")
	// The bound is 3 s at a 1 s interval; vmnode and rdmactl themselves
	// take time under TCG, so the poll adds its own latency on top.
	took := peersWait(t, 1, other, "down", 15*time.Second)
	t.Logf("peer stopped -> reported down after %v (poll latency included)", took)
	if took > 5*time.Second {
		t.Errorf("down after %v; want within 3 s (+2 s for polling under TCG)", took)
	}
	mustRun(t, "vmnode", "2", "systemctl", "start", "rdmad")
	took = peersWait(t, 1, other, "up", 90*time.Second)
	t.Logf("peer restarted -> reported up after %v", took)
}

func TestPeersLossDegraded(t *testing.T) {
	other := peersOther(t)
	peersWait(t, 1, other, "up", 90*time.Second)
	// Loss on node 2's NIC drops probes and answers alike. 30% makes the
	// test fast; docs/BENCHMARKS.md measures 5%.
	mustRun(t, "vmnode", "2", "tc", "qdisc", "add", "dev", "eth0", "root", "netem", "loss", "30%")
	defer run("vmnode", "2", "tc", "qdisc", "del", "dev", "eth0", "root")
	took := peersWait(t, 1, other, "degraded", 120*time.Second)
	t.Logf("30%% loss -> reported degraded after %v", took)
}
