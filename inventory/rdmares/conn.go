package rdmares

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// DefaultTimeout bounds one Read when its context has no deadline.
const DefaultTimeout = 10 * time.Second

// A conn is an RDMA netlink connection bound to the context of one Read:
// its deadline is the socket's, and its cancellation wakes a receive
// blocked in the kernel. It is not safe for concurrent use.
type conn struct {
	nl *netlink.Conn
	// setDeadline is nl.SetDeadline; the tests' nltest connections have
	// no deadlines, and record them instead.
	setDeadline func(time.Time) error
	// stop unregisters the cancellation; fired is closed when it has run.
	stop  func() bool
	fired chan struct{}
}

// ErrNoRDMA is wrapped by the error of a Read on a kernel without the RDMA
// core (ib_core not loaded: no RDMA driver), where the socket cannot be
// opened (EPROTONOSUPPORT).
var ErrNoRDMA = errors.New("the kernel has no RDMA netlink: ib_core is not loaded (no RDMA device driver, e.g. mlx5_ib or rdma_rxe, is loaded)")

// Dial opens an RDMA netlink socket, as Read does, for the policy
// appliers that set RDMA device attributes (policy/rdmanl). On a kernel
// without the RDMA core the error wraps ErrNoRDMA.
func Dial() (*netlink.Conn, error) { return dialKernel() }

// dialKernel opens an RDMA netlink socket.
func dialKernel() (*netlink.Conn, error) {
	nl, err := netlink.Dial(netlinkRDMA, nil)
	if errors.Is(err, unix.EPROTONOSUPPORT) {
		return nil, fmt.Errorf("rdmares: open an RDMA netlink socket (NETLINK_RDMA): %w: %w", ErrNoRDMA, err)
	}
	if err != nil {
		return nil, fmt.Errorf("rdmares: open an RDMA netlink socket (NETLINK_RDMA): %w", err)
	}
	return nl, nil
}

// newConn binds nl to ctx: ctx's deadline becomes the socket's, and when
// ctx is done a deadline in the past wakes whatever receive is blocked, so
// that a cancelled Read returns at once rather than when the kernel
// answers or the deadline passes. setDeadline is nl.SetDeadline but in
// tests. close undoes it.
func newConn(ctx context.Context, nl *netlink.Conn, setDeadline func(time.Time) error) (*conn, error) {
	c := &conn{nl: nl, setDeadline: setDeadline, fired: make(chan struct{})}
	if dl, ok := ctx.Deadline(); ok {
		if err := c.setDeadline(dl); err != nil {
			return nil, fmt.Errorf("rdmares: set the RDMA netlink socket's deadline: %w", err)
		}
	}
	// The deadline is set before the cancellation is registered, once for
	// the connection, so that it can never overwrite the past deadline
	// the cancellation sets.
	c.stop = context.AfterFunc(ctx, func() {
		defer close(c.fired)
		// An error leaves the socket's deadline, ctx's, to end a blocked
		// receive; there is nobody to tell.
		_ = c.setDeadline(time.Unix(1, 0))
	})
	return c, nil
}

// close waits for a cancellation that is running, then closes the socket.
func (c *conn) close() error {
	if !c.stop() {
		<-c.fired
	}
	return c.nl.Close()
}

// request returns a dump request of cmd; devIndex, when not nil, is the
// RDMA_NLDEV_ATTR_DEV_INDEX the per-object dumps require. The sequence
// number and port id are the connection's (netlink.Conn.Send).
func request(cmd uint16, devIndex *uint32) netlink.Message {
	m := netlink.Message{Header: netlink.Header{
		Type:  netlink.HeaderType(msgType(clientNLDEV, int(cmd))),
		Flags: netlink.Request | netlink.Dump,
	}}
	if devIndex != nil {
		a := make([]byte, unix.SizeofNlAttr+4)
		binary.NativeEndian.PutUint16(a[0:2], unix.SizeofNlAttr+4)
		binary.NativeEndian.PutUint16(a[2:4], attrDevIndex)
		binary.NativeEndian.PutUint32(a[4:8], *devIndex)
		m.Data = a
	}
	return m
}

// dump sends req and hands each reply to reply until the dump ends (the
// kernel's NLMSG_DONE, or reply says done), ctx is done or its deadline
// passes. Every reply must answer req: its sequence number and port id.
// A kernel error (NLMSG_DONE's or NLMSG_ERROR's code) is returned wrapping
// its syscall.Errno.
func (c *conn) dump(ctx context.Context, req netlink.Message, reply func(netlink.Message) (done bool, err error)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	req, err := c.nl.Send(req)
	if err != nil {
		return c.ioError(ctx, "send", err)
	}
	// ReceiveIter reads datagrams until the NLMSG_DONE of a multipart
	// answer (which it does not yield); a return from the loop leaves it
	// to drain the rest of the dump, which the past deadline of a
	// cancellation cuts short.
	for m, err := range c.nl.ReceiveIter() {
		if err != nil {
			return c.ioError(ctx, "receive", err)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := netlink.Validate(req, []netlink.Message{m}); err != nil {
			return malformed("a reply to request %d of port %d while waiting for %d of port %d: %v",
				m.Header.Sequence, m.Header.PID, req.Header.Sequence, req.Header.PID, err)
		}
		done, err := reply(m)
		if err != nil || done {
			return err
		}
	}
	return ctx.Err()
}

// ioError explains a failed send or receive: ctx's error when ctx is done
// (a cancellation or the deadline woke it), else the socket's.
func (c *conn) ioError(ctx context.Context, op string, err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		if cerr := ctx.Err(); errors.Is(cerr, context.Canceled) {
			return cerr
		}
		return fmt.Errorf("the kernel did not answer in time: %w", context.DeadlineExceeded)
	}
	var errno syscall.Errno
	if errors.As(err, &errno) && !isSyscallError(err) {
		// The kernel's answer (NLMSG_ERROR's or NLMSG_DONE's code), not
		// a failed system call: the errno says it all.
		return errno
	}
	return fmt.Errorf("%s: %w", op, err)
}

// isSyscallError says whether err is a failed system call's.
func isSyscallError(err error) bool {
	var se *os.SyscallError
	return errors.As(err, &se)
}

// run dumps d's operation and decodes the replies into d.
func (c *conn) run(ctx context.Context, d *dump, devIndex *uint32) error {
	return c.dump(ctx, request(d.cmd(), devIndex), d.message)
}

// devices dumps RDMA_NLDEV_CMD_RES_GET: every device with its summary.
func (c *conn) devices(ctx context.Context) ([]Device, error) {
	d := &dump{summary: true}
	if err := c.run(ctx, d, nil); err != nil {
		return nil, fmt.Errorf("rdmares: dump the devices (RDMA_NLDEV_CMD_RES_GET): %w", err)
	}
	return d.devices, nil
}

// objects dumps kind's objects on the device dev, appending them to out.
func (c *conn) objects(ctx context.Context, kind Kind, dev Device, out []Object) ([]Object, error) {
	d := &dump{kind: kind, objects: out}
	idx := dev.Index
	if err := c.run(ctx, d, &idx); err != nil {
		return d.objects, fmt.Errorf("rdmares: dump the %vs of %s: %w", kind, dev.Name, err)
	}
	return d.objects, nil
}
