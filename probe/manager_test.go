package probe

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/probe/ud"
	"github.com/rdmad/rdmad/probe/wire"
)

// fabric stands in for the RDMA network between fakeProbers: this host has
// no RDMA, and the manager's part (discovery over the real control
// endpoint, schedule, timeouts, states) is what these tests are about.
// It keeps verbs/peer's rules: a probe is answered only if the target
// admitted the sender, and only while the target is alive.
type fabric struct {
	mu     sync.Mutex
	byQPN  map[uint32]*fakeTransport
	nextQP uint32
}

type fakeTransport struct {
	f        *fabric
	qpn      uint32
	gid      [16]byte
	onReply  func(ud.Reply)
	admitted map[uint32]bool
	// keyed answers tagged probes with tagged replies (it has the fleet
	// key); sentTo counts the probes sent to each QPN; hold, while set,
	// keeps replies back until it is closed. All under f.mu.
	keyed  bool
	sentTo map[uint32]int
	hold   chan struct{}
	// postHold, while set, makes ProbeBatch block until it is closed, as
	// an rxe post that retries a dropped send does (stall.go).
	postHold chan struct{}
}

// loopbackFabric returns a free UDP port for the managers' control
// endpoints (on loopback addresses other than 127.0.0.1, the same port
// each, as on separate hosts) and an empty fabric between them.
func loopbackFabric(t *testing.T) (int, *fabric) {
	t.Helper()
	l, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.LocalAddr().(*net.UDPAddr).Port
	l.Close()
	return port, &fabric{byQPN: map[uint32]*fakeTransport{}}
}

func (f *fabric) newTransport(gidByte byte) *fakeTransport {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextQP++
	p := &fakeTransport{f: f, qpn: 0x100 + f.nextQP, gid: [16]byte{15: gidByte}, admitted: map[uint32]bool{}, sentTo: map[uint32]int{}}
	f.byQPN[p.qpn] = p
	return p
}

func (f *fabric) kill(p *fakeTransport) {
	f.mu.Lock()
	delete(f.byQPN, p.qpn)
	f.mu.Unlock()
}

func (p *fakeTransport) Ports() ([]ud.LocalPort, error) {
	return []ud.LocalPort{{Key: "fake0/1", Endpoint: ud.Endpoint{QPN: p.qpn, QKey: 5, GID: p.gid}}}, nil
}

func (p *fakeTransport) Admit(local string, src ud.Endpoint, from netip.Addr, authenticated bool, until time.Time) error {
	p.f.mu.Lock()
	defer p.f.mu.Unlock()
	p.admitted[src.QPN] = true
	return nil
}

func (p *fakeTransport) ProbeBatch(local string, ts []ud.Target) int {
	p.f.mu.Lock()
	postHold := p.postHold
	p.f.mu.Unlock()
	if postHold != nil {
		<-postHold
	}
	for i := range ts {
		ts[i].Err = nil
		p.f.mu.Lock()
		t := p.f.byQPN[ts[i].Dst.QPN]
		ok := t != nil && t.admitted[p.qpn]
		if p.sentTo != nil {
			p.sentTo[ts[i].Dst.QPN]++
		}
		hold := p.hold
		// A tagged probe is answered only by a responder with the key, as
		// verbs/peer drops what it cannot verify.
		ok = ok && (!ts[i].Auth || t.keyed)
		p.f.mu.Unlock()
		if ok {
			r := ud.Reply{Local: local, From: ud.Endpoint{QPN: t.qpn, GID: t.gid}, Seq: ts[i].Seq, RTT: 30 * time.Microsecond, ResponderDelay: 10 * time.Microsecond, At: time.Now(),
				Authenticated: ts[i].Auth}
			go func() {
				if hold != nil {
					<-hold
				}
				p.onReply(r)
			}()
		}
	}
	return len(ts)
}

type node struct {
	m      *Manager
	pr     *fakeTransport
	cancel context.CancelFunc
	done   chan error
	mu     sync.Mutex
	last   apitype.Peers
}

