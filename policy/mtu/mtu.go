// Package mtu observes and sets the MTU of network interfaces over
// rtnetlink.
//
// RoCE needs the netdev MTU to fit the RDMA path MTU (e.g. 9000 for a 4096
// byte IB MTU), and a driver reload or VF re-creation resets it. The
// reconciler observes the MTU, compares it with the declared value and sets
// it; this package gives it precise errors, including the device's valid
// range when the kernel rejects a value.
//
// A Client keeps one rtnetlink socket (mdlayher/netlink) for all three: one
// RTM_GETLINK by name answers the MTU and its range (IFLA_MTU, IFLA_MIN_MTU,
// IFLA_MAX_MTU, which vishvananda/netlink does not decode), and
// RTM_SETLINK sets it.
package mtu

import (
	"errors"
	"fmt"
	"time"

	"github.com/mdlayher/netlink"
	"github.com/mdlayher/netlink/nlenc"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Options configure Open. The zero value works on the caller's network
// namespace.
type Options struct {
	// NetNS selects the network namespace of the interfaces; nil means
	// the caller's.
	NetNS *netns.NsHandle
}

// A Client reads and changes interface MTUs in one network namespace. It is
// safe for use by one goroutine at a time.
type Client struct {
	conn *netlink.Conn
	// setDeadline bounds each request (conn.SetDeadline; nil for the
	// tests' scripted kernel, which has none).
	setDeadline func(time.Time) error
}

// Open returns a Client; Close releases its netlink socket.
func Open(opts Options) (*Client, error) {
	cfg := &netlink.Config{}
	if opts.NetNS != nil {
		cfg.NetNS = int(*opts.NetNS)
	}
	conn, err := netlink.Dial(unix.NETLINK_ROUTE, cfg)
	if err != nil {
		return nil, fmt.Errorf("mtu: open rtnetlink: %w", err)
	}
	// The kernel's reason for a refusal ("mtu greater than device
	// maximum"), for the errors. A kernel without extended
	// acknowledgements (before 4.12) still answers the errno.
	_ = conn.SetOption(netlink.ExtendedAcknowledge, true)
	c := newClient(conn)
	c.setDeadline = conn.SetDeadline
	return c, nil
}

// newClient returns a Client over conn (the tests' nltest kernels).
func newClient(conn *netlink.Conn) *Client { return &Client{conn: conn} }

// Close releases the Client's socket.
func (c *Client) Close() error {
	return c.conn.Close()
}

// A link is what RTM_GETLINK tells of an interface.
type link struct {
	index, mtu int
	// min and max are IFLA_MIN_MTU and IFLA_MAX_MTU: see Range.
	min, max int
}

// kernelError returns the errno of a netlink error with the kernel's
// extended acknowledgement message, if any, after it.
func kernelError(err error) error {
	var oe *netlink.OpError
	var errno unix.Errno
	if !errors.As(err, &oe) || !errors.As(oe.Err, &errno) {
		return err
	}
	if oe.Message != "" {
		return fmt.Errorf("%w: %s", errno, oe.Message)
	}
	return errno
}

// link looks ifname up (RTM_GETLINK by IFLA_IFNAME).
func (c *Client) link(op, ifname string) (link, error) {
	ae := netlink.NewAttributeEncoder()
	ae.String(unix.IFLA_IFNAME, ifname)
	attrs, err := ae.Encode()
	if err != nil {
		return link{}, fmt.Errorf("mtu: %s: look up %s: %w", op, ifname, err)
	}
	// struct ifinfomsg (family, pad, type, index, flags, change) with
	// index 0: the kernel looks the name up.
	req := append(make([]byte, unix.SizeofIfInfomsg), attrs...)
	msgs, err := c.execute(netlink.Message{
		Header: netlink.Header{Type: unix.RTM_GETLINK, Flags: netlink.Request},
		Data:   req,
	})
	if errors.Is(err, unix.ENODEV) {
		return link{}, fmt.Errorf("mtu: %s: no network interface %q: %w", op, ifname, unix.ENODEV)
	}
	if err != nil {
		return link{}, fmt.Errorf("mtu: %s: look up %s: %w", op, ifname, kernelError(err))
	}
	for _, m := range msgs {
		if m.Header.Type != unix.RTM_NEWLINK || len(m.Data) < unix.SizeofIfInfomsg {
			continue
		}
		l, err := parseLink(m.Data[unix.SizeofIfInfomsg:])
		if err != nil {
			return link{}, fmt.Errorf("mtu: %s: look up %s: %w", op, ifname, err)
		}
		l.index = int(int32(nlenc.NativeEndian().Uint32(m.Data[4:8])))
		return l, nil
	}
	return link{}, fmt.Errorf("mtu: %s: look up %s: no RTM_NEWLINK in the kernel's answer", op, ifname)
}

// Observe returns the current MTU of ifname. A missing interface gives an
// error matching unix.ENODEV.
func (c *Client) Observe(ifname string) (int, error) {
	l, err := c.link("observe MTU", ifname)
	if err != nil {
		return 0, err
	}
	return l.mtu, nil
}

// Set sets the MTU of ifname. It does nothing when the MTU already has the
// value, so that reapplying causes no netlink notification (and no event
// loop). When the kernel rejects the value, the error names the device's
// valid range if the kernel reports one.
func (c *Client) Set(ifname string, mtu int) error {
	op := fmt.Sprintf("set MTU %d on %s", mtu, ifname)
	if mtu <= 0 || mtu > 1<<31-1 {
		return fmt.Errorf("mtu: %s: MTU must be a positive 32-bit number: %w", op, unix.EINVAL)
	}
	l, err := c.link(fmt.Sprintf("set MTU %d", mtu), ifname)
	if err != nil {
		return err
	}
	if l.mtu == mtu {
		return nil
	}
	err = c.setMTU(l.index, mtu)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EINVAL):
		// The range came with the lookup: the device's, which a
		// refused MTU does not change.
		if l.min == 0 && l.max == 0 {
			return fmt.Errorf("mtu: %s: the device or its driver rejects this MTU (check the NIC's maximum, e.g. with `ip -d link show %s`): %w", op, ifname, err)
		}
		return fmt.Errorf("mtu: %s: out of range for this device (%s): %w", op, rangeText(l.min, l.max), err)
	case errors.Is(err, unix.EPERM):
		return fmt.Errorf("mtu: %s: %w (rdmad needs CAP_NET_ADMIN; check CapabilityBoundingSet= in rdmad.service)", op, err)
	case errors.Is(err, unix.ENODEV):
		return fmt.Errorf("mtu: %s: interface disappeared: %w", op, err)
	}
	return fmt.Errorf("mtu: %s: %w", op, err)
}

