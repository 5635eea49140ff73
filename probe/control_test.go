package probe

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/probe/ud"
	"github.com/rdmad/rdmad/probe/wire"
)

// TestControlLoopback runs a real control endpoint on loopback and talks
// to it over UDP: allowed queries are answered and admit the querier's
// port, others are refused, garbage is counted, and nothing stops it.
func TestControlLoopback(t *testing.T) {
	local := ud.LocalPort{Key: "rxe0/1", Endpoint: ud.Endpoint{QPN: 0x11, QKey: 0x1234, GID: [16]byte{15: 1}}}
	var mu sync.Mutex
	var admitted []ud.Endpoint
	c, err := ListenControl("127.0.0.1:0", ControlOptions{NodeID: 7, AdmitFor: time.Minute,
		Ports: func() []ud.LocalPort { return []ud.LocalPort{local} },
		Admit: func(key string, src ud.Endpoint, _ netip.Addr, _ bool, _ time.Time) error {
			mu.Lock()
			defer mu.Unlock()
			admitted = append(admitted, src)
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Serve(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve = %v", err)
		}
		c.Close()
	}()
	cl, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(c.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ask := func(b []byte) (wire.Message, bool) {
		t.Helper()
		if _, err := cl.Write(b); err != nil {
			t.Fatal(err)
		}
		cl.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		buf := make([]byte, 128)
		n, err := cl.Read(buf)
		if err != nil {
			return wire.Message{}, false
		}
		m, err := wire.Decode(buf[:n], nil)
		if err != nil {
			t.Fatalf("answer does not decode: %v", err)
		}
		return m, true
	}
	q := wire.Message{Version: 1, Type: wire.TypeQuery, Nonce: 99, Count: 1, QPN: 0x22, QKey: 0x55, GID: [16]byte{15: 2}}
	qb := q.Encode()

	// Not allowed yet: no answer, counted as refused.
	if _, ok := ask(qb[:]); ok {
		t.Fatal("answered a query from a source not allowed")
	}
	c.SetAllow(nil, []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")})
	for _, junk := range [][]byte{[]byte("hello"), make([]byte, wire.Size), append(qb[:], 0), []byte("RDPC\x03" + strings.Repeat("\x00", 59))} {
		if _, ok := ask(junk); ok {
			t.Fatalf("answered garbage %q", junk)
		}
	}
	a, ok := ask(qb[:])
	if !ok {
		t.Fatal("no answer to an allowed query")
	}
	want := wire.Message{Version: 1, Type: wire.TypeAnswer, Nonce: 99, Index: 0, Count: 1, QPN: 0x11, QKey: 0x1234, GID: local.GID, NodeID: 7}
	if diff := cmp.Diff(want, a); diff != "" {
		t.Errorf("answer (-want +got):\n%s", diff)
	}
	mu.Lock()
	if len(admitted) != 1 || admitted[0] != (ud.Endpoint{QPN: 0x22, QKey: 0x55, GID: [16]byte{15: 2}}) {
		t.Errorf("admitted %+v, want the querier's port", admitted)
	}
	mu.Unlock()
	// The answer is counted once it is sent: the client may read it first.
	var malformed, refused, answered uint64
	settled(func() bool { malformed, refused, answered = c.Counters(); return answered == 1 })
	if malformed != 4 || refused != 1 || answered != 1 {
		t.Errorf("counters malformed %d refused %d answered %d, want 4 1 1", malformed, refused, answered)
	}
}

// TestControlReceiveBuffer: the endpoint's receive buffer grows to what a
// batch needs, and what the kernel drops for a full buffer is counted,
// also after the endpoint closed (its counters outlive it).
func TestControlReceiveBuffer(t *testing.T) {
	c, err := ListenControl("127.0.0.1:0", ControlOptions{NodeID: 7, Ports: func() []ud.LocalPort { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Within net.core.rmem_max's default (212992), so that it holds
	// without CAP_NET_ADMIN too.
	const want = 96 << 10
	if got, err := c.SetReceiveBuffer(want); err != nil || got < want {
		t.Errorf("SetReceiveBuffer(%d) = %d, %v; want at least %d", want, got, err, want)
	}
	if got, err := c.SetReceiveBuffer(4 << 10); err != nil || got < want {
		t.Errorf("SetReceiveBuffer(4096) after %d = %d, %v; want the buffer kept", want, got, err)
	}
	if n := c.Stats().Overflow; n != 0 {
		t.Fatalf("Overflow = %d before anything was sent", n)
	}
	// Nobody reads (no Serve), and the buffer is the kernel's least.
	var serr error
	c.sock.control(func(fd int) { serr = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 1) })
	if serr != nil {
		t.Fatal(serr)
	}
	s, err := net.Dial("udp", c.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for range 64 {
		s.Write(make([]byte, 512))
	}
	n := c.Stats().Overflow
	if n == 0 {
		t.Fatal("Overflow = 0 after 64 datagrams into a full buffer")
	}
	c.Close()
	if after := c.Stats().Overflow; after != n {
		t.Errorf("Overflow = %d after Close, %d before", after, n)
	}
}

// settled waits up to a second for ok, for a counter that another
// goroutine bumps just after the datagram a test waited for left.
func settled(ok func() bool) {
	for deadline := time.Now().Add(time.Second); !ok() && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
}
