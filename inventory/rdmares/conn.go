package rdmares

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultTimeout bounds one Read when its context has no deadline.
const DefaultTimeout = 10 * time.Second

// recvBufSize holds the largest datagram of a dump: the kernel fills a
// dump's messages into buffers of at most 32 KiB (netlink_dump).
const recvBufSize = 64 << 10

// A conn is an RDMA netlink socket. It is not safe for concurrent use.
type conn struct {
	fd  int
	seq uint32
	buf []byte
}

// ErrNoRDMA is wrapped by the error of a Read on a kernel without the RDMA
// core (ib_core not loaded: no RDMA driver), where the socket cannot be
// opened (EPROTONOSUPPORT).
var ErrNoRDMA = errors.New("the kernel has no RDMA netlink: ib_core is not loaded (no RDMA device driver, e.g. mlx5_ib or rdma_rxe, is loaded)")

// dial opens an RDMA netlink socket.
func dial() (*conn, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, netlinkRDMA)
	if errors.Is(err, unix.EPROTONOSUPPORT) {
		return nil, fmt.Errorf("rdmares: open an RDMA netlink socket (NETLINK_RDMA): %w: %w", ErrNoRDMA, err)
	}
	if err != nil {
		return nil, fmt.Errorf("rdmares: open an RDMA netlink socket (NETLINK_RDMA): %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("rdmares: bind the RDMA netlink socket: %w", err)
	}
	return &conn{fd: fd, seq: uint32(time.Now().UnixNano()), buf: make([]byte, recvBufSize)}, nil
}

func (c *conn) close() error { return unix.Close(c.fd) }

// request returns a dump request of cmd; devIndex, when not nil, is the
// RDMA_NLDEV_ATTR_DEV_INDEX the per-object dumps require.
func request(cmd uint16, seq uint32, devIndex *uint32) []byte {
	n := unix.SizeofNlMsghdr
	if devIndex != nil {
		n += unix.SizeofNlAttr + 4
	}
	b := make([]byte, n)
	binary.NativeEndian.PutUint32(b[0:4], uint32(n))
	binary.NativeEndian.PutUint16(b[4:6], msgType(clientNLDEV, int(cmd)))
	binary.NativeEndian.PutUint16(b[6:8], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	binary.NativeEndian.PutUint32(b[8:12], seq)
	if devIndex != nil {
		a := b[unix.SizeofNlMsghdr:]
		binary.NativeEndian.PutUint16(a[0:2], unix.SizeofNlAttr+4)
		binary.NativeEndian.PutUint16(a[2:4], attrDevIndex)
		binary.NativeEndian.PutUint32(a[4:8], *devIndex)
	}
	return b
}

// run sends d's request and feeds the answer to d until the dump ends, the
// context is done or its deadline passes.
func (c *conn) run(ctx context.Context, d *dump, devIndex *uint32) error {
	c.seq++
	d.seq = c.seq
	if err := unix.Sendto(c.fd, request(d.cmd(), d.seq, devIndex), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("send: %w", err)
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := c.setDeadline(ctx); err != nil {
			return err
		}
		n, _, flags, _, err := unix.Recvmsg(c.fd, c.buf, nil, 0)
		switch {
		case errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR):
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, unix.EAGAIN) {
				return fmt.Errorf("the kernel did not answer in time: %w", context.DeadlineExceeded)
			}
			continue
		case err != nil:
			return fmt.Errorf("receive: %w", err)
		case flags&unix.MSG_TRUNC != 0:
			return fmt.Errorf("receive: a datagram over %d bytes was truncated", len(c.buf))
		}
		done, err := d.feed(c.buf[:n])
		if err != nil || done {
			return err
		}
	}
}

// setDeadline bounds the next receive by ctx's deadline.
func (c *conn) setDeadline(ctx context.Context) error {
	dl, ok := ctx.Deadline()
	if !ok {
		return nil
	}
	left := time.Until(dl)
	if left <= 0 {
		return context.DeadlineExceeded
	}
	tv := unix.NsecToTimeval(left.Nanoseconds())
	if tv.Sec == 0 && tv.Usec == 0 {
		tv.Usec = 1 // zero would mean no timeout
	}
	return unix.SetsockoptTimeval(c.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
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
