package bw

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/internal/syncbuf"
	"github.com/rdmad/rdmad/probe/wire"
)

func request(op wire.BWOp, size uint32, d time.Duration) wire.Message {
	return wire.Message{Version: 2, Type: wire.TypeBWRequest, Nonce: 9, QPN: 0x33, GID: from.Addr().As16(),
		Ext: []wire.Ext{wire.BW{Op: op, MTU: 3, PSN: 5, Size: size, Duration: d}.Ext()}}
}

func status(t *testing.T, m wire.Message) wire.BWStatus {
	t.Helper()
	b, err := wire.BWOf(m)
	if err != nil {
		t.Fatal(err)
	}
	return b.Status
}

var from = netip.MustParseAddrPort("192.0.2.17:40000")

// TestHandleRefusals checks the responder's refusals, each decided before
// anything is allocated: disabled, busy (the node's one slot is held, here
// by a test it runs itself), parameters out of bounds, and a done message
// that names no test of its sender.
func TestHandleRefusals(t *testing.T) {
	n := New(Config{NodeID: 1})
	defer n.Close()
	ans, ok := n.Handle(from, request(wire.BWWrite, 65536, time.Second))
	if !ok || ans.Type != wire.TypeBWAnswer || ans.Nonce != 9 || status(t, ans) != wire.BWDisabled || ans.QPN != 0 {
		t.Errorf("disabled node answered %+v, %v; want a refusal (disabled) without a QP", ans, ok)
	}
	n.SetEnabled(true)
	if err := n.acquire("a bandwidth test to 192.0.2.18"); err != nil {
		t.Fatal(err)
	}
	ans, _ = n.Handle(from, request(wire.BWRead, 65536, time.Second))
	if status(t, ans) != wire.BWBusy {
		t.Errorf("busy node answered status %d; want busy", status(t, ans))
	}
	// The requester side shares the slot: a second local test fails.
	_, err := n.Run(context.Background(), Request{Peer: from, Op: wire.BWWrite, Size: 4096, Duration: time.Second})
	var be *BusyError
	if !errors.As(err, &be) || !strings.Contains(err.Error(), "192.0.2.18") {
		t.Errorf("Run while busy = %v; want a BusyError naming the running test", err)
	}
	n.release()
	for _, m := range []wire.Message{
		request(wire.BWWrite, wire.MaxBWSize+1, time.Second),
		request(wire.BWWrite, 4096, wire.MaxBWDuration+time.Millisecond),
		request(wire.BWWrite, 4096, 0),
	} {
		if ans, _ := n.Handle(from, m); status(t, ans) != wire.BWBadRequest {
			t.Errorf("status %d; want bad request", status(t, ans))
		}
	}
	if _, ok := n.Handle(from, wire.Message{Version: 2, Type: wire.TypeBWDone, Nonce: 9, Ext: []wire.Ext{wire.BW{Op: wire.BWWrite}.Ext()}}); ok {
		t.Errorf("a done message was answered")
	}
	s := n.Stats()
	if s.Served != 0 || s.Refused["disabled"] != 1 || s.Refused["busy"] != 1 || s.Refused["bad_request"] != 3 {
		t.Errorf("stats %+v", s)
	}
	n.Close()
	if ans, _ := n.Handle(from, request(wire.BWWrite, 4096, time.Second)); status(t, ans) != wire.BWDisabled {
		t.Errorf("a closed node answered status %d; want disabled", status(t, ans))
	}
}

func TestCheckParams(t *testing.T) {
	for _, tt := range []struct {
		size int
		d    time.Duration
		want string
	}{
		{0, time.Second, "size 0 bytes is out of range"},
		{2 << 20, time.Second, "use 1 to 1048576"},
		{65536, 31 * time.Second, "duration 31s is out of range"},
		{65536, 1500500 * time.Microsecond, "finer than a millisecond"},
		{65536, 5 * time.Second, ""},
	} {
		err := CheckParams(tt.size, tt.d)
		if (err == nil) != (tt.want == "") || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("CheckParams(%d, %s) = %v; want %q", tt.size, tt.d, err, tt.want)
		}
	}
}