// setMTU sends RTM_SETLINK with IFLA_MTU for the interface index and waits
// for the kernel's acknowledgement; a refusal is its errno (kernelError).
func (c *Client) setMTU(index, mtu int) error {
	ae := netlink.NewAttributeEncoder()
	ae.Uint32(unix.IFLA_MTU, uint32(mtu))
	attrs, err := ae.Encode()
	if err != nil {
		return err
	}
	req := make([]byte, unix.SizeofIfInfomsg)
	putIfIndex(req, index)
	_, err = c.execute(netlink.Message{
		Header: netlink.Header{Type: unix.RTM_SETLINK, Flags: netlink.Request | netlink.Acknowledge},
		Data:   append(req, attrs...),
	})
	return kernelError(err)
}

// requestTimeout bounds one request on the kept socket: the reconciler
// runs on rdmad's main loop, which a kernel that never answers must not
// hang (its watchdog would kill rdmad).
const requestTimeout = 5 * time.Second

// execute sends m and waits for the kernel's answer, at most
// requestTimeout.
func (c *Client) execute(m netlink.Message) ([]netlink.Message, error) {
	// The tests' scripted kernel has no deadlines (setDeadline nil).
	if c.setDeadline != nil {
		if err := c.setDeadline(time.Now().Add(requestTimeout)); err != nil {
			return nil, err
		}
	}
	return c.conn.Execute(m)
}

func rangeText(lo, hi int) string {
	if hi == 0 {
		return fmt.Sprintf("min %d, no maximum", lo)
	}
	return fmt.Sprintf("min %d, max %d", lo, hi)
}

// Range returns the MTU range the kernel enforces for ifname
// (IFLA_MIN_MTU, IFLA_MAX_MTU). A maximum of 0 means no upper limit; both 0
// means the kernel did not report a range (kernels before 4.19).
func (c *Client) Range(ifname string) (lo, hi int, err error) {
	l, err := c.link("read MTU range", ifname)
	if err != nil {
		return 0, 0, err
	}
	return l.min, l.max, nil
}

func putIfIndex(ifinfomsg []byte, index int) {
	nlenc.NativeEndian().PutUint32(ifinfomsg[4:8], uint32(int32(index)))
}

// parseLink reads IFLA_MTU, IFLA_MIN_MTU and IFLA_MAX_MTU from link
// attributes.
func parseLink(attrs []byte) (link, error) {
	var l link
	ad, err := netlink.NewAttributeDecoder(attrs)
	if err != nil {
		return link{}, fmt.Errorf("mtu: decode link attributes: %w", err)
	}
	for ad.Next() {
		switch ad.Type() {
		case unix.IFLA_MTU:
			l.mtu = int(ad.Uint32())
		case unix.IFLA_MIN_MTU:
			l.min = int(ad.Uint32())
		case unix.IFLA_MAX_MTU:
			l.max = int(ad.Uint32())
		}
	}
	if err := ad.Err(); err != nil {
		return link{}, fmt.Errorf("mtu: decode link attributes: %w", err)
	}
	return l, nil
}
