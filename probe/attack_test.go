package probe

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/probe/ud"
	"github.com/rdmad/rdmad/probe/wire"
)

// These tests perform the attacks of issue #13 on the control plane with
// real UDP datagrams on loopback and check that they do no harm.

var (
	fleetKey = []byte("fleet key of the test, 32 bytes!")
	otherKey = []byte("another fleet's key, 32 bytes!!!")
)

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.LocalAddr().(*net.UDPAddr).Port
}

func udpFrom(t *testing.T, ip string, port int) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(ip), Port: port})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func send(t *testing.T, c *net.UDPConn, to netip.AddrPort, m wire.Message, key []byte) {
	t.Helper()
	b, err := m.Append(nil, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteToUDPAddrPort(b, to); err != nil {
		t.Fatal(err)
	}
}

// TestOneshotSentinelName sends the name that used to be the manager's
// internal "expire" message as a probe request: it is an unknown peer like
// any other (an error at once), and a legitimate one-shot waiting at the
// same time is not cut short by it.
func TestOneshotSentinelName(t *testing.T) {
	port := freePort(t)
	f := &fabric{byQPN: map[uint32]*fakeTransport{}}
	a := startNode(t, f, "127.0.0.2", "127.0.0.3", port, 1)
	defer a.stop(t)
	b := startNode(t, f, "127.0.0.3", "127.0.0.2", port, 2)
	defer b.stop(t)
	waitState(t, a, "127.0.0.3", apitype.PeerUp, 5*time.Second)
	// A probe timeout long enough that the held reply below is not lost:
	// the one-shot must end with its reply, not a loss.
	s := a.m.cfg
	s.Interval, s.Timeout = time.Second, 900*time.Millisecond
	a.m.SetSettings(s)
	time.Sleep(200 * time.Millisecond)

	// Hold a's replies back: the legitimate one-shot waits for its probe.
	release := make(chan struct{})
	f.mu.Lock()
	a.pr.hold = release
	f.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	type result struct {
		p   apitype.Peer
		err error
		at  time.Time
	}
	legit := make(chan result, 1)
	go func() {
		p, err := a.m.ProbeOnce(ctx, "127.0.0.3")
		legit <- result{p, err, time.Now()}
	}()
	time.Sleep(50 * time.Millisecond)

	start := time.Now()
	_, err := a.m.ProbeOnce(ctx, "\x00expire 127.0.0.3")
	if err == nil || !strings.Contains(err.Error(), "is not a configured peer") {
		t.Errorf("ProbeOnce(sentinel) = %v; want an unknown peer", err)
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("ProbeOnce(sentinel) took %v; an unknown peer is an error at once", d)
	}
	select {
	case r := <-legit:
		t.Fatalf("the legitimate one-shot ended before its reply came: %+v, %v", r.p, r.err)
	case <-time.After(300 * time.Millisecond):
	}
	released := time.Now()
	f.mu.Lock()
	a.pr.hold = nil
	f.mu.Unlock()
	close(release)
	r := <-legit
	if r.err != nil || r.p.State != apitype.PeerUp || r.at.Before(released) {
		t.Errorf("legitimate one-shot = %+v, %v at %v (replies released at %v); want up, after the release", r.p, r.err, r.at, released)
	}
}

// TestForgedAnswers floods a node's control endpoint with forged answers
// that name the forger's QP, for a peer where no rdmad runs: from another
// port of the peer's address, and from the peer's control port itself,
// with sequential (guessed) nonces, in both wire versions. The peer must
// stay not-up and nothing may point at the forger's QP.
func TestForgedAnswers(t *testing.T) {
	port := freePort(t)
	f := &fabric{byQPN: map[uint32]*fakeTransport{}}
	a := startNode(t, f, "127.0.0.2", "127.0.0.3", port, 1)
	defer a.stop(t)
	// The forger's QP exists on the fabric and would answer a's probes.
	forger := f.newTransport(66)
	f.mu.Lock()
	forger.admitted[a.pr.qpn] = true
	f.mu.Unlock()

	target := netip.MustParseAddrPort("127.0.0.2:" + strconv.Itoa(port))
	other := udpFrom(t, "127.0.0.3", 0)
	exact := udpFrom(t, "127.0.0.3", port) // no rdmad there: the forger may bind it
	deadline := time.Now().Add(1500 * time.Millisecond)
	sent := 0
	for time.Now().Before(deadline) {
		for nonce := uint64(1); nonce <= 200; nonce++ {
			for _, v := range []uint8{1, 2} {
				m := wire.Message{Version: v, Type: wire.TypeAnswer, Nonce: nonce, Count: 1, QPN: forger.qpn, QKey: 5, GID: forger.gid}
				send(t, other, target, m, nil)
				send(t, exact, target, m, nil)
				sent += 2
			}
		}
		time.Sleep(100 * time.Millisecond)
		if p := a.peer("127.0.0.3"); p.State == apitype.PeerUp || (len(p.Paths) > 0 && p.Paths[0].RemoteQPN == forger.qpn) {
			t.Fatalf("after %d forged answers the peer is %+v", sent, p)
		}
	}
	if p := a.peer("127.0.0.3"); p.State != apitype.PeerDown {
		t.Errorf("peer without rdmad is %s (%s); want down (its control endpoint does not answer)", p.State, p.Reason)
	}
	f.mu.Lock()
	n := a.pr.sentTo[forger.qpn]
	f.mu.Unlock()
	if n != 0 {
		t.Errorf("%d probes went to the forger's QP", n)
	}
}

// TestCountZeroSpoofed floods a node with answers "no probe port" (Count 0)
// for a healthy peer from another port of the peer's address, with guessed
// nonces: the peer stays up throughout.
func TestCountZeroSpoofed(t *testing.T) {
	port := freePort(t)
	f := &fabric{byQPN: map[uint32]*fakeTransport{}}
	a := startNode(t, f, "127.0.0.2", "127.0.0.3", port, 1)
	defer a.stop(t)
	b := startNode(t, f, "127.0.0.3", "127.0.0.2", port, 2)
	defer b.stop(t)
	waitState(t, a, "127.0.0.3", apitype.PeerUp, 5*time.Second)

	target := netip.MustParseAddrPort("127.0.0.2:" + strconv.Itoa(port))
	spoof := udpFrom(t, "127.0.0.3", 0)
	deadline := time.Now().Add(1500 * time.Millisecond)
	for time.Now().Before(deadline) {
		for nonce := uint64(1); nonce <= 300; nonce++ {
			send(t, spoof, target, wire.Message{Version: 2, Type: wire.TypeAnswer, Nonce: nonce}, nil)
			send(t, spoof, target, wire.Message{Version: 1, Type: wire.TypeAnswer, Nonce: nonce << 32}, nil)
		}
		time.Sleep(20 * time.Millisecond)
		if p := a.peer("127.0.0.3"); p.State != apitype.PeerUp {
			t.Fatalf("a healthy peer went %s (%s) under spoofed Count=0 answers", p.State, p.Reason)
		}
	}
}

// TestCountZeroHysteresis answers a node's real queries with Count 0 from
// the peer's control port with the right nonce: each is one failed
// observation, and only down_after of them in a row make the path down. The
// same answer from another port, or replayed, counts for nothing.
func TestCountZeroHysteresis(t *testing.T) {
	port := freePort(t)
	f := &fabric{byQPN: map[uint32]*fakeTransport{}}
	pr := f.newTransport(1)
	remote := f.newTransport(2)
	m, err := New(Options{Transport: pr, ListenHost: "127.0.0.2"}, Settings{Peers: []Spec{{Name: "127.0.0.3"}}, Port: port,
		Interval: time.Hour, Timeout: time.Hour, Window: 20, MaxPeers: 8, Rotate: time.Hour, Resolve: time.Hour,
		Threshold: Thresholds{DownAfter: 3, UpAfter: 3, LossPct: 5, MinLosses: 2}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m.control.serveErr = make(chan ctlErr, 1)
	if err := m.listen(ctx, port); err != nil {
		t.Fatal(err)
	}
	defer func() { m.control.ctl.Close(); <-m.control.done }()
	m.local, _ = pr.Ports()
	now := time.Now()
	p := m.add(Spec{Name: "127.0.0.3"}, now, false)
	m.refreshPaths(p)
	pa := p.paths[0]
	responder := udpFrom(t, "127.0.0.3", port)
	spoof := udpFrom(t, "127.0.0.3", 0)

	// ask sends a real query and returns it as the peer received it.
	ask := func() wire.Message {
		t.Helper()
		m.query(p, 0, time.Now())
		buf := make([]byte, wire.MaxSize)
		responder.SetReadDeadline(time.Now().Add(2 * time.Second))
		n, _, err := responder.ReadFromUDPAddrPort(buf)
		if err != nil {
			t.Fatal(err)
		}
		q, err := wire.Decode(buf[:n], nil)
		if err != nil {
			t.Fatal(err)
		}
		return q
	}
	// deliver hands what arrived at the control endpoint to the manager,
	// as Run does; false if nothing arrived.
	deliver := func() bool {
		for deadline := time.Now().Add(300 * time.Millisecond); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			m.in.ansMu.Lock()
			n := len(m.in.answers)
			m.in.ansMu.Unlock()
			if n > 0 {
				m.takeInbox(time.Now())
				return true
			}
		}
		return false
	}
	target := m.control.ctl.Addr()

	q := ask()
	send(t, responder, target, wire.Message{Version: q.Version, Type: wire.TypeAnswer, Nonce: q.Nonce, Count: 1, QPN: remote.qpn, QKey: 5, GID: remote.gid}, nil)
	deliver()
	if !pa.resolved || pa.remote.QPN != remote.qpn {
		t.Fatalf("the real answer did not resolve the path: %+v", pa.remote)
	}
	m.observe(p, pa, sample{rtt: time.Microsecond}, time.Now())
	if pa.h.state != apitype.PeerUp {
		t.Fatalf("path %s after an answered probe", pa.h.state)
	}

	for i := 1; i <= 3; i++ {
		q := ask()
		zero := wire.Message{Version: q.Version, Type: wire.TypeAnswer, Nonce: q.Nonce}
		// The right nonce from another port: dropped.
		send(t, spoof, target, zero, nil)
		deliver()
		if int(pa.h.consecLost) != i-1 {
			t.Fatalf("round %d: a Count=0 answer from another port counted (%d failures)", i, pa.h.consecLost)
		}
		// From the control port: one failure. Replayed: nothing more.
		send(t, responder, target, zero, nil)
		deliver()
		send(t, responder, target, zero, nil)
		deliver()
		if int(pa.h.consecLost) != i {
			t.Fatalf("round %d: %d failures after one Count=0 answer and its replay; want %d", i, pa.h.consecLost, i)
		}
		// Before down_after the losses may make the path degraded (they
		// are in its loss rate), never down.
		if down := pa.h.state == apitype.PeerDown || p.state == apitype.PeerDown; down != (i == 3) {
			t.Errorf("after %d Count=0 answers: path %s, peer %s; want down only after 3 (down_after)", i, pa.h.state, p.state)
		}
	}
	if !strings.Contains(p.reason, "no active RDMA port") {
		t.Errorf("reason %q; want it to say the peer has no active port", p.reason)
	}
}

// controlFor starts a control endpoint on addr with auth, allowing
// 127.0.0.0/8, recording admissions by source address.
func controlFor(t *testing.T, addr string, auth Auth) (*Control, func() map[netip.Addr]int) {
	t.Helper()
	var mu sync.Mutex
	admitted := map[netip.Addr]int{}
	local := ud.LocalPort{Key: "rxe0/1", Endpoint: ud.Endpoint{QPN: 0x11, QKey: 0x1234, GID: [16]byte{15: 1}}}
	c, err := ListenControl(addr, ControlOptions{NodeID: 7, AdmitFor: time.Minute, Auth: auth,
		Ports: func() []ud.LocalPort { return []ud.LocalPort{local} },
		Admit: func(_ string, _ ud.Endpoint, from netip.Addr, _ bool, _ time.Time) error {
			mu.Lock()
			defer mu.Unlock()
			admitted[from]++
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	c.SetAllow(nil, []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve = %v", err)
		}
		c.Close()
	})
	return c, func() map[netip.Addr]int {
		mu.Lock()
		defer mu.Unlock()
		out := map[netip.Addr]int{}
		for k, v := range admitted {
			out[k] = v
		}
		return out
	}
}

// exchange sends b from cl to the endpoint and returns the answer's bytes,
// or nil when none comes.
func exchange(t *testing.T, cl *net.UDPConn, to netip.AddrPort, b []byte) []byte {
	t.Helper()
	if _, err := cl.WriteToUDPAddrPort(b, to); err != nil {
		t.Fatal(err)
	}
	cl.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	buf := make([]byte, wire.MaxSize+1)
	n, _, err := cl.ReadFromUDPAddrPort(buf)
	if err != nil {
		return nil
	}
	return buf[:n]
}

// TestControlAuth checks the control endpoint with a fleet key. With auth
// required, unauthenticated and badly tagged queries admit nothing and get
// no answer (counted). With auth preferred, an older node's version-1 query
// gets a version-1 answer, an untagged version-2 query a tagged answer, and
// a wrong key is still refused.
func TestControlAuth(t *testing.T) {
	q := wire.Message{Type: wire.TypeQuery, Nonce: 99, Count: 1, QPN: 0x22, QKey: 0x55, GID: [16]byte{15: 2}}
	enc := func(v uint8, key []byte) []byte {
		m := q
		m.Version = v
		b, err := m.Append(nil, key)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	ck, wrong := wire.ControlKey(fleetKey), wire.ControlKey(otherKey)

	t.Run("require", func(t *testing.T) {
		c, admitted := controlFor(t, "127.0.0.2:0", Auth{Key: fleetKey, Require: true})
		cl := udpFrom(t, "127.0.0.4", 0)
		for _, tt := range []struct {
			name string
			b    []byte
		}{{"version 1", enc(1, nil)}, {"version 2 untagged", enc(2, nil)}, {"version 2, another key", enc(2, wrong)}} {
			if a := exchange(t, cl, c.Addr(), tt.b); a != nil {
				t.Errorf("%s: answered % x", tt.name, a)
			}
		}
		if n := admitted(); len(n) != 0 {
			t.Errorf("unauthenticated queries admitted %v", n)
		}
		a := exchange(t, cl, c.Addr(), enc(2, ck))
		if a == nil {
			t.Fatal("no answer to an authenticated query")
		}
		m, err := wire.Decode(a, ck)
		if err != nil || !m.Authenticated || m.Version != 2 || m.Nonce != 99 {
			t.Errorf("answer %+v, %v; want an authenticated version-2 answer to nonce 99", m, err)
		}
		if n := admitted()[netip.MustParseAddr("127.0.0.4")]; n != 1 {
			t.Errorf("%d admissions after one authenticated query; want 1", n)
		}
		var s ControlStats
		settled(func() bool { s = c.Stats(); return s.Answered == 1 })
		if s.Unauthenticated != 2 || s.BadTag != 1 || s.Answered != 1 {
			t.Errorf("stats %+v; want 2 unauthenticated, 1 bad tag, 1 answered", s)
		}
	})

	t.Run("prefer", func(t *testing.T) {
		c, admitted := controlFor(t, "127.0.0.2:0", Auth{Key: fleetKey})
		cl := udpFrom(t, "127.0.0.4", 0)
		a := exchange(t, cl, c.Addr(), enc(1, nil))
		if m, err := wire.Decode(a, nil); err != nil || m.Version != 1 {
			t.Errorf("answer to version 1 = %+v, %v; want version 1 (an older rdmad reads nothing else)", m, err)
		}
		a = exchange(t, cl, c.Addr(), enc(2, nil))
		if m, err := wire.Decode(a, ck); err != nil || m.Version != 2 || !m.Authenticated {
			t.Errorf("answer to untagged version 2 = %+v, %v; want tagged version 2", m, err)
		}
		if a := exchange(t, cl, c.Addr(), enc(2, wrong)); a != nil {
			t.Errorf("answered a query tagged with another key")
		}
		if n := admitted()[netip.MustParseAddr("127.0.0.4")]; n != 2 {
			t.Errorf("%d admissions; want 2 (the unauthenticated queries, not the wrong key's)", n)
		}
	})

	t.Run("answers", func(t *testing.T) {
		// With auth required, unauthenticated answers never reach the
		// manager, whatever their nonce.
		var mu sync.Mutex
		var got []wire.Message
		c, err := ListenControl("127.0.0.2:0", ControlOptions{Auth: Auth{Key: fleetKey, Require: true},
			Ports:    func() []ud.LocalPort { return nil },
			OnAnswer: func(_ netip.AddrPort, m wire.Message) { mu.Lock(); got = append(got, m.Clone()); mu.Unlock() }})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Serve(ctx) }()
		defer func() { cancel(); <-done; c.Close() }()
		cl := udpFrom(t, "127.0.0.3", 0)
		ans := wire.Message{Type: wire.TypeAnswer, Nonce: 5, Count: 1, QPN: 0x66, QKey: 1}
		for _, k := range []struct {
			v   uint8
			key []byte
		}{{1, nil}, {2, nil}, {2, wrong}, {2, ck}} {
			m := ans
			m.Version = k.v
			send(t, cl, c.Addr(), m, k.key)
		}
		deadline := time.Now().Add(2 * time.Second)
		for time.Now().Before(deadline) && c.Stats().Unauthenticated+c.Stats().BadTag < 3 {
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		if len(got) != 1 || !got[0].Authenticated {
			t.Errorf("answers passed on: %+v; want only the authenticated one", got)
		}
	})
}

// TestAdmissionFlood floods the control endpoint with 16,384 queries from
// one allowed address, each naming another QP: the flood gets no more
// admissions than its source's rate allows, and a legitimate peer querying
// afterwards is admitted and answered.
func TestAdmissionFlood(t *testing.T) {
	c, admitted := controlFor(t, "127.0.0.2:0", Auth{})
	flood := udpFrom(t, "127.0.0.5", 0)
	start := time.Now()
	for i := range 16384 {
		m := wire.Message{Version: 1, Type: wire.TypeQuery, Nonce: uint64(i), Count: 1, QPN: uint32(0x1000 + i), QKey: 1}
		send(t, flood, c.Addr(), m, nil)
	}
	// Let the endpoint drain the socket before the legitimate query.
	var last uint64
	for {
		time.Sleep(100 * time.Millisecond)
		s := c.Stats()
		n := s.Answered + s.RateLimited
		if n == last {
			break
		}
		last = n
	}
	elapsed := time.Since(start)
	legit := udpFrom(t, "127.0.0.6", 0)
	a := exchange(t, legit, c.Addr(), func() []byte {
		b, _ := (&wire.Message{Version: 2, Type: wire.TypeQuery, Nonce: 1, Count: 1, QPN: 0x77, QKey: 1}).Append(nil, nil)
		return b
	}())
	if m, err := wire.Decode(a, nil); a == nil || err != nil || m.Nonce != 1 {
		t.Fatalf("legitimate peer after the flood: answer %+v, %v; want one", m, err)
	}
	got := admitted()
	if got[netip.MustParseAddr("127.0.0.6")] != 1 {
		t.Errorf("legitimate peer admitted %d times; want 1", got[netip.MustParseAddr("127.0.0.6")])
	}
	limit := admitBurst + int(elapsed.Seconds()*admitPerSec) + 1
	if n := got[netip.MustParseAddr("127.0.0.5")]; n > limit || n < admitBurst/2 {
		t.Errorf("flooding source admitted %d times in %v; want at most %d (burst %d, %d/s)", n, elapsed, limit, admitBurst, admitPerSec)
	}
	if s := c.Stats(); s.RateLimited == 0 {
		t.Errorf("stats %+v: nothing rate limited", s)
	}
}

// TestRateLimiterTable checks the bounded table: sources known before a
// flood of new ones keep their buckets, new ones share the overflow bucket,
// and idle sources make room.
func TestRateLimiterTable(t *testing.T) {
	r := newRateLimiter(2, 1, 4)
	now := time.Now()
	addr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}) }
	for i := range 4 {
		if !r.allow(addr(i), now) {
			t.Fatalf("new source %d refused", i)
		}
	}
	// 1000 new sources: the overflow bucket (2 tokens) takes them, the
	// table stays at 4, and the known sources keep their last token.
	allowed := 0
	for i := 100; i < 1100; i++ {
		if r.allow(addr(i), now) {
			allowed++
		}
	}
	if allowed != 2 || len(r.srcs) != 4 {
		t.Errorf("%d of 1000 new sources allowed, table %d; want 2 (the overflow bucket), 4", allowed, len(r.srcs))
	}
	for i := range 4 {
		if !r.allow(addr(i), now) {
			t.Errorf("known source %d lost its bucket to the flood", i)
		}
		if r.allow(addr(i), now) {
			t.Errorf("known source %d allowed past its burst", i)
		}
	}
	// After the buckets refilled, a sweep makes room for new sources.
	later := now.Add(10 * time.Second)
	if !r.allow(addr(5000), later) || len(r.srcs) > 4 {
		t.Errorf("after the known sources went idle: new source refused or table %d", len(r.srcs))
	}
	if _, ok := r.srcs[addr(5000).As16()]; !ok {
		t.Error("the new source has no bucket of its own after the sweep")
	}
	// An IPv4 source and its IPv4-mapped form are one source: switching
	// form does not buy a second burst.
	v4 := netip.AddrFrom4([4]byte{10, 9, 9, 9})
	mapped := netip.AddrFrom16(v4.As16())
	r = newRateLimiter(2, 1, 4)
	if !r.allow(v4, later) || !r.allow(mapped, later) {
		t.Fatal("a new source refused within its burst")
	}
	if r.allow(mapped, later) || r.allow(v4, later) {
		t.Error("an IPv4 source got more than its burst of 2 by switching to its IPv4-mapped form")
	}
}

// TestRateLimiterCompact checks that the table keeps, past
// rateCompactEvery, only the sources whose buckets are not full again: a
// thousand sources that each queried once leave the some that queried
// within the last burst/perSec, and a source that spent its burst keeps
// what it has left (compacting loses nothing).
func TestRateLimiterCompact(t *testing.T) {
	r := newRateLimiter(admitBurst, admitPerSec, maxRateSrcs)
	t0 := time.Now()
	r.allow(netip.AddrFrom4([4]byte{10, 1, 0, 0}), t0) // the first compaction: nothing to do
	addr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}) }
	// A source that spends its burst just before the compaction.
	greedy := netip.AddrFrom4([4]byte{10, 2, 0, 0})
	at := t0.Add(rateCompactEvery - time.Second)
	for range admitBurst {
		if !r.allow(greedy, at) {
			t.Fatal("the greedy source refused within its burst")
		}
	}
	// 1,000 sources querying once, spread over the 10 s before it.
	for i := range 1000 {
		r.allow(addr(i), t0.Add(time.Duration(i)*rateCompactEvery/1000))
	}
	if len(r.srcs) < 1000 {
		t.Fatalf("table %d before the compaction; want every source", len(r.srcs))
	}
	now := t0.Add(rateCompactEvery)
	r.allow(addr(0), now) // compacts
	full := r.fullAfter()
	// The sources of the last `full` before now, the greedy one, and
	// addr(0) again.
	want := int(1000*full/rateCompactEvery) + 2
	if n := len(r.srcs); n < want-2 || n > want+2 {
		t.Errorf("table %d after the compaction; want about %d (the buckets not full again)", n, want)
	}
	// A second after it spent its burst, it has a second's tokens.
	allowed := 0
	for range admitBurst {
		if r.allow(greedy, now) {
			allowed++
		}
	}
	if allowed != admitPerSec {
		t.Errorf("the greedy source was allowed %d after the compaction; want %d (a second's tokens), not a new burst", allowed, admitPerSec)
	}
}

