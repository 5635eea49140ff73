package probe

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A udpSock is the control endpoint's UDP socket, kept where neither an
// arrival nor a wait costs a wakeup the endpoint did not ask for.
//
// A socket in the Go runtime's poller (a *net.UDPConn) is in its epoll
// set, edge-triggered, whether or not a goroutine waits on it: every
// datagram that arrives while the endpoint lingers to the next tick of the
// batch window (ControlOptions.Linger) wakes the poller's thread, which
// finds nobody to run and sleeps again (issue #29: at a thousand peers nine
// in ten of the poller's wakeups). A goroutine blocked in recvfrom(2)
// instead holds its P in a system call: while another goroutine runs,
// sysmon takes that P back after one of its 20 µs ticks, and every P it
// takes back restarts its 20 µs polling (most of the engine's wakeups at a
// thousand peers, in 1,000-peer traces: sysmon ten to fifteen times a
// pass).
//
// So the socket is in an epoll set of its own, one-shot: the endpoint arms
// it only when it is about to wait (wait), and that set's descriptor is in
// the runtime's poller. A datagram wakes the waiting goroutine the way any
// pollable file does, through the poller, with no thread in a system call
// meanwhile; one datagram disarms the set, so those that arrive while the
// endpoint lingers or drains wake nobody and queue in the receive buffer
// (sized for a window, SetReceiveBuffer) until the endpoint reads them.
// Reads and sends never block (MSG_DONTWAIT) and are raw system calls (the
// scheduler is not told of a call that cannot block: a few µs): a full
// send buffer is an error, as a lost datagram would be.
//
// shutdown wakes a waiting Serve; close closes the descriptors only when
// no call uses them any more, so that a number the kernel reuses is never
// read or written by this socket.
type udpSock struct {
	mu     sync.RWMutex // read-held by every call on fd, held by close
	fd     int
	closed bool
	v6     bool // AF_INET6 (dual-stack when bound to the wildcard)
	local  netip.AddrPort
	down   sync.Once   // shutdown's
	isDown atomic.Bool // shutdown was called
	// ep is fd's own epoll set, one-shot; epf is ep as a pollable file,
	// rc its raw access: wait parks on the runtime's poller through it.
	ep  int
	epf *os.File
	rc  syscall.RawConn
}

// listenUDP opens a UDP socket bound to addr ("[::]:18516", "127.0.0.1:0"),
// as net.ListenUDP("udp", addr) would: the wildcard (or no host) binds
// both IPv4 and IPv6 where the host has IPv6, an IPv4 address an AF_INET
// socket, an IPv6 one an IPv6-only socket.
func listenUDP(addr string) (*udpSock, error) {
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, err
	}
	ip, _ := netip.AddrFromSlice(ua.IP)
	ip = ip.Unmap()
	// "", ":port" and "[::]:port" bind both families (where the host has
	// IPv6), an IPv4 address (0.0.0.0 too) IPv4 alone, another IPv6
	// address IPv6 alone.
	dual := !ip.IsValid() || (ip.Is6() && ip.IsUnspecified())
	family := unix.AF_INET6
	if ip.Is4() {
		family = unix.AF_INET
	}
	const sockType = unix.SOCK_DGRAM | unix.SOCK_CLOEXEC | unix.SOCK_NONBLOCK
	fd, err := unix.Socket(family, sockType, unix.IPPROTO_UDP)
	if err != nil && dual {
		family = unix.AF_INET // a host without IPv6
		fd, err = unix.Socket(family, sockType, unix.IPPROTO_UDP)
	}
	if err != nil {
		return nil, &net.OpError{Op: "listen", Net: "udp", Addr: ua, Err: fmt.Errorf("socket: %w", err)}
	}
	s := &udpSock{fd: fd, v6: family == unix.AF_INET6}
	fail := func(op string, err error) (*udpSock, error) {
		unix.Close(fd)
		return nil, &net.OpError{Op: op, Net: "udp", Addr: ua, Err: err}
	}
	var sa unix.Sockaddr
	if s.v6 {
		v6only := 1
		if dual {
			v6only = 0
		}
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, v6only); err != nil {
			return fail("setsockopt", err)
		}
		a := &unix.SockaddrInet6{Port: ua.Port}
		if ip.IsValid() {
			a.Addr = ip.As16()
		}
		if ua.Zone != "" {
			id, err := zoneIndex(ua.Zone)
			if err != nil {
				return fail("listen", err)
			}
			a.ZoneId = id
		}
		sa = a
	} else {
		a := &unix.SockaddrInet4{Port: ua.Port}
		if ip.Is4() {
			a.Addr = ip.As4()
		}
		sa = a
	}
	if err := unix.Bind(fd, sa); err != nil {
		return fail("listen", err)
	}
	got, err := unix.Getsockname(fd)
	if err != nil {
		return fail("getsockname", err)
	}
	s.local = addrPortOf(got)
	if err := s.openPoll(); err != nil {
		return fail("epoll", err)
	}
	return s, nil
}