// TestExchangeTakesOnlyThePeersAnswer plays the peer with real sockets: an
// answer from another port, for another nonce, or (with a key) untagged is
// ignored; the peer's own refusal ends the exchange with its reason.
func TestExchangeTakesOnlyThePeersAnswer(t *testing.T) {
	key := wire.ControlKey([]byte("fleet key of the test, 32 bytes!"))
	peerConn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer peerConn.Close()
	forger, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer forger.Close()
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	peer := peerConn.LocalAddr().(*net.UDPAddr).AddrPort()
	req := request(wire.BWWrite, 4096, time.Second)
	go func() {
		buf := make([]byte, wire.MaxSize)
		k, src, err := peerConn.ReadFromUDPAddrPort(buf)
		if err != nil {
			return
		}
		m, err := wire.Decode(buf[:k], key)
		if err != nil || !m.Authenticated {
			return
		}
		accept := wire.Message{Version: 2, Type: wire.TypeBWAnswer, Nonce: m.Nonce, QPN: 0x99,
			Ext: []wire.Ext{wire.BW{Op: wire.BWWrite, Addr: 0x1000, RKey: 0x77}.Ext()}}
		send := func(c *net.UDPConn, m wire.Message, key []byte) {
			b, _ := m.Append(nil, key)
			c.WriteToUDPAddrPort(b, src)
		}
		send(forger, accept, key) // another port
		other := accept
		other.Nonce++
		send(peerConn, other, key)  // another nonce
		send(peerConn, accept, nil) // untagged
		refuse := wire.Message{Version: 2, Type: wire.TypeBWAnswer, Nonce: m.Nonce, Ext: []wire.Ext{wire.BW{Op: wire.BWWrite, Status: wire.BWBusy}.Ext()}}
		send(peerConn, refuse, key)
	}()
	_, _, err = exchange(context.Background(), conn, Request{Peer: peer, ControlKey: key, Op: wire.BWWrite}, req)
	var re *RefusedError
	if !errors.As(err, &re) || re.Status != wire.BWBusy || !strings.Contains(err.Error(), "one at a time") {
		t.Errorf("exchange = %v; want the peer's refusal (busy), the forged acceptances ignored", err)
	}
}

// TestExchangeNoAnswer: a peer that never answers (no rdmad, an older one,
// or this node not allowed there) is an error that says what to check.
func TestExchangeNoAnswer(t *testing.T) {
	if testing.Short() {
		t.Skip("waits 6 s")
	}
	silent, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, _, err = exchange(context.Background(), conn, Request{Peer: silent.LocalAddr().(*net.UDPAddr).AddrPort()}, request(wire.BWWrite, 4096, time.Second))
	if err == nil || !strings.Contains(err.Error(), "[probe] allow") {
		t.Errorf("exchange = %v; want no answer, naming what to check", err)
	}
}

// authed returns an authenticated request (as the control endpoint hands
// one on with a fleet key) with nonce and, unless at is zero, that time.
func authed(nonce uint64, at time.Time) wire.Message {
	m := request(wire.BWRead, 1<<20, 30*time.Second)
	m.Nonce, m.Authenticated = nonce, true
	if !at.IsZero() {
		m.Ext = append(m.Ext, wire.BWTimeExt(at))
	}
	return m
}

