package probe

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestUDPSockFamilies: the addresses the control endpoint listens on bind
// as net.ListenUDP binds them, and a datagram's sender comes back
// unmapped: the wildcard takes IPv4 and IPv6, an IPv4 address IPv4 alone.
func TestUDPSockFamilies(t *testing.T) {
	for _, tc := range []struct {
		listen string
		send   string // the host a client sends from and to
		v6     bool
	}{
		{"127.0.0.1:0", "127.0.0.1", false},
		{"0.0.0.0:0", "127.0.0.1", false},
		{"[::]:0", "127.0.0.1", true},
		{":0", "127.0.0.1", true},
		{"[::]:0", "::1", true},
		{"[::1]:0", "::1", true},
	} {
		s, err := listenUDP(tc.listen)
		if err != nil {
			if tc.v6 && (errors.Is(err, unix.EAFNOSUPPORT) || errors.Is(err, unix.EADDRNOTAVAIL)) {
				t.Skipf("no IPv6 here: %v", err)
			}
			t.Fatalf("listenUDP(%q): %v", tc.listen, err)
		}
		if s.v6 != tc.v6 {
			t.Errorf("listenUDP(%q): IPv6 socket %v, want %v", tc.listen, s.v6, tc.v6)
		}
		if s.local.Port() == 0 {
			t.Errorf("listenUDP(%q): local %v has no port", tc.listen, s.local)
		}
		dst := netip.AddrPortFrom(netip.MustParseAddr(tc.send), s.local.Port())
		cl, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(dst))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cl.Write([]byte("query")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64)
		n, from, err := s.recv(buf)
		if err != nil || string(buf[:n]) != "query" {
			t.Fatalf("%s: recv = %q, %v, %v", tc.listen, buf[:n], from, err)
		}
		if want := cl.LocalAddr().(*net.UDPAddr).AddrPort(); from != want {
			t.Errorf("%s: sender %v, want %v (unmapped)", tc.listen, from, want)
		}
		// The answer goes back to the sender, mapped where the socket is
		// IPv6.
		if err := s.sendTo([]byte("answer"), from); err != nil {
			t.Fatalf("%s: sendTo %v: %v", tc.listen, from, err)
		}
		cl.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := cl.Read(buf); err != nil || string(buf[:n]) != "answer" {
			t.Errorf("%s: client read %q, %v", tc.listen, buf[:n], err)
		}
		cl.Close()
		if err := s.close(); err != nil {
			t.Errorf("close: %v", err)
		}
	}
}

// TestUDPSockIPv4OnlyRefusesIPv6: an IPv4 socket says why it cannot send
// to an IPv6 address, rather than sending somewhere else.
func TestUDPSockIPv4OnlyRefusesIPv6(t *testing.T) {
	s, err := listenUDP("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	if err := s.sendTo([]byte("x"), netip.MustParseAddrPort("[2001:db8::1]:9")); err == nil {
		t.Fatal("sendTo an IPv6 address from an IPv4 socket succeeded")
	}
}

// TestUDPSockShutdownWakesRecv: a recv blocked on an idle socket returns
// net.ErrClosed when the socket is shut down (Serve's ctx) or closed, and
// nothing uses the descriptor after close: a number the kernel hands out
// again is never written to.
func TestUDPSockShutdownWakesRecv(t *testing.T) {
	for _, how := range []string{"shutdown", "close"} {
		s, err := listenUDP("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			_, _, err := s.recv(make([]byte, 64))
			done <- err
		}()
		time.Sleep(50 * time.Millisecond) // let it block
		if how == "shutdown" {
			s.shutdown()
		} else {
			s.close()
		}
		select {
		case err := <-done:
			if !errors.Is(err, net.ErrClosed) {
				t.Errorf("%s: recv = %v, want net.ErrClosed", how, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: recv still blocked after 5 s", how)
		}
		s.close()
		if err := s.sendTo([]byte("x"), s.local); !errors.Is(err, net.ErrClosed) {
			t.Errorf("%s: sendTo after close = %v, want net.ErrClosed", how, err)
		}
		if err := s.control(func(int) { t.Errorf("%s: control ran on a closed socket", how) }); !errors.Is(err, net.ErrClosed) {
			t.Errorf("%s: control after close = %v, want net.ErrClosed", how, err)
		}
	}
}

// TestUDPSockCloseRacesSends: sends and reads from other goroutines while
// the socket closes either succeed or fail with net.ErrClosed; none
// touches the descriptor after it is closed (run with -race), and a file
// opened right after gets the freed number without a stray write in it.
func TestUDPSockCloseRacesSends(t *testing.T) {
	s, err := listenUDP("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := s.sendTo([]byte("probe"), s.local); err != nil && !errors.Is(err, net.ErrClosed) {
					t.Errorf("sendTo: %v", err)
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, 64)
		for {
			if _, _, err := s.recv(buf); err != nil {
				if !errors.Is(err, net.ErrClosed) {
					t.Errorf("recv: %v", err)
				}
				return
			}
		}
	}()
	time.Sleep(20 * time.Millisecond)
	if err := s.close(); err != nil {
		t.Errorf("close: %v", err)
	}
	f, err := os.CreateTemp(t.TempDir(), "reused")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	close(stop)
	wg.Wait()
	if st, err := f.Stat(); err != nil || st.Size() != 0 {
		t.Errorf("a file opened after close holds %d bytes (%v): a send went to a reused descriptor", st.Size(), err)
	}
	f.Close()
}

// TestUDPSockNoAllocs: a datagram in and its answer out allocate nothing
// (issue #29: no allocation per probe; unix.Recvfrom and unix.Sendto
// allocate a Sockaddr each).
func TestUDPSockNoAllocs(t *testing.T) {
	s, err := listenUDP("[::]:0")
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	dst := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), s.local.Port())
	buf, msg := make([]byte, 64), []byte("probe")
	allocs := testing.AllocsPerRun(100, func() {
		if err := s.sendTo(msg, dst); err != nil {
			t.Fatal(err)
		}
		if _, from, err := s.recv(buf); err != nil || from.Port() != s.local.Port() {
			t.Fatalf("recv = %v, %v", from, err)
		}
	})
	if allocs != 0 {
		t.Errorf("%.1f allocations per datagram sent and read, want 0", allocs)
	}
}

