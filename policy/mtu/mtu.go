// Package mtu observes and sets the MTU of network interfaces over
// rtnetlink.
//
// RoCE needs the netdev MTU to fit the RDMA path MTU (e.g. 9000 for a 4096
// byte IB MTU), and a driver reload or VF re-creation resets it. The
// reconciler observes the MTU, compares it with the declared value and sets
// it; this package gives it precise errors, including the device's valid
// range when the kernel rejects a value.
package mtu

import (
	"errors"
	"fmt"

	mdnetlink "github.com/mdlayher/netlink"
	"github.com/mdlayher/netlink/nlenc"
	"github.com/vishvananda/netlink"
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
	h  *netlink.Handle
	ns int // netns fd for the range query, 0 for the caller's
}

// Open returns a Client; Close releases its netlink sockets.
func Open(opts Options) (*Client, error) {
	var (
		h   *netlink.Handle
		err error
		ns  int
	)
	if opts.NetNS != nil {
		h, err = netlink.NewHandleAt(*opts.NetNS)
		ns = int(*opts.NetNS)
	} else {
		h, err = netlink.NewHandle()
	}
	if err != nil {
		return nil, fmt.Errorf("mtu: open rtnetlink: %w", err)
	}
	return &Client{h: h, ns: ns}, nil
}

// Close releases the Client's sockets.
func (c *Client) Close() error {
	c.h.Close()
	return nil
}

func (c *Client) link(op, ifname string) (netlink.Link, error) {
	l, err := c.h.LinkByName(ifname)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			// The library hides the errno; restore it so callers can
			// match unix.ENODEV.
			return nil, fmt.Errorf("mtu: %s: no network interface %q: %w", op, ifname, unix.ENODEV)
		}
		return nil, fmt.Errorf("mtu: %s: look up %s: %w", op, ifname, err)
	}
	return l, nil
}

// Observe returns the current MTU of ifname. A missing interface gives an
// error matching unix.ENODEV.
func (c *Client) Observe(ifname string) (int, error) {
	l, err := c.link("observe MTU", ifname)
	if err != nil {
		return 0, err
	}
	return l.Attrs().MTU, nil
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
	if l.Attrs().MTU == mtu {
		return nil
	}
	err = c.h.LinkSetMTU(l, mtu)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EINVAL):
		lo, hi, rerr := c.Range(ifname)
		if rerr != nil || (lo == 0 && hi == 0) {
			return fmt.Errorf("mtu: %s: the device or its driver rejects this MTU (check the NIC's maximum, e.g. with `ip -d link show %s`): %w", op, ifname, err)
		}
		return fmt.Errorf("mtu: %s: out of range for this device (%s): %w", op, rangeText(lo, hi), err)
	case errors.Is(err, unix.EPERM):
		return fmt.Errorf("mtu: %s: %w (rdmad needs CAP_NET_ADMIN; check CapabilityBoundingSet= in rdmad.service)", op, err)
	case errors.Is(err, unix.ENODEV):
		return fmt.Errorf("mtu: %s: interface disappeared: %w", op, err)
	}
	return fmt.Errorf("mtu: %s: %w", op, err)
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
	// vishvananda/netlink does not decode IFLA_MIN_MTU/IFLA_MAX_MTU, so
	// ask for the link once more and read the attributes ourselves.
	conn, err := mdnetlink.Dial(unix.NETLINK_ROUTE, &mdnetlink.Config{NetNS: c.ns})
	if err != nil {
		return 0, 0, fmt.Errorf("mtu: read MTU range of %s: open rtnetlink: %w", ifname, err)
	}
	defer conn.Close()
	// struct ifinfomsg: family, pad, type, index, flags, change.
	req := make([]byte, unix.SizeofIfInfomsg)
	putIfIndex(req, l.Attrs().Index)
	msgs, err := conn.Execute(mdnetlink.Message{
		Header: mdnetlink.Header{Type: unix.RTM_GETLINK, Flags: mdnetlink.Request},
		Data:   req,
	})
	if err != nil {
		return 0, 0, fmt.Errorf("mtu: read MTU range of %s: %w", ifname, err)
	}
	for _, m := range msgs {
		if m.Header.Type != unix.RTM_NEWLINK || len(m.Data) < unix.SizeofIfInfomsg {
			continue
		}
		return parseRange(m.Data[unix.SizeofIfInfomsg:])
	}
	return 0, 0, fmt.Errorf("mtu: read MTU range of %s: no RTM_NEWLINK in the kernel's answer", ifname)
}

func putIfIndex(ifinfomsg []byte, index int) {
	nlenc.NativeEndian().PutUint32(ifinfomsg[4:8], uint32(int32(index)))
}

// parseRange reads IFLA_MIN_MTU and IFLA_MAX_MTU from link attributes.
func parseRange(attrs []byte) (lo, hi int, err error) {
	ad, err := mdnetlink.NewAttributeDecoder(attrs)
	if err != nil {
		return 0, 0, fmt.Errorf("mtu: decode link attributes: %w", err)
	}
	for ad.Next() {
		switch ad.Type() {
		case unix.IFLA_MIN_MTU:
			lo = int(ad.Uint32())
		case unix.IFLA_MAX_MTU:
			hi = int(ad.Uint32())
		}
	}
	if err := ad.Err(); err != nil {
		return 0, 0, fmt.Errorf("mtu: decode link attributes: %w", err)
	}
	return lo, hi, nil
}