// TestHandleReplay performs #24 item 3's attack: an authenticated request
// captured on the fabric and sent again (at once, and later) must not
// start another test. With a key (an authenticated request) a request
// needs a time within wire.MaxBWSkew and a nonce not seen in that time; the
// nonces remembered are bounded. Without a key nothing changes: a request
// without a time is taken as before. (No RDMA here: a request that passes
// gets "unavailable" from openPort, which is how the test tells it passed.)
func TestHandleReplay(t *testing.T) {
	n := New(Config{NodeID: 1})
	defer n.Close()
	n.SetEnabled(true)
	now := time.Unix(1795000000, 0)
	n.now = func() time.Time { return now }
	passed := func(st wire.BWStatus) bool { return st == wire.BWUnavailable || st == wire.BWOK }

	ans, _ := n.Handle(from, authed(100, now.Add(-2*time.Second)))
	if st := status(t, ans); !passed(st) {
		t.Fatalf("a fresh authenticated request: status %d; want it to pass to the set-up", st)
	}
	n.release()
	for name, m := range map[string]wire.Message{
		"replayed at once":       authed(100, now.Add(-2*time.Second)),
		"replayed, new from":     authed(100, now.Add(-2*time.Second)),
		"31 s old":               authed(101, now.Add(-wire.MaxBWSkew-time.Second)),
		"31 s in the future":     authed(102, now.Add(wire.MaxBWSkew+time.Second)),
		"authenticated, no time": authed(103, time.Time{}),
	} {
		src := from
		if name == "replayed, new from" {
			src = netip.MustParseAddrPort("192.0.2.17:40001")
		}
		if ans, _ := n.Handle(src, m); status(t, ans) != wire.BWStale {
			t.Errorf("%s: status %d; want stale", name, status(t, ans))
		}
	}
	// A replay once the time is out of the window: refused by the time.
	now = now.Add(wire.MaxBWSkew + time.Minute)
	if ans, _ := n.Handle(from, authed(100, now.Add(-wire.MaxBWSkew-time.Minute-2*time.Second))); status(t, ans) != wire.BWStale {
		t.Errorf("an old replay: status %d; want stale", status(t, ans))
	}
	// Without a key (unauthenticated): as before, no time needed.
	if ans, _ := n.Handle(from, request(wire.BWWrite, 4096, time.Second)); !passed(status(t, ans)) {
		t.Errorf("an unauthenticated request without a time: status %d; want it taken as before", status(t, ans))
	}
	n.release()

	// Bounded: maxSeen nonces within their time fill the table; the next
	// is refused (busy), and taken once the old ones' time is over.
	n.mu.Lock()
	for i := range maxSeen {
		if st := n.fresh(authed(uint64(1000+i), now)); st != wire.BWOK {
			t.Fatalf("nonce %d: %d", i, st)
		}
	}
	if st := n.fresh(authed(99999, now)); st != wire.BWBusy {
		t.Errorf("a full table: %d; want busy", st)
	}
	if len(n.seen) != maxSeen {
		t.Errorf("%d nonces remembered; at most %d", len(n.seen), maxSeen)
	}
	now = now.Add(wire.MaxBWSkew + time.Second)
	if st := n.fresh(authed(99999, now)); st != wire.BWOK || len(n.seen) != 1 {
		t.Errorf("after the window: %d, %d remembered; want ok, 1", st, len(n.seen))
	}
	n.mu.Unlock()
	if s := n.Stats(); s.Refused["stale"] != 6 {
		t.Errorf("refused %v; want 6 stale", s.Refused)
	}
}

