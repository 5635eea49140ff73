package uevent

import (
	"context"
	"errors"
	"fmt"

	"github.com/mdlayher/socket"
	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/daemon/linkwatch/coalesce"
)

// ErrLost reports that the kernel dropped uevents because the socket's
// receive buffer overflowed (ENOBUFS). The connection stays usable, but the
// caller has missed events and must resynchronise its view of all devices.
// Errors returned for this condition match both ErrLost and unix.ENOBUFS.
var ErrLost = errors.New("events lost, resync required")

// kernelGroup is the multicast group the kernel broadcasts uevents on;
// udevd rebroadcasts processed events on group 2 (with a libudev header).
const kernelGroup = 1

// DefaultReadBuffer is the socket receive buffer requested by Dial when
// Options.ReadBuffer is zero. Driver reloads on hosts with many VFs emit
// thousands of uevents in a burst; a small buffer would overflow at once.
const DefaultReadBuffer = 8 << 20

// maxMessage bounds one message; the kernel limits a uevent to a few KiB
// (UEVENT_BUFFER_SIZE for the environment plus the header).
const maxMessage = 16 << 10

// Options configure Dial. The zero value is valid.
type Options struct {
	// Subsystems limits the events Receive returns to these subsystems
	// (e.g. "net", "infiniband"). Empty means all subsystems.
	Subsystems []string
	// NetNS is a file descriptor of the network namespace to open the
	// socket in; 0 means the caller's. Uevents of network devices are only
	// delivered to sockets in the device's namespace.
	NetNS int
	// ReadBuffer is the receive buffer size in bytes; 0 means
	// DefaultReadBuffer.
	ReadBuffer int
}

// A Conn receives kernel uevents. Receive must not be called concurrently;
// Close may be called at any time.
type Conn struct {
	c          *socket.Conn
	subsystems map[string]bool
	buf        []byte
}

// Dial opens a NETLINK_KOBJECT_UEVENT socket subscribed to the kernel's
// uevent group.
func Dial(opts *Options) (*Conn, error) {
	if opts == nil {
		opts = &Options{}
	}
	c, err := socket.Socket(unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_KOBJECT_UEVENT, "uevent", &socket.Config{NetNS: opts.NetNS})
	if err != nil {
		return nil, fmt.Errorf("uevent: open netlink socket: %w", err)
	}
	if err := c.Bind(&unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: 1 << (kernelGroup - 1)}); err != nil {
		c.Close()
		return nil, fmt.Errorf("uevent: subscribe to kernel uevent group: %w", err)
	}
	size := opts.ReadBuffer
	if size <= 0 {
		size = DefaultReadBuffer
	}
	// SO_RCVBUFFORCE ignores net.core.rmem_max but needs CAP_NET_ADMIN;
	// without it fall back to SO_RCVBUF, which the kernel caps at rmem_max.
	if err := c.SetsockoptInt(unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, size); err != nil {
		if err := c.SetReadBuffer(size); err != nil {
			c.Close()
			return nil, fmt.Errorf("uevent: set receive buffer to %d bytes: %w", size, err)
		}
	}
	uc := &Conn{c: c, buf: make([]byte, maxMessage)}
	if len(opts.Subsystems) > 0 {
		uc.subsystems = make(map[string]bool, len(opts.Subsystems))
		for _, s := range opts.Subsystems {
			uc.subsystems[s] = true
		}
	}
	return uc, nil
}

// Close closes the socket; a pending Receive returns an error.
func (c *Conn) Close() error {
	return c.c.Close()
}

// Receive returns the next kernel uevent of the selected subsystems. It
// skips messages that do not come from the kernel, libudev messages,
// truncated or malformed messages and other subsystems. When the kernel
// dropped events it returns an error matching ErrLost; the caller should
// resync and call Receive again. When ctx is done it returns ctx.Err().
func (c *Conn) Receive(ctx context.Context) (Event, error) {
	for {
		n, from, err := c.c.Recvfrom(ctx, c.buf, unix.MSG_TRUNC)
		if err != nil {
			if ctx.Err() != nil {
				return Event{}, ctx.Err()
			}
			if errors.Is(err, unix.ENOBUFS) {
				return Event{}, fmt.Errorf("uevent: receive: %w: %w", ErrLost, err)
			}
			return Event{}, fmt.Errorf("uevent: receive: %w", err)
		}
		// Only the kernel (port ID 0) is trusted; any process allowed to
		// send to the group could otherwise inject fake device events.
		if sa, ok := from.(*unix.SockaddrNetlink); !ok || sa.Pid != 0 {
			continue
		}
		if n > len(c.buf) {
			continue // truncated (MSG_TRUNC reports the full length)
		}
		ev, err := Parse(c.buf[:n])
		if err != nil {
			continue
		}
		if c.subsystems != nil && !c.subsystems[ev.Subsystem] {
			continue
		}
		return ev, nil
	}
}

// Run receives events until ctx is done and adds each to q, keyed by
// DevPath, so that bursts for one device become one notification. When
// events were lost it calls q.Drop, which makes the consumer resync. Run
// returns ctx.Err() when ctx is done, or the first socket error.
func (c *Conn) Run(ctx context.Context, q *coalesce.Queue[string, Event]) error {
	for {
		ev, err := c.Receive(ctx)
		switch {
		case err == nil:
			q.Add(ev.DevPath, ev)
		case errors.Is(err, ErrLost):
			q.Drop()
		default:
			return err
		}
	}
}
