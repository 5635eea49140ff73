package probe

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A udpSock is the control endpoint's UDP socket, outside the Go runtime's
// poller. A socket in the poller (a *net.UDPConn) is in its epoll set,
// edge-triggered, whether or not a goroutine waits on it: every datagram
// that arrives while the endpoint lingers to the next tick of the batch
// window (ControlOptions.Linger) wakes the poller's thread, which finds
// nobody to run and sleeps again. At a thousand peers those were nine in
// ten of the poller's wakeups (issue #29: ~100 a second, each also waking
// sysmon). Outside the poller a datagram wakes only a thread that waits on
// the socket: Serve blocks in recvfrom(2) while the endpoint is idle, and
// while it lingers nothing waits, the datagrams queue in the receive buffer
// (sized for a window, SetReceiveBuffer) and the tick drains them.
//
// Sends never block (MSG_DONTWAIT): a full send buffer is an error, as a
// lost datagram would be. Close wakes a blocked Serve (shutdown(2)) and
// closes the descriptor only when no call uses it any more, so that a
// number the kernel reuses is never read or written by this socket.
type udpSock struct {
	mu     sync.RWMutex // read-held by every call on fd, held by close
	fd     int
	closed bool
	v6     bool // AF_INET6 (dual-stack when bound to the wildcard)
	local  netip.AddrPort
	down   sync.Once // shutdown's
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
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil && dual {
		family = unix.AF_INET // a host without IPv6
		fd, err = unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
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
	return s, nil
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

// recv reads one datagram into b, blocking until one comes (or the socket
// is shut down: then errSockClosed). It returns the sender unmapped.
func (s *udpSock) recv(b []byte) (int, netip.AddrPort, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return 0, netip.AddrPort{}, errSockClosed
	}
	var rsa unix.RawSockaddrInet6 // large enough for either family
	for {
		rlen := uint32(unsafe.Sizeof(rsa))
		var p unsafe.Pointer
		if len(b) > 0 {
			p = unsafe.Pointer(&b[0])
		}
		// recvfrom(2) itself: unix.Recvfrom allocates the sender's
		// Sockaddr for every datagram (issue #29: no allocation per probe).
		r, _, e := unix.Syscall6(unix.SYS_RECVFROM, uintptr(s.fd), uintptr(p), uintptr(len(b)), 0,
			uintptr(unsafe.Pointer(&rsa)), uintptr(unsafe.Pointer(&rlen)))
		switch {
		case e == unix.EINTR:
			continue
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
		_, _, e := unix.Syscall6(unix.SYS_SENDTO, uintptr(s.fd), uintptr(p), uintptr(len(b)), unix.MSG_DONTWAIT,
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

// shutdown ends reading: a blocked recv returns errSockClosed, and so does
// every recv after. The descriptor stays open for close.
func (s *udpSock) shutdown() {
	// The read lock (control): the descriptor is not closed meanwhile
	// (close takes the write lock, which waits for a blocked recv, which
	// this wakes).
	s.down.Do(func() { s.control(func(fd int) { unix.Shutdown(fd, unix.SHUT_RD) }) })
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
	return unix.Close(s.fd)
}
