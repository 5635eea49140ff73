//go:build linux && verbsfake

package daemon

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/health"
	"github.com/rdmad/rdmad/probe"
	"github.com/rdmad/rdmad/probe/ud"
	"github.com/rdmad/rdmad/verbs"
	"github.com/rdmad/rdmad/verbs/peer"
)

// A fakeProbeNode is one node's peer probes as rdmad runs them, on the fake
// NIC: the verbs engine over its devices and the manager over the engine,
// with its control endpoint on a loopback address of its own.
type fakeProbeNode struct {
	eng  *peer.Engine
	mgr  *probe.Manager
	mu   sync.Mutex
	last apitype.Peers
	stop func()
}

func startFakeProbeNode(t *testing.T, devs []string, addr, other string, port int, id uint64) *fakeProbeNode {
	t.Helper()
	n := &fakeProbeNode{}
	var err error
	n.eng, err = peer.New(peer.Config{Devices: devs, Rescan: 100 * time.Millisecond, Flows: 1,
		OnReply: func(r ud.Reply) { n.mgr.OnReply(r) },
		OnPorts: func([]ud.LocalPort, error) {
			if n.mgr != nil {
				n.mgr.PortsChanged()
			}
		}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	s := probe.Settings{Peers: []probe.Spec{{Name: other}}, Port: port, Interval: 100 * time.Millisecond, Timeout: 50 * time.Millisecond,
		Window: 20, MaxPeers: 8, Rotate: time.Hour, Resolve: time.Second, Flows: 1,
		Threshold: probe.Thresholds{DownAfter: 3, UpAfter: 3, LossPct: 5, MinLosses: 2}}
	n.mgr, err = probe.New(probe.Options{Transport: n.eng, NodeID: id, ListenHost: addr, Logger: slog.New(slog.DiscardHandler),
		ProberCounters: n.eng.Stats,
		OnState:        func(ps apitype.Peers) { n.mu.Lock(); n.last = ps; n.mu.Unlock() }}, s)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); n.eng.Run(ctx) }()
	go func() { defer wg.Done(); n.mgr.Run(ctx) }()
	n.stop = func() { cancel(); wg.Wait() }
	return n
}