// TestAddressBinding performs #24 item 2's attack: an allowed requester (or
// a spoofer of its address) names a third host's GID in its request, so
// that the RDMA READ responses of the test (up to 1 MiB each) go there;
// and a malicious peer answers an admin's test with a third host's GID.
// Each is refused: on RoCE only the GID of the control address itself
// (IPv4-mapped, or the IPv6 address), on InfiniBand only a port (GID and
// LID) the peer announced in an answer to this node's query.
func TestAddressBinding(t *testing.T) {
	third := netip.MustParseAddr("198.51.100.9").As16()
	v6 := netip.MustParseAddr("2001:db8::17")
	ibPort := PeerPort{GID: netip.MustParseAddr("fe80::2:c903:a:1234").As16(), LID: 7}
	n := New(Config{NodeID: 1, PeerPorts: func(a netip.Addr) []PeerPort {
		if a == from.Addr() {
			return []PeerPort{ibPort}
		}
		return nil
	}})
	defer n.Close()
	n.SetEnabled(true)
	roce, ib := false, true
	for _, tt := range []struct {
		name string
		addr netip.Addr
		gid  [16]byte
		lid  uint16
		link *bool // nil: before a port is chosen
		ok   bool
	}{
		{"RoCE: the source's IPv4-mapped GID", from.Addr(), from.Addr().As16(), 0, &roce, true},
		{"RoCE: the source's IPv6 GID", v6, v6.As16(), 0, &roce, true},
		{"RoCE: a third host's GID", from.Addr(), third, 0, &roce, false},
		{"RoCE: another IPv6 address", v6, netip.MustParseAddr("2001:db8::18").As16(), 0, &roce, false},
		{"RoCE: an announced IB port is not the source", from.Addr(), ibPort.GID, ibPort.LID, &roce, false},
		{"IB: the port the peer announced", from.Addr(), ibPort.GID, ibPort.LID, &ib, true},
		{"IB: the announced GID with another LID", from.Addr(), ibPort.GID, 8, &ib, false},
		{"IB: a GID of the source's address", from.Addr(), from.Addr().As16(), 0, &ib, false},
		{"IB: a peer that announced nothing", v6, ibPort.GID, ibPort.LID, &ib, false},
		{"before the port: the source's GID", from.Addr(), from.Addr().As16(), 0, nil, true},
		{"before the port: an announced port", from.Addr(), ibPort.GID, ibPort.LID, nil, true},
		{"before the port: a third host", from.Addr(), third, 0, nil, false},
	} {
		err := n.checkAddress(tt.addr, tt.gid, tt.lid, tt.link)
		if (err == nil) != tt.ok || (err != nil && !errors.Is(err, errBadAddress)) {
			t.Errorf("%s: %v; want ok %v", tt.name, err, tt.ok)
		}
	}

	// The responder refuses a third host's GID before it allocates
	// anything, saying why; its own GID passes on to the set-up (no RDMA
	// here: "unavailable").
	m := request(wire.BWRead, 1<<20, 30*time.Second)
	m.GID = third
	ans, _ := n.Handle(from, m)
	if st := status(t, ans); st != wire.BWBadAddress || ans.QPN != 0 {
		t.Errorf("a third host's GID: status %d QPN %#x; want bad address, no QP", st, ans.QPN)
	}
	if !strings.Contains(wire.BWBadAddress.Reason(), "GID") {
		t.Errorf("the refusal's reason %q does not say what to fix", wire.BWBadAddress.Reason())
	}
	m.GID = from.Addr().As16()
	if ans, _ := n.Handle(from, m); status(t, ans) == wire.BWBadAddress {
		t.Errorf("the requester's own GID was refused")
	}
	if s := n.Stats(); s.Refused["bad_address"] != 1 || s.Served != 0 {
		t.Errorf("stats %+v; want one bad_address refusal", s)
	}

	// A flood of them (a spoofer of an allowed address, at its admission
	// rate): every one refused and counted, one log line per source.
	var logs syncbuf.Buffer
	f := New(Config{NodeID: 1, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	defer f.Close()
	f.SetEnabled(true)
	m.GID = third
	for i := range 200 {
		m.Nonce = uint64(1000 + i)
		if ans, _ := f.Handle(from, m); status(t, ans) != wire.BWBadAddress {
			t.Fatalf("request %d: status %d", i, status(t, ans))
		}
	}
	if got := strings.Count(logs.String(), "towards another host"); got != 1 || f.Stats().Refused["bad_address"] != 200 {
		t.Errorf("%d log lines, %d counted for 200 refusals; want 1 line, 200 counted", got, f.Stats().Refused["bad_address"])
	}
}

// TestExchangeKeyRotation: during a key rotation the requester takes an
// answer tagged with either of its keys (a peer a step ahead tags with the
// new one), and still not one tagged with a key it does not hold.
func TestExchangeKeyRotation(t *testing.T) {
	oldCK := wire.ControlKey([]byte("the old fleet key, 32 bytes long"))
	newCK := wire.ControlKey([]byte("the new fleet key, 32 bytes long"))
	third := wire.ControlKey([]byte("a third fleet's key, 32 bytes!!!"))
	for _, tt := range []struct {
		name string
		tag  []byte
		ok   bool
	}{{"the new key", newCK, true}, {"the old key", oldCK, true}, {"a third key", third, false}} {
		t.Run(tt.name, func(t *testing.T) {
			peerConn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
			if err != nil {
				t.Fatal(err)
			}
			defer peerConn.Close()
			conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			done := make(chan struct{})
			go func() {
				defer close(done)
				buf := make([]byte, wire.MaxSize)
				peerConn.SetReadDeadline(time.Now().Add(3 * time.Second))
				k, src, err := peerConn.ReadFromUDPAddrPort(buf)
				if err != nil {
					return
				}
				m, err := wire.DecodeKeys(buf[:k], newCK, oldCK)
				if err != nil || !m.Authenticated {
					return
				}
				refuse := wire.Message{Version: 2, Type: wire.TypeBWAnswer, Nonce: m.Nonce, Ext: []wire.Ext{wire.BW{Op: wire.BWWrite, Status: wire.BWBusy}.Ext()}}
				b, _ := refuse.Append(nil, tt.tag)
				peerConn.WriteToUDPAddrPort(b, src)
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 2500*time.Millisecond)
			defer cancel()
			_, _, err = exchange(ctx, conn, Request{Peer: peerConn.LocalAddr().(*net.UDPAddr).AddrPort(), ControlKey: oldCK, OtherKeys: [][]byte{newCK}, Op: wire.BWWrite},
				request(wire.BWWrite, 4096, time.Second))
			<-done
			var re *RefusedError
			if got := errors.As(err, &re); got != tt.ok {
				t.Errorf("exchange = %v; want the answer taken: %v", err, tt.ok)
			}
		})
	}
}

// TestFreshClockStep: the tagged clock step drill (e2e TestDrillClockStepTagged)
// in small. A requester whose clock is an hour ahead sends requests an hour
// in the future: each is refused as stale and none is remembered, however
// many come (the nonce table holds only requests within the window). The
// responder's own clock stepped ahead and back: a request in step with its
// clock passes at once each time; what it remembered on the way is bounded
// by its time, and blocks no other nonce.
func TestFreshClockStep(t *testing.T) {
	n := New(Config{NodeID: 1})
	defer n.Close()
	now := time.Unix(1795000000, 0)
	n.now = func() time.Time { return now }
	n.mu.Lock()
	defer n.mu.Unlock()
	if st := n.fresh(authed(1, now)); st != wire.BWOK {
		t.Fatalf("a fresh request: %d", st)
	}
	for i := range 10000 {
		if st := n.fresh(authed(uint64(100+i), now.Add(time.Hour))); st != wire.BWStale {
			t.Fatalf("a request an hour ahead: %d; want stale", st)
		}
	}
	if len(n.seen) != 1 {
		t.Errorf("%d nonces remembered after 10,000 requests an hour ahead; want only the fresh one", len(n.seen))
	}
	// The responder's clock an hour ahead, then back.
	now = now.Add(time.Hour)
	if st := n.fresh(authed(2, now)); st != wire.BWOK {
		t.Errorf("a request in step with the responder's clock an hour ahead: %d; want ok", st)
	}
	now = now.Add(-time.Hour + 5*time.Second)
	if st := n.fresh(authed(3, now)); st != wire.BWOK {
		t.Errorf("the first request after the responder's clock came back: %d; want ok", st)
	}
	if st := n.fresh(authed(1, now)); st != wire.BWStale {
		t.Errorf("the first nonce replayed within its time: %d; want stale", st)
	}
	if len(n.seen) != 3 {
		t.Errorf("%d nonces remembered; want the three taken", len(n.seen))
	}
}