// openPoll makes the socket's one-shot epoll set (disarmed until wait
// arms it) and hands its descriptor to the runtime's poller.
func (s *udpSock) openPoll() error {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return fmt.Errorf("epoll_create1: %w", err)
	}
	// Added with no events: nothing is reported until wait arms it.
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, s.fd, &unix.EpollEvent{Events: unix.EPOLLONESHOT, Fd: int32(s.fd)}); err != nil {
		unix.Close(ep)
		return fmt.Errorf("epoll_ctl: %w", err)
	}
	// Non-blocking, so that os.NewFile puts it in the runtime's poller.
	if err := unix.SetNonblock(ep, true); err != nil {
		unix.Close(ep)
		return fmt.Errorf("epoll set non-blocking: %w", err)
	}
	s.ep = ep
	s.epf = os.NewFile(uintptr(ep), "control-endpoint-epoll")
	rc, err := s.epf.SyscallConn()
	if err != nil {
		s.epf.Close()
		return err
	}
	s.rc = rc
	// A descriptor the poller did not take could not be waited on.
	if err := s.epf.SetReadDeadline(time.Time{}); err != nil {
		s.epf.Close()
		return fmt.Errorf("epoll set not pollable: %w", err)
	}
	return nil
}

// addrPortOf returns sa's address and port, IPv4 unmapped.
func addrPortOf(sa unix.Sockaddr) netip.AddrPort {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port))
	case *unix.SockaddrInet6:
		ip := netip.AddrFrom16(a.Addr)
		if a.ZoneId != 0 && !ip.Is4In6() {
			if ifi, err := net.InterfaceByIndex(int(a.ZoneId)); err == nil {
				ip = ip.WithZone(ifi.Name)
			}
		}
		return netip.AddrPortFrom(ip.Unmap(), uint16(a.Port))
	}
	return netip.AddrPort{}
}

// errSockClosed is what a call on a closed udpSock returns; it wraps
// net.ErrClosed, as the net package's sockets do.
var errSockClosed = fmt.Errorf("control socket: %w", net.ErrClosed)

// errEmpty is tryRecv's error when no datagram waits.
var errEmpty = errors.New("control socket: no datagram waiting")

// recv reads one datagram into b, waiting until one comes (or the socket
// is shut down: then errSockClosed). It returns the sender unmapped.
func (s *udpSock) recv(b []byte) (int, netip.AddrPort, error) {
	for {
		n, from, err := s.tryRecv(b)
		if err != errEmpty {
			return n, from, err
		}
		if err := s.wait(); err != nil {
			return 0, netip.AddrPort{}, err
		}
	}
}

// tryRecv reads one datagram into b if one waits, else returns errEmpty;
// errSockClosed once the socket is shut down. It returns the sender
// unmapped.
func (s *udpSock) tryRecv(b []byte) (int, netip.AddrPort, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed || s.isDown.Load() {
		return 0, netip.AddrPort{}, errSockClosed
	}
	var rsa unix.RawSockaddrInet6 // large enough for either family
	rlen := uint32(unsafe.Sizeof(rsa))
	var p unsafe.Pointer
	if len(b) > 0 {
		p = unsafe.Pointer(&b[0])
	}
	// recvfrom(2) itself, raw: it cannot block, and unix.Recvfrom
	// allocates the sender's Sockaddr for every datagram (issue #29: no
	// allocation per probe).
	r, _, e := unix.RawSyscall6(unix.SYS_RECVFROM, uintptr(s.fd), uintptr(p), uintptr(len(b)), unix.MSG_DONTWAIT,
		uintptr(unsafe.Pointer(&rsa)), uintptr(unsafe.Pointer(&rlen)))
	switch {
	case e == unix.EAGAIN || e == unix.EINTR:
		return 0, netip.AddrPort{}, errEmpty
	case e != 0:
		return 0, netip.AddrPort{}, fmt.Errorf("recvfrom: %w", e)
	}
	from, ok := rawAddrPort(&rsa, rlen)
	if !ok {
		// No sender: shut down (an empty datagram still names one).
		return 0, netip.AddrPort{}, errSockClosed
	}
	return int(r), from, nil
}

// wait returns once a datagram may wait (or at once if one does), or
// errSockClosed when the socket is shut down; the caller reads with
// tryRecv. It arms the socket's one-shot set and parks on the runtime's
// poller: no thread waits in a system call for it, and the first datagram
// disarms the set again.
func (s *udpSock) wait() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed || s.isDown.Load() {
		return errSockClosed
	}
	// Armed level-triggered: a datagram already queued (or a shutdown,
	// which reads as readable) reports at once.
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLONESHOT, Fd: int32(s.fd)}
	if _, _, e := unix.RawSyscall6(unix.SYS_EPOLL_CTL, uintptr(s.ep), unix.EPOLL_CTL_MOD, uintptr(s.fd), uintptr(unsafe.Pointer(&ev)), 0, 0); e != 0 {
		return fmt.Errorf("control socket: arm epoll: %w", e)
	}
	var werr error
	err := s.rc.Read(func(uintptr) bool {
		if s.isDown.Load() {
			return true
		}
		var evs [1]unix.EpollEvent
		n, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(s.ep), uintptr(unsafe.Pointer(&evs[0])), 1, 0, 0, 0)
		switch {
		case e == unix.EINTR || (e == 0 && n == 0):
			return false // nothing yet: park on the poller
		case e != 0:
			werr = fmt.Errorf("control socket: epoll_pwait: %w", e)
		}
		return true
	})
	switch {
	case s.isDown.Load():
		return errSockClosed
	case err != nil:
		return fmt.Errorf("control socket: wait: %w", err)
	}
	return werr
}