func (n *node) peer(name string) apitype.Peer {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, p := range n.last.Peers {
		if p.Name == name {
			return p
		}
	}
	return apitype.Peer{State: "absent"}
}

func startNode(t *testing.T, f *fabric, addr, other string, port int, id byte) *node {
	return startNodeAuth(t, f, addr, other, port, id, Auth{})
}

// startNodeAuth starts a node with a fleet key and mode.
func startNodeAuth(t *testing.T, f *fabric, addr, other string, port int, id byte, auth Auth) *node {
	t.Helper()
	n := &node{pr: f.newTransport(id), done: make(chan error, 1)}
	n.pr.keyed = len(auth.Key) > 0
	s := Settings{Peers: []Spec{{Name: other}}, Port: port, Interval: 100 * time.Millisecond, Timeout: 50 * time.Millisecond,
		Window: 20, MaxPeers: 8, Rotate: time.Hour, Resolve: time.Minute,
		Threshold: Thresholds{DownAfter: 3, UpAfter: 3, LossPct: 5, MinLosses: 2}, Auth: auth}
	m, err := New(Options{Transport: n.pr, NodeID: uint64(id), ListenHost: addr,
		OnState: func(ps apitype.Peers) { n.mu.Lock(); n.last = ps; n.mu.Unlock() }}, s)
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
	port, f := loopbackFabric(t)
	a := startNode(t, f, "127.0.0.2", "127.0.0.3", port, 1)
	defer a.stop(t)
	b := startNode(t, f, "127.0.0.3", "127.0.0.2", port, 2)
	waitState(t, a, "127.0.0.3", apitype.PeerUp, 5*time.Second)
	waitState(t, b, "127.0.0.2", apitype.PeerUp, 5*time.Second)
	if p := a.peer("127.0.0.3"); len(p.Paths) != 1 || p.Paths[0].RemoteQPN != b.pr.qpn || p.Paths[0].LastRTT != 30*time.Microsecond || p.NodeID != "2" {
		t.Errorf("a's view of b = %+v; want one path to b's QP, the measured RTT of 30µs (host delay not subtracted), node id 2", p)
	}

	// One-shot probe of a configured peer, and of one that is not.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if p, err := a.m.ProbeOnce(ctx, "127.0.0.3"); err != nil || p.State != apitype.PeerUp {
		t.Errorf("ProbeOnce = %+v, %v; want up", p, err)
	}
	if _, err := a.m.ProbeOnce(ctx, "127.0.0.9"); err == nil {
		t.Errorf("ProbeOnce of an unconfigured peer succeeded")
	}

	// Stop b: its QP is gone and its control endpoint closed.
	f.kill(b.pr)
	b.stop(t)
	took := waitState(t, a, "127.0.0.3", apitype.PeerDown, 3*time.Second)
	// 3 losses at 100ms interval, 50ms timeout, fast retries: well under
	// 3 intervals.
	if took > 600*time.Millisecond {
		t.Errorf("down after %v; want within 3 intervals (300ms) plus scheduling", took)
	}

	// Restart b: a new QPN, found again through the control endpoint.
	b = startNode(t, f, "127.0.0.3", "127.0.0.2", port, 2)
	defer b.stop(t)
	waitState(t, a, "127.0.0.3", apitype.PeerUp, 5*time.Second)
	if p := a.peer("127.0.0.3"); p.Paths[0].RemoteQPN != b.pr.qpn {
		t.Errorf("after restart a probes QP %#x, want the new %#x", p.Paths[0].RemoteQPN, b.pr.qpn)
	}
}

// busyProber refuses every second probe of a batch, as verbs/peer does when
// its send slots are all in flight.
type busyProber struct{ fakeTransport }

func (b *busyProber) ProbeBatch(local string, ts []ud.Target) int {
	n := 0
	for i := range ts {
		ts[i].Err = nil
		if i%2 == 1 {
			ts[i].Err = ud.ErrBusy
			continue
		}
		n++
	}
	return n
}

