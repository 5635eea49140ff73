package peers

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/state"
	"github.com/rdmad/rdmad/verbs/peer"
)

// fabric stands in for the RDMA network between fakeProbers: this host has
// no RDMA, and the manager's part (discovery over the real control
// endpoint, schedule, timeouts, states) is what these tests are about.
// It keeps verbs/peer's rules: a probe is answered only if the target
// admitted the sender, and only while the target is alive.
type fabric struct {
	mu     sync.Mutex
	byQPN  map[uint32]*fakeProber
	nextQP uint32
}

type fakeProber struct {
	f        *fabric
	qpn      uint32
	gid      [16]byte
	onReply  func(peer.Reply)
	admitted map[uint32]bool
}

func (f *fabric) newProber(gidByte byte) *fakeProber {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextQP++
	p := &fakeProber{f: f, qpn: 0x100 + f.nextQP, gid: [16]byte{15: gidByte}, admitted: map[uint32]bool{}}
	f.byQPN[p.qpn] = p
	return p
}

func (f *fabric) kill(p *fakeProber) {
	f.mu.Lock()
	delete(f.byQPN, p.qpn)
	f.mu.Unlock()
}

func (p *fakeProber) Ports() ([]peer.LocalPort, error) {
	return []peer.LocalPort{{Key: "fake0/1", Endpoint: peer.Endpoint{QPN: p.qpn, QKey: 5, GID: p.gid}}}, nil
}

func (p *fakeProber) Admit(local string, src peer.Endpoint, until time.Time) error {
	p.f.mu.Lock()
	defer p.f.mu.Unlock()
	p.admitted[src.QPN] = true
	return nil
}

func (p *fakeProber) Probe(local string, dst peer.Endpoint, seq uint64) error {
	p.f.mu.Lock()
	t := p.f.byQPN[dst.QPN]
	ok := t != nil && t.admitted[p.qpn]
	p.f.mu.Unlock()
	if ok {
		r := peer.Reply{Local: local, From: peer.Endpoint{QPN: t.qpn, GID: t.gid}, Seq: seq, RTT: 30 * time.Microsecond, ResponderDelay: 10 * time.Microsecond, At: time.Now()}
		go p.onReply(r)
	}
	return nil
}

type node struct {
	m      *Manager
	pr     *fakeProber
	cancel context.CancelFunc
	done   chan error
	mu     sync.Mutex
	last   state.Peers
}

func (n *node) peer(name string) state.Peer {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, p := range n.last.Peers {
		if p.Name == name {
			return p
		}
	}
	return state.Peer{State: "absent"}
}

func startNode(t *testing.T, f *fabric, addr, other string, port int, id byte) *node {
	t.Helper()
	n := &node{pr: f.newProber(id), done: make(chan error, 1)}
	s := Settings{Peers: []Spec{{Name: other}}, Port: port, Interval: 100 * time.Millisecond, Timeout: 50 * time.Millisecond,
		Window: 20, MaxPeers: 8, Rotate: time.Hour, Resolve: time.Minute,
		Threshold: Thresholds{DownAfter: 3, UpAfter: 3, LossPct: 5, MinLosses: 2}}
	m, err := New(Options{Prober: n.pr, NodeID: uint64(id), ListenAddr: net.JoinHostPort(addr, fmt.Sprint(port)),
		OnState: func(ps state.Peers) { n.mu.Lock(); n.last = ps; n.mu.Unlock() }}, s)
	if err != nil {
		t.Fatal(err)
	}
	n.m = m
	n.pr.onReply = m.OnReply
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	go func() { n.done <- m.Run(ctx) }()
	return n
}

func (n *node) stop(t *testing.T) {
	n.cancel()
	if err := <-n.done; err != nil {
		t.Errorf("Run = %v", err)
	}
}

func waitState(t *testing.T, n *node, name, want string, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for time.Since(start) < limit {
		if n.peer(name).State == want {
			return time.Since(start)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("peer %s is %+v after %v, want %s", name, n.peer(name), limit, want)
	return 0
}

// TestManagersLoopback runs two managers with real control endpoints on
// loopback addresses other than 127.0.0.1 (which is this host itself and
// would be left out as such):
// 127.0.0.2 and 127.0.0.3 (same port, as on two hosts): they find each
// other's QPs, come up, notice a stopped peer within the bound, and come
// back when it restarts with a new QP.
func TestManagersLoopback(t *testing.T) {
	l, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.LocalAddr().(*net.UDPAddr).Port
	l.Close()
	f := &fabric{byQPN: map[uint32]*fakeProber{}}
	a := startNode(t, f, "127.0.0.2", "127.0.0.3", port, 1)
	defer a.stop(t)
	b := startNode(t, f, "127.0.0.3", "127.0.0.2", port, 2)
	waitState(t, a, "127.0.0.3", state.PeerUp, 5*time.Second)
	waitState(t, b, "127.0.0.2", state.PeerUp, 5*time.Second)
	if p := a.peer("127.0.0.3"); len(p.Paths) != 1 || p.Paths[0].RemoteQPN != b.pr.qpn || p.Paths[0].LastRTT != 20*time.Microsecond || p.NodeID != "2" {
		t.Errorf("a's view of b = %+v; want one path to b's QP, RTT 30µs-10µs host delay, node id 2", p)
	}

	// One-shot probe of a configured peer, and of one that is not.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if p, err := a.m.ProbeOnce(ctx, "127.0.0.3"); err != nil || p.State != state.PeerUp {
		t.Errorf("ProbeOnce = %+v, %v; want up", p, err)
	}
	if _, err := a.m.ProbeOnce(ctx, "127.0.0.9"); err == nil {
		t.Errorf("ProbeOnce of an unconfigured peer succeeded")
	}

	// Stop b: its QP is gone and its control endpoint closed.
	f.kill(b.pr)
	b.stop(t)
	took := waitState(t, a, "127.0.0.3", state.PeerDown, 3*time.Second)
	// 3 losses at 100ms interval, 50ms timeout, fast retries: well under
	// 3 intervals.
	if took > 600*time.Millisecond {
		t.Errorf("down after %v; want within 3 intervals (300ms) plus scheduling", took)
	}

	// Restart b: a new QPN, found again through the control endpoint.
	b = startNode(t, f, "127.0.0.3", "127.0.0.2", port, 2)
	defer b.stop(t)
	waitState(t, a, "127.0.0.3", state.PeerUp, 5*time.Second)
	if p := a.peer("127.0.0.3"); p.Paths[0].RemoteQPN != b.pr.qpn {
		t.Errorf("after restart a probes QP %#x, want the new %#x", p.Paths[0].RemoteQPN, b.pr.qpn)
	}
}
