// Package ethtool reads the pause and discard counters of a netdev: the
// standard pause statistics through ethtool netlink (the generic netlink
// family "ethtool", ETHTOOL_MSG_PAUSE_GET with ETHTOOL_FLAG_STATS: what
// `ethtool -I -a` prints) and the driver's statistics through the
// SIOCETHTOOL ioctl (ETHTOOL_GSSET_INFO, ETHTOOL_GSTRINGS, ETHTOOL_GSTATS:
// what `ethtool -S` prints), of which rdmad keeps the pause, pause-storm and
// discard counters (Kept).
//
// mdlayher/ethtool, the maintained Go library for ethtool netlink, reads
// neither (v0.7.0: link info and modes, FEC, wake-on-LAN, private flags),
// so this package speaks both interfaces itself, over mdlayher/genetlink and
// x/sys/unix, without cgo.
//
// A netdev whose driver has no pause parameters (veth, virtio_net and most
// software devices answer EOPNOTSUPP) or no ethtool -S statistics is
// unsupported: its errors match errors.ErrUnsupported, and Source reports it
// once instead of failing on every read.
//
// The package imports nothing of the daemon; the doctor reaches it through a
// function rdmad passes, and rdmactl when rdmad does not answer
// (doctor.Env.NetCounters), so that the doctor package links no netlink.
package ethtool

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/mdlayher/genetlink"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Config configures a Reader.
type Config struct {
	// NetNS, when not 0, is a file descriptor of the network namespace
	// whose netdevs the Reader reads (tests use a private one); 0 is the
	// calling process's.
	NetNS int
}

// A Reader reads netdevs' pause statistics and driver statistics. It is
// safe for concurrent use: netlink requests are serialised on the socket,
// ioctls are independent.
type Reader struct {
	gc *genetlink.Conn
	// family is the ethtool generic netlink family; famErr says why there
	// is none (a kernel without CONFIG_ETHTOOL_NETLINK, before 5.6).
	family genetlink.Family
	famErr error
	// fd is the socket the SIOCETHTOOL ioctls go through; it resolves
	// netdev names in its network namespace.
	fd int
}

// Open opens the netlink and ioctl sockets a Reader needs.
func Open(cfg *Config) (*Reader, error) {
	if cfg == nil {
		cfg = &Config{}
	}
	gc, err := genetlink.Dial(&netlink.Config{NetNS: cfg.NetNS})
	if err != nil {
		return nil, fmt.Errorf("ethtool: open a generic netlink socket: %w", err)
	}
	fd, err := ioctlSocket(cfg.NetNS)
	if err != nil {
		gc.Close()
		return nil, err
	}
	return newReader(gc, fd)
}

// newReader returns a Reader over an open generic netlink connection (the
// tests' genltest kernels) and an ioctl socket (-1 for none), looking up
// the ethtool family; it closes both on failure.
func newReader(gc *genetlink.Conn, fd int) (*Reader, error) {
	r := &Reader{gc: gc, fd: fd}
	var err error
	r.family, err = Family(gc)
	switch {
	case errors.Is(err, errors.ErrUnsupported):
		r.famErr = err
	case err != nil:
		r.Close()
		return nil, err
	}
	return r, nil
}

// Family looks up the ethtool generic netlink family on gc, for this
// package and for the policy appliers that set ethtool parameters. On a
// kernel without ethtool netlink the error matches errors.ErrUnsupported.
func Family(gc *genetlink.Conn) (genetlink.Family, error) {
	f, err := gc.GetFamily(genlName)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return genetlink.Family{}, fmt.Errorf("the kernel has no ethtool netlink interface (Linux 5.6 or later with CONFIG_ETHTOOL_NETLINK): %w", errors.ErrUnsupported)
	case err != nil:
		return genetlink.Family{}, fmt.Errorf("ethtool: look up the generic netlink family %q: %w", genlName, err)
	}
	return f, nil
}

// Close closes the sockets.
func (r *Reader) Close() error {
	err := r.gc.Close()
	if r.fd >= 0 {
		if cerr := unix.Close(r.fd); err == nil {
			err = cerr
		}
		r.fd = -1
	}
	return err
}