// v1Node plays an rdmad that speaks only wire version 1 on addr:port: it
// drops version 2 as malformed (as such an rdmad does) and answers version
// 1 with remote's QP, admitting the querier on the fabric.
func v1Node(t *testing.T, f *fabric, remote *fakeTransport, addr string, port int) *net.UDPConn {
	t.Helper()
	c := udpFrom(t, addr, port)
	go func() {
		buf := make([]byte, wire.MaxSize+1)
		for {
			n, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			q, err := wire.Decode(buf[:n], nil)
			if err != nil || q.Version != 1 || q.Type != wire.TypeQuery {
				continue
			}
			f.mu.Lock()
			remote.admitted[q.QPN] = true
			f.mu.Unlock()
			a := wire.Message{Version: 1, Type: wire.TypeAnswer, Nonce: q.Nonce, Count: 1, QPN: remote.qpn, QKey: 5, GID: remote.gid, NodeID: 3}
			b := a.Encode()
			c.WriteToUDPAddrPort(b[:], from)
		}
	}()
	return c
}

// TestMixedFleet runs managers with different keys, modes and wire
// versions against each other: a rollout keeps working, and what status
// says per peer is its wire version and whether it is authenticated.
func TestMixedFleet(t *testing.T) {
	peerOf := func(n *node, name string) apitype.Peer { return n.peer(name) }
	stays := func(t *testing.T, n *node, name string, d time.Duration) {
		t.Helper()
		end := time.Now().Add(d)
		for time.Now().Before(end) {
			if p := peerOf(n, name); p.State == apitype.PeerUp {
				t.Fatalf("peer %s came up: %+v", name, p)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	t.Run("both require the same key", func(t *testing.T) {
		port := freePort(t)
		f := &fabric{byQPN: map[uint32]*fakeTransport{}}
		a := startNodeAuth(t, f, "127.0.0.2", "127.0.0.3", port, 1, Auth{Key: fleetKey, Require: true})
		defer a.stop(t)
		b := startNodeAuth(t, f, "127.0.0.3", "127.0.0.2", port, 2, Auth{Key: fleetKey, Require: true})
		defer b.stop(t)
		waitState(t, a, "127.0.0.3", apitype.PeerUp, 5*time.Second)
		p := peerOf(a, "127.0.0.3")
		if p.WireVersion != 2 || !p.Authenticated || len(p.Paths) != 1 || !p.Paths[0].Authenticated {
			t.Errorf("a's view of b = %+v; want wire version 2, authenticated control and path", p)
		}
		a.mu.Lock()
		auth := a.last.Auth
		a.mu.Unlock()
		if auth != "require" {
			t.Errorf("status auth %q, want require", auth)
		}
	})

	t.Run("prefer meets a node without the key", func(t *testing.T) {
		port := freePort(t)
		f := &fabric{byQPN: map[uint32]*fakeTransport{}}
		a := startNodeAuth(t, f, "127.0.0.2", "127.0.0.3", port, 1, Auth{Key: fleetKey})
		defer a.stop(t)
		b := startNode(t, f, "127.0.0.3", "127.0.0.2", port, 2)
		defer b.stop(t)
		waitState(t, a, "127.0.0.3", apitype.PeerUp, 5*time.Second)
		waitState(t, b, "127.0.0.2", apitype.PeerUp, 5*time.Second)
		if p := peerOf(a, "127.0.0.3"); p.WireVersion != 2 || p.Authenticated || p.Paths[0].Authenticated {
			t.Errorf("a's view of b = %+v; want version 2, flagged as not authenticated", p)
		}
	})

	t.Run("require refuses a node without the key", func(t *testing.T) {
		port := freePort(t)
		f := &fabric{byQPN: map[uint32]*fakeTransport{}}
		a := startNodeAuth(t, f, "127.0.0.2", "127.0.0.3", port, 1, Auth{Key: fleetKey, Require: true})
		defer a.stop(t)
		b := startNode(t, f, "127.0.0.3", "127.0.0.2", port, 2)
		defer b.stop(t)
		stays(t, a, "127.0.0.3", time.Second)
		stays(t, b, "127.0.0.2", 10*time.Millisecond)
		f.mu.Lock()
		admittedB := a.pr.admitted[b.pr.qpn]
		f.mu.Unlock()
		if admittedB {
			t.Error("a admitted the QP of a node that did not authenticate")
		}
		a.mu.Lock()
		c := a.last.Counters
		a.mu.Unlock()
		if c.ControlUnauthenticated == 0 {
			t.Errorf("counters %+v: no unauthenticated message counted", c)
		}
	})

	t.Run("different keys", func(t *testing.T) {
		port := freePort(t)
		f := &fabric{byQPN: map[uint32]*fakeTransport{}}
		a := startNodeAuth(t, f, "127.0.0.2", "127.0.0.3", port, 1, Auth{Key: fleetKey, Require: true})
		defer a.stop(t)
		b := startNodeAuth(t, f, "127.0.0.3", "127.0.0.2", port, 2, Auth{Key: otherKey, Require: true})
		defer b.stop(t)
		stays(t, a, "127.0.0.3", time.Second)
		a.mu.Lock()
		c := a.last.Counters
		a.mu.Unlock()
		if c.ControlBadTag == 0 {
			t.Errorf("counters %+v: no bad tag counted", c)
		}
	})

	t.Run("falls back to version 1", func(t *testing.T) {
		port := freePort(t)
		f := &fabric{byQPN: map[uint32]*fakeTransport{}}
		a := startNodeAuth(t, f, "127.0.0.2", "127.0.0.3", port, 1, Auth{Key: fleetKey})
		defer a.stop(t)
		old := f.newTransport(3)
		v1Node(t, f, old, "127.0.0.3", port)
		waitState(t, a, "127.0.0.3", apitype.PeerUp, 5*time.Second)
		p := peerOf(a, "127.0.0.3")
		if p.WireVersion != 1 || p.Authenticated || p.Paths[0].RemoteQPN != old.qpn {
			t.Errorf("a's view of the version-1 node = %+v; want version 1, not authenticated, its QP", p)
		}
	})

	t.Run("a version-1 answer is not kept for minutes", func(t *testing.T) {
		// A peer whose rdmad came up between a version-2 query and the
		// version-1 query after it answers version 1 first (here: a
		// version-1 responder that is then replaced by a current node,
		// as after an upgrade). The node must ask in version 2 again
		// within a few intervals, not after v2Retry.
		port := freePort(t)
		f := &fabric{byQPN: map[uint32]*fakeTransport{}}
		a := startNode(t, f, "127.0.0.2", "127.0.0.3", port, 1)
		defer a.stop(t)
		old := f.newTransport(3)
		c := v1Node(t, f, old, "127.0.0.3", port)
		waitState(t, a, "127.0.0.3", apitype.PeerUp, 5*time.Second)
		if p := peerOf(a, "127.0.0.3"); p.WireVersion != 1 {
			t.Fatalf("a's view of the version-1 responder = %+v; want version 1", p)
		}
		c.Close()
		b := startNode(t, f, "127.0.0.3", "127.0.0.2", port, 2)
		defer b.stop(t)
		deadline := time.Now().Add(5 * time.Second)
		for peerOf(a, "127.0.0.3").WireVersion != 2 {
			if time.Now().After(deadline) {
				t.Fatalf("a still sees the upgraded peer as %+v after 5 s (interval 100ms); want version 2", peerOf(a, "127.0.0.3"))
			}
			time.Sleep(20 * time.Millisecond)
		}
	})

	t.Run("require does not fall back", func(t *testing.T) {
		port := freePort(t)
		f := &fabric{byQPN: map[uint32]*fakeTransport{}}
		a := startNodeAuth(t, f, "127.0.0.2", "127.0.0.3", port, 1, Auth{Key: fleetKey, Require: true})
		defer a.stop(t)
		old := f.newTransport(3)
		v1Node(t, f, old, "127.0.0.3", port)
		stays(t, a, "127.0.0.3", time.Second)
		f.mu.Lock()
		asked := old.admitted[a.pr.qpn]
		f.mu.Unlock()
		if asked {
			t.Error("a node that requires a key sent a version-1 query")
		}
	})
}

// TestControlAdmitAuthenticated: the engine learns whether a query carried
// a valid tag, which is what lets only a member change a live admission's
// qkey (#41 item 3, verbs/peer's admit.go): with a key that is not
// required, an untagged query admits as unauthenticated, a tagged one as
// authenticated, each of its flows as the header's.
func TestControlAdmitAuthenticated(t *testing.T) {
	var mu sync.Mutex
	var got []bool
	local := ud.LocalPort{Key: "rxe0/1", Endpoint: ud.Endpoint{QPN: 0x11, QKey: 0x1234, GID: [16]byte{15: 1}}}
	c, err := ListenControl("127.0.0.2:0", ControlOptions{NodeID: 7, AdmitFor: time.Minute, Auth: Auth{Key: fleetKey},
		Ports: func() []ud.LocalPort { return []ud.LocalPort{local} },
		Admit: func(_ string, _ ud.Endpoint, _ netip.Addr, authenticated bool, _ time.Time) error {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, authenticated)
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	c.SetAllow(nil, []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Serve(ctx) }()
	defer func() {
		cancel()
		<-done
		c.Close()
	}()
	cl := udpFrom(t, "127.0.0.4", 0)
	q := wire.Message{Version: 2, Type: wire.TypeQuery, Nonce: 5, Count: 1, QPN: 0x22, QKey: 0x55, GID: [16]byte{15: 2}}
	for _, tt := range []struct {
		key  []byte
		want bool
	}{{nil, false}, {wire.ControlKey(fleetKey), true}} {
		mu.Lock()
		got = nil
		mu.Unlock()
		b, err := q.Append(nil, tt.key)
		if err != nil {
			t.Fatal(err)
		}
		if a := exchange(t, cl, c.Addr(), b); a == nil {
			t.Fatalf("tagged %v: no answer", tt.key != nil)
		}
		mu.Lock()
		if len(got) != 1 || got[0] != tt.want {
			t.Errorf("tagged %v: Admit saw authenticated %v, want [%v]", tt.key != nil, got, tt.want)
		}
		mu.Unlock()
	}
}