// rawAddrPort returns the address and port in rsa (rlen bytes of it, as
// recvfrom(2) filled it), IPv4 unmapped; false when it holds none.
func rawAddrPort(rsa *unix.RawSockaddrInet6, rlen uint32) (netip.AddrPort, bool) {
	port := func(p uint16) uint16 { return p>>8 | p<<8 } // network order
	switch rsa.Family {
	case unix.AF_INET:
		if rlen < unix.SizeofSockaddrInet4 {
			return netip.AddrPort{}, false
		}
		a := (*unix.RawSockaddrInet4)(unsafe.Pointer(rsa))
		return netip.AddrPortFrom(netip.AddrFrom4(a.Addr), port(a.Port)), true
	case unix.AF_INET6:
		if rlen < unix.SizeofSockaddrInet6 {
			return netip.AddrPort{}, false
		}
		ip := netip.AddrFrom16(rsa.Addr)
		if rsa.Scope_id != 0 && !ip.Is4In6() {
			ip = ip.WithZone(strconv.FormatUint(uint64(rsa.Scope_id), 10))
		}
		return netip.AddrPortFrom(ip.Unmap(), port(rsa.Port)), true
	}
	return netip.AddrPort{}, false
}

// sendTo sends b to to without blocking.
func (s *udpSock) sendTo(b []byte, to netip.AddrPort) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return errSockClosed
	}
	// sendto(2) itself, from a sockaddr on the stack: unix.Sendto
	// allocates one per datagram.
	ip := to.Addr().Unmap()
	var rsa unix.RawSockaddrInet6 // large enough for either family
	var rlen uintptr
	port := to.Port()>>8 | to.Port()<<8 // network order
	switch {
	case s.v6:
		rsa.Family, rsa.Port, rsa.Addr = unix.AF_INET6, port, ip.As16() // IPv4 as ::ffff:a.b.c.d
		if z := ip.Zone(); z != "" {
			id, err := zoneIndex(z)
			if err != nil {
				return err
			}
			rsa.Scope_id = id
		}
		rlen = unix.SizeofSockaddrInet6
	case ip.Is4():
		a := (*unix.RawSockaddrInet4)(unsafe.Pointer(&rsa))
		a.Family, a.Port, a.Addr = unix.AF_INET, port, ip.As4()
		rlen = unix.SizeofSockaddrInet4
	default:
		return &net.AddrError{Err: "IPv6 destination from an IPv4 socket", Addr: to.String()}
	}
	var p unsafe.Pointer
	if len(b) > 0 {
		p = unsafe.Pointer(&b[0])
	}
	for {
		// Raw: MSG_DONTWAIT, it cannot block.
		_, _, e := unix.RawSyscall6(unix.SYS_SENDTO, uintptr(s.fd), uintptr(p), uintptr(len(b)), unix.MSG_DONTWAIT,
			uintptr(unsafe.Pointer(&rsa)), rlen)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return fmt.Errorf("sendto: %w", e)
		}
		return nil
	}
}

// zoneIndex returns the interface index an IPv6 zone names: a number as
// rawAddrPort writes it, or an interface name.
func zoneIndex(z string) (uint32, error) {
	if n, err := strconv.ParseUint(z, 10, 32); err == nil {
		return uint32(n), nil
	}
	ifi, err := net.InterfaceByName(z)
	if err != nil {
		return 0, err
	}
	return uint32(ifi.Index), nil
}

// control runs f with the descriptor, unless the socket is closed.
func (s *udpSock) control(f func(fd int)) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return errSockClosed
	}
	f(s.fd)
	return nil
}

// shutdown ends reading: a waiting recv (or wait) returns errSockClosed,
// and so does every recv after. The descriptors stay open for close.
func (s *udpSock) shutdown() {
	s.down.Do(func() {
		s.isDown.Store(true)
		// shutdown(2) makes the socket readable, which wakes a wait
		// armed on it; the read lock (control) keeps the descriptor
		// from being closed meanwhile.
		s.control(func(fd int) { unix.Shutdown(fd, unix.SHUT_RD) })
		// And a wait that was about to park: the poller's deadline
		// wakes it whatever the socket reports.
		s.epf.SetReadDeadline(time.Unix(1, 0))
	})
}

// close shuts the socket down, waits for the calls using it and closes it.
func (s *udpSock) close() error {
	s.shutdown()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errSockClosed
	}
	s.closed = true
	s.epf.Close()
	return unix.Close(s.fd)
}
