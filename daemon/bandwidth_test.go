package daemon

import (
	"context"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmad/rdmad/probe"
	"github.com/rdmad/rdmad/probe/ud"
	"github.com/rdmad/rdmad/probe/wire"
	"github.com/rdmad/rdmad/verbs/bw"
)

// The bandwidth tests meet the control endpoint here, where rdmad wires
// them together (peers.go: probe.Options.Bandwidth is the bw.Node's
// Handle), so that neither probe nor verbs/bw imports the other.

var (
	bwFleetKey = []byte("fleet key of the test, 32 bytes!")
	bwOtherKey = []byte("another fleet's key, 32 bytes!!!")
)

// The control endpoint's admission rate per source (probe/ratelimit.go):
// a flood gets the burst and what the rate adds while it lasts.
const (
	bwAdmitBurst  = 64
	bwAdmitPerSec = 16
)

func bwUDPFrom(t *testing.T, ip string, port int) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(ip), Port: port})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// bwExchange sends b from cl to the endpoint and returns the answer's
// bytes, or nil when none comes.
func bwExchange(t *testing.T, cl *net.UDPConn, to netip.AddrPort, b []byte) []byte {
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

// bwControl starts a control endpoint on 127.0.0.2 that allows only
// 127.0.0.4 and serves bandwidth tests with a real bw.Node; calls counts
// the messages that reached the node.
func bwControl(t *testing.T, auth probe.Auth, enabled bool) (*probe.Control, *bw.Node, *atomic.Int64) {
	t.Helper()
	node := bw.New(bw.Config{NodeID: 7})
	node.SetEnabled(enabled)
	calls := new(atomic.Int64)
	c, err := probe.ListenControl("127.0.0.2:0", probe.ControlOptions{NodeID: 7, AdmitFor: time.Minute, Auth: auth,
		Ports: func() []ud.LocalPort { return nil },
		Admit: func(string, ud.Endpoint, netip.Addr, bool, time.Time) error { return nil },
		Bandwidth: func(from netip.AddrPort, m wire.Message) (wire.Message, bool) {
			calls.Add(1)
			return node.Handle(from, m)
		}})
	if err != nil {
		t.Fatal(err)
	}
	c.SetAllow([]netip.Addr{netip.MustParseAddr("127.0.0.4")}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve = %v", err)
		}
		c.Close()
		node.Close()
	})
	return c, node, calls
}

func bwRequest(op wire.BWOp, size uint32, d time.Duration) wire.Message {
	return wire.Message{Version: 2, Type: wire.TypeBWRequest, Nonce: 42, QPN: 0x33, GID: [16]byte{10: 0xff, 11: 0xff, 12: 127, 15: 4},
		Ext: []wire.Ext{wire.BW{Op: op, MTU: 3, PSN: 5, Size: size, Duration: d}.Ext(), wire.BWTimeExt(time.Now())}}
}