// TestUDPSockHostileDatagrams: what anyone on the fabric can send reads as
// a datagram, never as the socket's end: an empty datagram (a zero-length
// read with a sender, where a shut-down socket reads zero without one) and
// one of 60,000 bytes, cut to the buffer (the caller sees it is longer
// than any message). The endpoint reads on after both.
func TestUDPSockHostileDatagrams(t *testing.T) {
	s, err := listenUDP("[::]:0")
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	cl, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), s.local.Port())))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	buf := make([]byte, 1025)
	for _, tc := range []struct {
		name string
		b    []byte
		want int
	}{{"empty", nil, 0}, {"60000 bytes", make([]byte, 60000), len(buf)}, {"a message", []byte("query"), 5}} {
		if _, err := cl.Write(tc.b); err != nil {
			t.Fatalf("%s: send: %v", tc.name, err)
		}
		n, from, err := s.recv(buf)
		if err != nil || n != tc.want || from != cl.LocalAddr().(*net.UDPAddr).AddrPort() {
			t.Errorf("%s: recv = %d bytes from %v, %v; want %d bytes from %v", tc.name, n, from, err, tc.want, cl.LocalAddr())
		}
	}
}

// TestUDPSockWaitsInPoller: a recv waiting on an idle socket parks on the
// runtime's poller: no thread sits in recvfrom(2) for it (a goroutine
// blocked in a system call holds its P, and sysmon's taking it back
// restarts sysmon's 20 µs polling: issue #29).
func TestUDPSockWaitsInPoller(t *testing.T) {
	s, err := listenUDP("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	done := make(chan error, 1)
	go func() {
		_, _, err := s.recv(make([]byte, 64))
		done <- err
	}()
	time.Sleep(50 * time.Millisecond) // let it wait
	inRecv := func() []string {
		var in []string
		tasks, err := filepath.Glob("/proc/self/task/*/syscall")
		if err != nil || len(tasks) == 0 {
			t.Fatalf("no /proc/self/task/*/syscall: %v", err)
		}
		for _, f := range tasks {
			b, err := os.ReadFile(f)
			if err != nil {
				continue // a thread that exited
			}
			if nr, _, _ := strings.Cut(strings.TrimSpace(string(b)), " "); nr == strconv.Itoa(unix.SYS_RECVFROM) {
				in = append(in, f)
			}
		}
		return in
	}
	if in := inRecv(); len(in) > 0 {
		t.Errorf("threads blocked in recvfrom while the socket is idle: %v", in)
	}
	select {
	case err := <-done:
		t.Fatalf("recv returned before any datagram: %v", err)
	default:
	}
	// It still reads what comes.
	if err := s.sendTo([]byte("query"), s.local); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("recv = %v, want the datagram", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("recv still waiting 5 s after a datagram")
	}
}

// TestUDPSockDisarmedWhileDraining: once a wait has returned, the
// datagrams that come while the endpoint drains or lingers make nothing
// readable (they wake no thread) until the next wait arms the set again,
// which then reports them at once.
func TestUDPSockDisarmedWhileDraining(t *testing.T) {
	s, err := listenUDP("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	ready := func() int {
		var evs [1]unix.EpollEvent
		n, err := unix.EpollWait(s.ep, evs[:], 0)
		if err != nil {
			t.Fatalf("epoll_wait: %v", err)
		}
		return n
	}
	buf := make([]byte, 64)
	if err := s.sendTo([]byte("first"), s.local); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.recv(buf); err != nil {
		t.Fatal(err)
	}
	if n := ready(); n != 0 {
		t.Fatalf("the set reports %d events with an empty socket", n)
	}
	for range 10 {
		if err := s.sendTo([]byte("meanwhile"), s.local); err != nil {
			t.Fatal(err)
		}
	}
	if n := ready(); n != 0 {
		t.Errorf("ten datagrams while disarmed made the set readable (%d events): each would wake the poller", n)
	}
	if err := s.wait(); err != nil {
		t.Fatalf("wait with datagrams queued: %v", err)
	}
	got := 0
	for {
		if _, _, err := s.tryRecv(buf); err == errEmpty {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		got++
	}
	if got != 10 {
		t.Errorf("drained %d datagrams, want the 10 queued", got)
	}
}