// SetDeadline bounds the netlink requests until t (the ioctls do not
// block).
func (r *Reader) SetDeadline(t time.Time) error { return r.gc.SetDeadline(t) }

// ioctlSocket opens the datagram socket SIOCETHTOOL goes through, as the
// ethtool command does (AF_INET, else generic netlink), in the network
// namespace netns when it is not 0.
func ioctlSocket(netns int) (int, error) {
	open := func() (int, error) {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			fd, err = unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_GENERIC)
		}
		if err != nil {
			return -1, fmt.Errorf("ethtool: open a socket for SIOCETHTOOL: %w", err)
		}
		return fd, nil
	}
	if netns == 0 {
		return open()
	}
	// Sockets belong to the network namespace of the thread that creates
	// them: create it on a locked thread switched there and back.
	runtime.LockOSThread()
	orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return -1, fmt.Errorf("ethtool: open this thread's network namespace: %w", err)
	}
	defer unix.Close(orig)
	if err := unix.Setns(netns, unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return -1, fmt.Errorf("ethtool: enter network namespace fd %d: %w", netns, err)
	}
	fd, err := open()
	if serr := unix.Setns(orig, unix.CLONE_NEWNET); serr != nil {
		// The thread is stuck in the other namespace: leave it locked,
		// so that the runtime ends it instead of reusing it.
		if fd >= 0 {
			unix.Close(fd)
		}
		return -1, fmt.Errorf("ethtool: return to the original network namespace: %w", serr)
	}
	runtime.UnlockOSThread()
	return fd, err
}

// An Error is a failed read of one netdev. Errors of a netdev or kernel
// without the interface match errors.ErrUnsupported.
type Error struct {
	Netdev string
	// Op is what was read: "pause statistics" or "ethtool -S statistics".
	Op  string
	Err error
}

// Error names the netdev and says what to do.
func (e *Error) Error() string {
	return fmt.Sprintf("ethtool: %s of %s: %v%s", e.Op, e.Netdev, e.Err, e.hint())
}

func (e *Error) hint() string {
	switch {
	case errors.Is(e.Err, errors.ErrUnsupported):
		cmd := "ethtool -I -a " + e.Netdev
		if e.Op == opDriver {
			cmd = "ethtool -S " + e.Netdev
		}
		return fmt.Sprintf(" (unsupported: the driver or kernel does not offer them; %s says the same)", cmd)
	case errors.Is(e.Err, unix.ENODEV):
		return " (the netdev is gone: the next inventory read drops it)"
	case errors.Is(e.Err, unix.EPERM), errors.Is(e.Err, unix.EACCES):
		return " (permission denied: run as root, or with CAP_NET_ADMIN)"
	}
	return ""
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

const (
	opPause  = "pause statistics"
	opDriver = "ethtool -S statistics"
)

// Ifindex returns the interface index of netdev (SIOCGIFINDEX): a netdev
// re-created under the same name gets a new one.
func (r *Reader) Ifindex(netdev string) (int, error) {
	if err := checkName(netdev); err != nil {
		return 0, err
	}
	ifr, err := unix.NewIfreq(netdev)
	if err != nil {
		return 0, fmt.Errorf("ethtool: %s: %w", netdev, err)
	}
	if err := unix.IoctlIfreq(r.fd, unix.SIOCGIFINDEX, ifr); err != nil {
		return 0, &Error{Netdev: netdev, Op: "interface index", Err: err}
	}
	return int(ifr.Uint32()), nil
}

// checkName rejects names the kernel cannot have.
func checkName(netdev string) error {
	if netdev == "" || len(netdev) >= ifNameSize {
		return fmt.Errorf("ethtool: %q is not a netdev name (1 to %d bytes)", netdev, ifNameSize-1)
	}
	for i := 0; i < len(netdev); i++ {
		if c := netdev[i]; c == 0 || c == '/' || c == ':' || c <= ' ' {
			return fmt.Errorf("ethtool: %q is not a netdev name", netdev)
		}
	}
	return nil
}