func bwEnc(t *testing.T, m wire.Message, key []byte) []byte {
	t.Helper()
	b, err := m.Append(nil, key)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// bwStatus decodes a bandwidth answer and returns its status.
func bwStatus(t *testing.T, b []byte, key []byte, nonce uint64) wire.BWStatus {
	t.Helper()
	m, err := wire.Decode(b, key)
	if err != nil || m.Type != wire.TypeBWAnswer || m.Nonce != nonce {
		t.Fatalf("answer %+v, %v; want a bandwidth answer to nonce %d", m, err, nonce)
	}
	a, err := wire.BWOf(m)
	if err != nil {
		t.Fatal(err)
	}
	return a.Status
}

// TestBandwidthRefusals performs what a host on the fabric could try at the
// control endpoint with bandwidth requests: from an address that is not
// allowed, without the fleet key or with another one, with parameters out
// of bounds, against a node that does not serve tests or is busy, and as a
// flood. None of them reaches verbs: every refusal is decided before the
// node allocates anything (on this host, without RDMA, an allocation would
// answer "unavailable" instead).
func TestBandwidthRefusals(t *testing.T) {
	ck, wrong := wire.ControlKey(bwFleetKey), wire.ControlKey(bwOtherKey)
	write := bwRequest(wire.BWWrite, 65536, 3*time.Second)

	t.Run("not allowed", func(t *testing.T) {
		c, _, calls := bwControl(t, probe.Auth{}, true)
		stranger := bwUDPFrom(t, "127.0.0.5", 0)
		if a := bwExchange(t, stranger, c.Addr(), bwEnc(t, write, nil)); a != nil {
			t.Errorf("a source outside the allow list was answered: % x", a)
		}
		if calls.Load() != 0 || c.Stats().Refused != 1 {
			t.Errorf("%d calls reached the node, stats %+v; want none and 1 refused", calls.Load(), c.Stats())
		}
	})

	t.Run("disabled", func(t *testing.T) {
		c, node, _ := bwControl(t, probe.Auth{}, false)
		cl := bwUDPFrom(t, "127.0.0.4", 0)
		a := bwExchange(t, cl, c.Addr(), bwEnc(t, write, nil))
		if a == nil {
			t.Fatal("no answer: a disabled node must say so, for rdmactl to tell the operator")
		}
		if st := bwStatus(t, a, nil, 42); st != wire.BWDisabled {
			t.Errorf("status %d; want disabled", st)
		}
		if len(a) > len(bwEnc(t, write, nil)) {
			t.Errorf("answer of %d bytes to a request of %d: the endpoint must not amplify", len(a), len(bwEnc(t, write, nil)))
		}
		if s := node.Stats(); s.Served != 0 || s.Refused["disabled"] != 1 {
			t.Errorf("node stats %+v; want 1 refused as disabled", s)
		}
	})

	t.Run("key required even with prefer", func(t *testing.T) {
		c, _, calls := bwControl(t, probe.Auth{Key: bwFleetKey}, true)
		cl := bwUDPFrom(t, "127.0.0.4", 0)
		if a := bwExchange(t, cl, c.Addr(), bwEnc(t, write, nil)); a != nil {
			t.Errorf("an untagged request was answered with auth = prefer")
		}
		if a := bwExchange(t, cl, c.Addr(), bwEnc(t, write, wrong)); a != nil {
			t.Errorf("a request tagged with another fleet's key was answered")
		}
		if calls.Load() != 0 {
			t.Errorf("%d unauthenticated requests reached the node", calls.Load())
		}
		s := c.Stats()
		if s.Unauthenticated != 1 || s.BadTag != 1 {
			t.Errorf("stats %+v; want 1 unauthenticated, 1 bad tag", s)
		}
		// With the key, too long a test is refused as a bad request,
		// in a tagged answer.
		long := bwRequest(wire.BWWrite, 65536, wire.MaxBWDuration+time.Second)
		a := bwExchange(t, cl, c.Addr(), bwEnc(t, long, ck))
		if a == nil {
			t.Fatal("no answer to an authenticated request")
		}
		if st := bwStatus(t, a, ck, 42); st != wire.BWBadRequest {
			t.Errorf("status %d for a %s test; want bad request", st, long.Ext[0].Value)
		}
		if m, _ := wire.Decode(a, ck); !m.Authenticated {
			t.Errorf("the answer is not tagged")
		}
	})

	t.Run("replayed with the key", func(t *testing.T) {
		// A captured authenticated request sent again: refused as
		// stale, as is one without a time (an older requester) or
		// naming a third host's GID.
		c, node, _ := bwControl(t, probe.Auth{Key: bwFleetKey, Require: true}, true)
		cl := bwUDPFrom(t, "127.0.0.4", 0)
		req := bwEnc(t, bwRequest(wire.BWWrite, 65536, wire.MaxBWDuration+time.Second), ck)
		if a := bwExchange(t, cl, c.Addr(), req); a == nil || bwStatus(t, a, ck, 42) != wire.BWBadRequest {
			t.Fatalf("the first request: %x; want a refusal of its duration", a)
		}
		if a := bwExchange(t, cl, c.Addr(), req); a == nil || bwStatus(t, a, ck, 42) != wire.BWStale {
			t.Errorf("the replay: %x; want stale", a)
		}
		old := bwRequest(wire.BWWrite, 65536, time.Second)
		old.Nonce, old.Ext = 43, old.Ext[:1]
		if a := bwExchange(t, cl, c.Addr(), bwEnc(t, old, ck)); a == nil || bwStatus(t, a, ck, 43) != wire.BWStale {
			t.Errorf("an authenticated request without a time: %x; want stale", a)
		}
		third := bwRequest(wire.BWRead, 65536, time.Second)
		third.Nonce, third.GID = 44, netip.MustParseAddr("198.51.100.9").As16()
		if a := bwExchange(t, cl, c.Addr(), bwEnc(t, third, ck)); a == nil || bwStatus(t, a, ck, 44) != wire.BWBadAddress {
			t.Errorf("a third host's GID: %x; want bad address", a)
		}
		if s := node.Stats(); s.Served != 0 || s.Refused["stale"] != 2 || s.Refused["bad_address"] != 1 {
			t.Errorf("node stats %+v", s)
		}
	})

	t.Run("bad parameters", func(t *testing.T) {
		c, node, _ := bwControl(t, probe.Auth{}, true)
		cl := bwUDPFrom(t, "127.0.0.4", 0)
		for _, m := range []wire.Message{
			bwRequest(wire.BWWrite, wire.MaxBWSize+1, time.Second), // oversize
			bwRequest(wire.BWRead, 0, time.Second),                 // empty
			bwRequest(wire.BWSend, 4096, time.Hour),                // too long
			bwRequest(wire.BWWrite, 4096, time.Millisecond),        // too short
		} {
			a := bwExchange(t, cl, c.Addr(), bwEnc(t, m, nil))
			if a == nil {
				t.Fatal("no answer")
			}
			if st := bwStatus(t, a, nil, 42); st != wire.BWBadRequest {
				t.Errorf("status %d; want bad request", st)
			}
		}
		if s := node.Stats(); s.Refused["bad_request"] != 4 || s.Served != 0 {
			t.Errorf("node stats %+v; want 4 bad requests", s)
		}
	})

	t.Run("answers and malformed", func(t *testing.T) {
		c, _, calls := bwControl(t, probe.Auth{}, true)
		cl := bwUDPFrom(t, "127.0.0.4", 0)
		ans := wire.Message{Version: 2, Type: wire.TypeBWAnswer, Nonce: 1, QPN: 9,
			Ext: []wire.Ext{wire.BW{Op: wire.BWWrite, Addr: 0x1000, RKey: 7}.Ext()}}
		if a := bwExchange(t, cl, c.Addr(), bwEnc(t, ans, nil)); a != nil {
			t.Errorf("an unsolicited answer was answered")
		}
		b := bwEnc(t, write, nil)
		b[wire.Size+4] = 9 // unknown op
		if a := bwExchange(t, cl, c.Addr(), b); a != nil {
			t.Errorf("a malformed request was answered")
		}
		huge := append(bwEnc(t, write, nil), make([]byte, wire.MaxSize)...)
		if a := bwExchange(t, cl, c.Addr(), huge); a != nil {
			t.Errorf("an oversized datagram was answered")
		}
		if calls.Load() != 0 {
			t.Errorf("%d of them reached the node", calls.Load())
		}
		if s := c.Stats(); s.Refused != 1 || s.Malformed != 2 {
			t.Errorf("stats %+v; want the answer refused and 2 malformed", s)
		}
	})

	t.Run("flood", func(t *testing.T) {
		c, _, calls := bwControl(t, probe.Auth{}, false)
		cl := bwUDPFrom(t, "127.0.0.4", 0)
		b := bwEnc(t, write, nil)
		for i := 0; i < 500; i++ {
			if _, err := cl.WriteToUDPAddrPort(b, c.Addr()); err != nil {
				t.Fatal(err)
			}
		}
		deadline := time.Now().Add(3 * time.Second)
		for time.Now().Before(deadline) && c.Stats().RateLimited+uint64(calls.Load()) < 500 {
			time.Sleep(10 * time.Millisecond)
		}
		// A flood gets its source's burst and no more (the socket may
		// drop some on its own).
		if n := calls.Load(); n > bwAdmitBurst+bwAdmitPerSec*4 {
			t.Errorf("%d of 500 requests reached the node; want at most the rate's burst", n)
		}
		if c.Stats().RateLimited == 0 {
			t.Errorf("no request was rate limited: stats %+v", c.Stats())
		}
	})
}