// state returns the node's state with figures no older than now.
func (n *fakeProbeNode) state(t *testing.T) apitype.Peers {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := n.mgr.Fresh(ctx, 0); err != nil {
		t.Fatalf("Fresh: %v", err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.last
}

// paths returns the node's paths from local port key, of its only peer.
func pathsFrom(ps apitype.Peers, key string) []apitype.PeerPath {
	var out []apitype.PeerPath
	for _, p := range ps.Peers {
		for _, pa := range p.Paths {
			if pa.Local == key {
				out = append(out, pa)
			}
		}
	}
	return out
}

// TestFakePortStall is issue #38 item 2 on the fake NIC: node A probes
// node B from two devices, and rxe0's ibv_post_send blocks (as rxe's does
// while it retries a dropped send) for 3 s. A's other port, rxe1, keeps its
// probe rate; A's control endpoint keeps answering B (an admission no
// longer waits for the stuck port); rxe0 is cut off with its path unknown,
// not down; A's peers component names the device and port, and the
// verdict says DaemonDegraded; once the post returns rxe0 is probed again.
func TestFakePortStall(t *testing.T) {
	t.Cleanup(verbs.FakeReset)
	for _, d := range []string{"rxe0", "rxe1", "rxe2", "rxe3"} {
		if err := verbs.FakeAddDevice(verbs.FakeDevice{Name: d}); err != nil {
			t.Fatal(err)
		}
	}
	l, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.LocalAddr().(*net.UDPAddr).Port
	l.Close()
	a := startFakeProbeNode(t, []string{"rxe0", "rxe1"}, "127.0.0.2", "127.0.0.3", port, 1)
	defer a.stop()
	b := startFakeProbeNode(t, []string{"rxe2", "rxe3"}, "127.0.0.3", "127.0.0.2", port, 2)
	defer b.stop()

	deadline := time.Now().Add(10 * time.Second)
	for {
		ps := a.state(t)
		if len(ps.Peers) == 1 && ps.Peers[0].State == apitype.PeerUp && len(ps.Peers[0].Paths) == 2 &&
			ps.Peers[0].Paths[0].State == apitype.PeerUp && ps.Peers[0].Paths[1].State == apitype.PeerUp {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("A's peer B after 10 s: %+v; want up on two paths", ps.Peers)
		}
		time.Sleep(50 * time.Millisecond)
	}

	before := a.state(t)
	sent1 := pathsFrom(before, "rxe1/1")[0].Sent
	answered := before.Counters.ControlAnswered
	release, err := verbs.FakeBlockPost("rxe0", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	const stall = 3 * time.Second
	start := time.Now()
	for time.Since(start) < stall {
		a.mu.Lock()
		ps := a.last
		a.mu.Unlock()
		for _, pa := range pathsFrom(ps, "rxe0/1") {
			if pa.State == apitype.PeerDown {
				t.Fatalf("%v into the stall rxe0/1's path is down; a port that cannot post makes it unknown", time.Since(start))
			}
		}
		if len(ps.Peers) == 1 && ps.Peers[0].State == apitype.PeerDown {
			t.Fatalf("%v into the stall peer B is down (%s): its rxe1/1 path answers", time.Since(start), ps.Peers[0].Reason)
		}
		time.Sleep(20 * time.Millisecond)
	}
	during := a.state(t)
	got := pathsFrom(during, "rxe1/1")[0].Sent - sent1
	want := uint64(stall / (100 * time.Millisecond))
	t.Logf("during the stall: rxe1/1 sent %d probes (%d due), control answers %d; rxe0/1 %+v", got, want, during.Counters.ControlAnswered-answered, pathsFrom(during, "rxe0/1"))
	if got < want*8/10 {
		t.Errorf("rxe1/1 sent %d probes in %v while rxe0's post was blocked, want at least %d of the %d due", got, stall, want*8/10, want)
	}
	if during.Counters.ControlAnswered <= answered {
		t.Errorf("A's control endpoint answered nothing in %v while rxe0's post was blocked (B asks every second)", stall)
	}
	if pa := pathsFrom(during, "rxe0/1"); len(pa) != 1 || pa[0].State != apitype.PeerUnknown {
		t.Errorf("rxe0/1's path during the stall: %+v, want unknown", pa)
	}
	if up := pathsFrom(during, "rxe1/1"); up[0].State != apitype.PeerUp {
		t.Errorf("rxe1/1's path during the stall: %s, want up", up[0].State)
	}

	// The daemon's view: the peers component in error naming the device
	// and port, and the verdict's DaemonDegraded.
	now := time.Now()
	snap := apitype.Snapshot{State: apitype.Running, Components: map[string]apitype.Component{}, Peers: during}
	r := &peerRunner{eng: a.eng, mgr: a.mgr}
	r.setComponent(&snap, now)
	c := snap.Components[apitype.ComponentPeers]
	if c.State != apitype.Error || !strings.Contains(c.Error, "device rxe0 port 1") || !strings.Contains(c.Error, "ibv_post_send") {
		t.Errorf("peers component during the stall: %+v, want an error naming device rxe0 port 1 and ibv_post_send", c)
	}
	cond, _ := health.Evaluate(health.Input{Snap: &snap, Now: now}).Condition(apitype.CondDaemon)
	if cond.Status != apitype.ConditionProblem || !strings.Contains(cond.Message, "rxe0/1") {
		t.Errorf("DaemonDegraded during the stall: %+v, want a problem naming rxe0/1", cond)
	}

	release()
	back := time.Now()
	for {
		ps := a.state(t)
		pa := pathsFrom(ps, "rxe0/1")
		if len(pa) == 1 && pa[0].State == apitype.PeerUp && ps.Ports[0].Stuck == "" {
			t.Logf("rxe0/1 up %v after its post returned", time.Since(back))
			snap.Peers = ps
			r.setComponent(&snap, time.Now())
			if c := snap.Components[apitype.ComponentPeers]; c.State != apitype.OK {
				t.Errorf("peers component after the post returned: %+v, want ok", c)
			}
			break
		}
		if time.Since(back) > 5*time.Second {
			t.Fatalf("5 s after the post returned rxe0/1 is %+v (stuck %q), want up", pa, ps.Ports[0].Stuck)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