// TestFlushNotSent checks that a probe the prober refused is counted as not
// sent and leaves nothing in flight, so it cannot later count as lost.
func TestFlushNotSent(t *testing.T) {
	m, err := New(Options{Transport: &busyProber{}}, Settings{Interval: time.Second, Timeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	p := &mpeer{spec: Spec{Name: "192.0.2.1"}}
	pa := &path{local: "rxe0/1", remote: ud.Endpoint{QPN: 9}, win: *newWindow(10), h: newHealth(time.Now())}
	now := time.Now()
	for range 4 {
		m.send(p, pa, now)
	}
	m.sched.flush(m.opts.Transport, m.log)
	if m.sched.notSent != 2 || pa.inflight != 2 || m.sched.flights.live() != 2 {
		t.Fatalf("after a batch of 4 with 2 refused: notSent %d, in flight %d, flights %d; want 2, 2, 2", m.sched.notSent, pa.inflight, m.sched.flights.live())
	}
	if q := m.sched.outbox["rxe0/1"]; q == nil || len(q.ts) != 0 {
		t.Fatalf("outbox not emptied: %+v", q)
	}
	m.expire(now.Add(time.Second))
	if pa.lost != 2 {
		t.Errorf("lost %d after the timeout; want 2 (the refused probes are not losses)", pa.lost)
	}
}

// TestControlRebind changes [probe] port on a running manager: the control
// endpoint moves to the new port and answers there; a port that cannot be
// bound leaves it where it is, with the reason in the state, and a later
// good port still works.
func TestControlRebind(t *testing.T) {
	f := &fabric{byQPN: map[uint32]*fakeTransport{}}
	a := startNode(t, f, "127.0.0.2", "127.0.0.3", 18621, 2)
	defer a.stop(t)
	waitControl := func(port int, wantErr bool) apitype.Peers {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			a.mu.Lock()
			ps := a.last
			a.mu.Unlock()
			if ps.ControlPort == port && (ps.ControlError != "") == wantErr {
				return ps
			}
			time.Sleep(10 * time.Millisecond)
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		t.Fatalf("control port %d error %q; want port %d, error %v", a.last.ControlPort, a.last.ControlError, port, wantErr)
		return apitype.Peers{}
	}
	// answers reports whether a query to port gets an answer.
	answers := func(port int) bool {
		t.Helper()
		conn, err := net.DialUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 3)}, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2), Port: port})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		q := wire.Message{Type: wire.TypeQuery, NodeID: 9, Nonce: 1, Count: 1, QPN: 0x99, QKey: 5}
		b, _ := q.Append(nil, nil)
		conn.Write(b)
		conn.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		buf := make([]byte, wire.MaxSize)
		n, err := conn.Read(buf)
		if err != nil {
			return false
		}
		_, err = wire.Decode(buf[:n], nil)
		return err == nil
	}
	waitControl(18621, false)
	if !answers(18621) {
		t.Fatal("no answer on the first port")
	}
	s := a.m.cfg
	s.Port = 18622
	a.m.SetSettings(s)
	waitControl(18622, false)
	if !answers(18622) {
		t.Error("no answer on the new port")
	}
	if answers(18621) {
		t.Error("the old port still answers")
	}
	// A port someone else holds: the endpoint stays on 18622.
	busy, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2), Port: 18623})
	if err != nil {
		t.Fatal(err)
	}
	s.Port = 18623
	a.m.SetSettings(s)
	ps := waitControl(18622, true)
	if !strings.Contains(ps.ControlError, "18623") || !strings.Contains(ps.ControlError, "still answering on UDP port 18622") {
		t.Errorf("control error %q: want the port that failed and the one in force", ps.ControlError)
	}
	if !answers(18622) {
		t.Error("no answer on the port in force after a failed move")
	}
	busy.Close()
	s.Port = 18624
	a.m.SetSettings(s)
	waitControl(18624, false)
	if !answers(18624) {
		t.Error("no answer after moving again")
	}
	// The endpoints share their counters: the answers given on every
	// port are counted (18621, 18622 twice, 18624).
	deadline := time.Now().Add(3 * time.Second)
	for {
		a.mu.Lock()
		n := a.last.Counters.ControlAnswered
		a.mu.Unlock()
		if n >= 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("control answered %d after answering 4 queries on three ports; the counters must carry over", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestLocalFaults checks the local-fault inference: a port is the suspect
// only while at least two peers have known paths on it and all are down.
func TestLocalFaults(t *testing.T) {
	mk := func(states ...string) *Manager {
		m, err := New(Options{Transport: &fakeTransport{}}, Settings{Interval: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		m.local = []ud.LocalPort{{Key: "rxe0/1"}, {Key: "rxe1/1"}}
		for i, st := range states {
			p := &mpeer{spec: Spec{Name: fmt.Sprint("peer", i)}}
			h := newHealth(time.Now())
			h.state = st
			// Every peer is up on the second port: only the first is at fault.
			up := newHealth(time.Now())
			up.state = apitype.PeerUp
			p.paths = []*path{{local: "rxe0/1", h: h}, {local: "rxe1/1", h: up}}
			m.peers.byName[p.spec.Name] = p
		}
		return m
	}
	tests := []struct {
		name   string
		states []string
		want   bool
	}{
		{"one peer down is that peer", []string{apitype.PeerDown}, false},
		{"two peers down", []string{apitype.PeerDown, apitype.PeerDown}, true},
		{"one of three answers", []string{apitype.PeerDown, apitype.PeerUp, apitype.PeerDown}, false},
		{"unknown paths do not count", []string{apitype.PeerDown, apitype.PeerDown, apitype.PeerUnknown}, true},
		{"degraded is not down", []string{apitype.PeerDown, apitype.PeerDegraded}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := mk(tt.states...)
			m.localFaults()
			got := m.State()
			var fault0, fault1 string
			for _, p := range got.Ports {
				switch p.Key {
				case "rxe0/1":
					fault0 = p.LocalFault
				case "rxe1/1":
					fault1 = p.LocalFault
				}
			}
			if (fault0 != "") != tt.want || fault1 != "" {
				t.Errorf("local faults rxe0/1 %q, rxe1/1 %q; want rxe0/1 suspect %v, rxe1/1 not", fault0, fault1, tt.want)
			}
			if tt.want && !strings.Contains(fault0, "all 2 peers are down from rxe0/1") {
				t.Errorf("reason %q: want the count and the port", fault0)
			}
		})
	}
}

// TestLookupBackoff checks that a peer name that does not resolve is looked
// up again after 1, 2, 4 ... intervals, not every interval.
func TestLookupBackoff(t *testing.T) {
	var mu sync.Mutex
	var calls []time.Time
	lookup := func(ctx context.Context, host string) ([]netip.Addr, error) {
		mu.Lock()
		calls = append(calls, time.Now())
		mu.Unlock()
		return nil, fmt.Errorf("lookup %s: no such host", host)
	}
	var last apitype.Peers
	var lmu sync.Mutex
	m, err := New(Options{Transport: &fakeTransport{}, ListenHost: "127.0.0.2", Lookup: lookup,
		OnState: func(ps apitype.Peers) { lmu.Lock(); last = ps; lmu.Unlock() }},
		Settings{Peers: []Spec{{Name: "nowhere.example"}}, Port: 18631, Interval: 40 * time.Millisecond, Timeout: 20 * time.Millisecond,
			Window: 10, MaxPeers: 8, Rotate: time.Hour, Resolve: time.Minute, Threshold: Thresholds{DownAfter: 3, UpAfter: 3, LossPct: 5, MinLosses: 2}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	time.Sleep(1200 * time.Millisecond)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	n := len(calls)
	mu.Unlock()
	// Every interval would be about 30 lookups; 40, 80, 160, 320, 640 ms
	// apart is at most 6 in 1.2 s.
	if n < 2 || n > 6 {
		t.Errorf("%d lookups in 1.2 s at a 40 ms interval; want 2 to 6 (backing off)", n)
	}
	lmu.Lock()
	defer lmu.Unlock()
	if len(last.Peers) != 1 || last.Peers[0].State != apitype.PeerDown || !strings.Contains(last.Peers[0].Reason, "cannot resolve nowhere.example") {
		t.Errorf("peers %+v; want nowhere.example down, saying it cannot be resolved", last.Peers)
	}
}

// TestAlignUp: the ticks the passes and the control endpoint's reads share
// are multiples of the window since the epoch, and a time on a tick is its
// own tick.
func TestAlignUp(t *testing.T) {
	w := 250 * time.Millisecond
	base := time.Unix(1_700_000_000, 0)
	for _, c := range []struct{ in, want time.Duration }{
		{0, 0},
		{time.Nanosecond, w},
		{w - time.Nanosecond, w},
		{w, w},
		{w + 3*time.Millisecond, 2 * w},
	} {
		if got := alignUp(base.Add(c.in), w); !got.Equal(base.Add(c.want)) {
			t.Errorf("alignUp(+%v, %v) = +%v, want +%v", c.in, w, got.Sub(base), c.want)
		}
	}
	// The monotonic reading is kept: the tick is a time a timer can wait for.
	now := time.Now()
	if tick := alignUp(now, w); tick.Sub(now) < 0 || tick.Sub(now) >= w || tick.UnixNano()%int64(w) != 0 {
		t.Errorf("alignUp(now) = now+%v (%d ns mod %v)", tick.Sub(now), tick.UnixNano()%int64(w), w)
	}
	if got := alignUp(base.Add(time.Nanosecond), 0); !got.Equal(base.Add(time.Nanosecond)) {
		t.Errorf("alignUp with no window moved the time to %v", got)
	}
}

// TestTickWakesOnTicks: the pass asks to be woken on a tick of the batch
// window, for the earliest of what falls due: a publish, a probe's
// timeout (a tick at or after it, less the slack a late timer may take),
// a turn (a window early).
func TestTickWakesOnTicks(t *testing.T) {
	m, err := New(Options{Transport: &fakeTransport{}}, Settings{Interval: time.Second, Timeout: 500 * time.Millisecond, Rotate: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	w := batchWindow(m.cfg.Interval)
	onTick := func(what string, got, now time.Time) {
		t.Helper()
		if got.UnixNano()%int64(w) != 0 || got.Before(now) {
			t.Errorf("%s: the pass at %v wants to wake at %v, not a tick of %v at or after it", what, now, got, w)
		}
	}
	// A pass 1.2 ms after a tick, as a timer's delay makes it.
	now := alignUp(time.Now(), w).Add(1200 * time.Microsecond)
	m.peers.epoch = uint64(now.UnixNano()) / uint64(m.cfg.Rotate) // no reselection: no endpoint here
	next := m.tick(context.Background(), now)
	onTick("publish", next, now)
	if next.Sub(now) > publishEvery+w {
		t.Errorf("nothing due: next pass %v after this one, want the publish within %v", next.Sub(now), publishEvery+w)
	}

	// A probe sent by this pass times out two windows later: the tick
	// two windows on, though the probe went 1.2 ms after this tick.
	m.sched.flights.push(1, flight{p: &mpeer{}, pa: &path{}, sent: monoNs(now)})
	next = m.tick(context.Background(), now)
	onTick("timeout", next, now)
	if want := alignUp(now, w).Add(-w).Add(2 * w); !next.Equal(want) {
		t.Errorf("timeout: next pass at +%v, want the tick at +%v", next.Sub(now), want.Sub(now))
	}

	// A turn due 1.5 windows on may go a window early: the next tick.
	p := &mpeer{spec: Spec{Name: "peer0"}}
	p.setDue(now.Add(w + w/2))
	m.sched.due.push(p)
	next = m.tick(context.Background(), now)
	onTick("turn", next, now)
	if want := alignUp(now, w); !next.Equal(want) {
		t.Errorf("turn: next pass at +%v, want the next tick at +%v", next.Sub(now), want.Sub(now))
	}
}
