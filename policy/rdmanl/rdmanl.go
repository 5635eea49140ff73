// Package rdmanl applies rdmad's RDMA device policy over RDMA netlink
// (NETLINK_RDMA, client RDMA_NL_NLDEV): adaptive interrupt moderation of
// the device's completion queues (RDMA_NLDEV_ATTR_DEV_DIM, what `rdma dev
// set <dev> adaptive-moderation on|off` sets), a port's optional hardware
// counters (`rdma statistic set link <dev>/<port> optional-counters`) and
// its QP counter auto mode (`rdma statistic qp set link <dev>/<port> auto
// type on`), and the subsystem's network namespace mode. The socket is
// opened as inventory/rdmares opens its own (rdmares.Dial).
//
// The DIM setting takes effect for completion queues created afterwards;
// existing ones keep theirs.
package rdmanl

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/mdlayher/netlink"

	"github.com/rdmad/rdmad/inventory/rdmares"
)

// The kernel ABI, from <rdma/rdma_netlink.h>; TestConstantsMatchHeader
// compiles testdata/consts.c against the installed header and compares.
const (
	clientNLDEV  = 5  // RDMA_NL_NLDEV
	cmdGet       = 1  // RDMA_NLDEV_CMD_GET, can dump
	cmdSet       = 2  // RDMA_NLDEV_CMD_SET
	attrDevIndex = 1  // RDMA_NLDEV_ATTR_DEV_INDEX, u32
	attrDevName  = 2  // RDMA_NLDEV_ATTR_DEV_NAME, string
	attrDevDIM   = 84 // RDMA_NLDEV_ATTR_DEV_DIM, u8

	cmdSysGet        = 6  // RDMA_NLDEV_CMD_SYS_GET
	cmdSysSet        = 7  // RDMA_NLDEV_CMD_SYS_SET
	attrSysNetnsMode = 66 // RDMA_NLDEV_SYS_ATTR_NETNS_MODE, u8: 1 shared, 0 exclusive
)

// Network namespace modes of the RDMA subsystem (`rdma system set netns`).
const (
	NetnsShared    = "shared"    // every RDMA device is visible in every net namespace
	NetnsExclusive = "exclusive" // a device belongs to one net namespace
)

// msgType is RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, op).
func msgType(op int) netlink.HeaderType { return netlink.HeaderType(clientNLDEV<<10 + op) }

// A Device is what RDMA_NLDEV_CMD_GET says of one RDMA device.
type Device struct {
	Index uint32
	Name  string
	// HasDIM reports whether the kernel reports adaptive moderation
	// (Linux 5.10 and later); DIM is its value.
	HasDIM bool
	DIM    bool
}

// ErrUnsupported is wrapped when the kernel cannot do what is asked.
var ErrUnsupported = errors.New("not supported by the kernel")

// IsUnsupported reports whether err says the setting cannot be managed on
// this kernel: no RDMA core, or no DIM attribute. Like qos's, a steady
// state, not a failure to retry.
func IsUnsupported(err error) bool {
	return errors.Is(err, ErrUnsupported) || errors.Is(err, rdmares.ErrNoRDMA)
}

// A Conn is an RDMA netlink socket. It is not safe for concurrent use.
type Conn struct{ nl *netlink.Conn }

// Dial opens an RDMA netlink socket.
func Dial() (*Conn, error) {
	nl, err := rdmares.Dial()
	if err != nil {
		return nil, err
	}
	// The kernel's reason for refusing a setting, when it gives one,
	// comes with the error (best effort: an old kernel has none).
	_ = nl.SetOption(netlink.ExtendedAcknowledge, true)
	return NewConn(nl), nil
}

// NewConn returns a Conn over nl (tests pass nltest's).
func NewConn(nl *netlink.Conn) *Conn { return &Conn{nl: nl} }

// Close closes the socket.
func (c *Conn) Close() error { return c.nl.Close() }

// Devices dumps RDMA_NLDEV_CMD_GET: every RDMA device, by name.
func (c *Conn) Devices() (map[string]Device, error) {
	msgs, err := c.nl.Execute(netlink.Message{Header: netlink.Header{Type: msgType(cmdGet), Flags: netlink.Request | netlink.Dump}})
	if err != nil {
		return nil, fmt.Errorf("rdmanl: dump the RDMA devices (RDMA_NLDEV_CMD_GET): %w", err)
	}
	out := make(map[string]Device, len(msgs))
	for _, m := range msgs {
		d, err := decodeDevice(m.Data)
		if err != nil {
			return nil, fmt.Errorf("rdmanl: dump the RDMA devices (RDMA_NLDEV_CMD_GET): %w", err)
		}
		out[d.Name] = d
	}
	return out, nil
}

func decodeDevice(b []byte) (Device, error) {
	var d Device
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return Device{}, err
	}
	var hasIndex bool
	for ad.Next() {
		switch ad.Type() {
		case attrDevIndex:
			d.Index, hasIndex = ad.Uint32(), true
		case attrDevName:
			d.Name = ad.String()
		case attrDevDIM:
			d.HasDIM, d.DIM = true, ad.Uint8() != 0
		}
	}
	if err := ad.Err(); err != nil {
		return Device{}, err
	}
	if !hasIndex || d.Name == "" {
		return Device{}, errors.New("a device without index or name")
	}
	return d, nil
}

// NetnsMode reads the RDMA subsystem's network namespace mode
// (RDMA_NLDEV_CMD_SYS_GET).
func (c *Conn) NetnsMode() (string, error) {
	msgs, err := c.nl.Execute(netlink.Message{Header: netlink.Header{Type: msgType(cmdSysGet), Flags: netlink.Request}})
	if err != nil {
		return "", fmt.Errorf("rdmanl: get the RDMA netns mode (RDMA_NLDEV_CMD_SYS_GET): %w", err)
	}
	for _, m := range msgs {
		ad, err := netlink.NewAttributeDecoder(m.Data)
		if err != nil {
			return "", fmt.Errorf("rdmanl: get the RDMA netns mode: %w", err)
		}
		for ad.Next() {
			if ad.Type() == attrSysNetnsMode {
				if ad.Uint8() != 0 {
					return NetnsShared, nil
				}
				return NetnsExclusive, nil
			}
		}
		if err := ad.Err(); err != nil {
			return "", fmt.Errorf("rdmanl: get the RDMA netns mode: %w", err)
		}
	}
	return "", fmt.Errorf("rdmanl: get the RDMA netns mode: %w: no RDMA_NLDEV_SYS_ATTR_NETNS_MODE in the reply", ErrUnsupported)
}

// setNetnsRequest encodes RDMA_NLDEV_CMD_SYS_SET's attributes.
func setNetnsRequest(mode string) ([]byte, error) {
	ae := netlink.NewAttributeEncoder()
	v := uint8(0)
	if mode == NetnsShared {
		v = 1
	}
	ae.Uint8(attrSysNetnsMode, v)
	return ae.Encode()
}

// SetNetnsMode sets the RDMA subsystem's network namespace mode. The
// kernel refuses a change (EBUSY) while any network namespace other than
// the initial one exists.
func (c *Conn) SetNetnsMode(mode string) error {
	if mode != NetnsShared && mode != NetnsExclusive {
		return fmt.Errorf("rdmanl: netns mode %q: want %q or %q", mode, NetnsShared, NetnsExclusive)
	}
	data, err := setNetnsRequest(mode)
	if err == nil {
		_, err = c.nl.Execute(netlink.Message{Header: netlink.Header{Type: msgType(cmdSysSet), Flags: netlink.Request | netlink.Acknowledge}, Data: data})
	}
	if errors.Is(err, syscall.EBUSY) {
		return fmt.Errorf("rdmanl: set the RDMA netns mode to %s: %w (the kernel changes it only while no network namespace but the initial one exists: set it at boot, before containers start)", mode, err)
	}
	if err != nil {
		return fmt.Errorf("rdmanl: set the RDMA netns mode to %s: %w", mode, err)
	}
	return nil
}

// setDIMRequest encodes RDMA_NLDEV_CMD_SET's attributes for dev.
func setDIMRequest(index uint32, on bool) ([]byte, error) {
	ae := netlink.NewAttributeEncoder()
	ae.Uint32(attrDevIndex, index)
	v := uint8(0)
	if on {
		v = 1
	}
	ae.Uint8(attrDevDIM, v)
	return ae.Encode()
}

// SetDIM turns adaptive moderation of dev on or off.
func (c *Conn) SetDIM(dev Device, on bool) error {
	if !dev.HasDIM {
		return fmt.Errorf("rdmanl: set adaptive moderation of %s: %w: the kernel does not report it (RDMA_NLDEV_ATTR_DEV_DIM, Linux 5.10)", dev.Name, ErrUnsupported)
	}
	data, err := setDIMRequest(dev.Index, on)
	if err == nil {
		_, err = c.nl.Execute(netlink.Message{Header: netlink.Header{Type: msgType(cmdSet), Flags: netlink.Request | netlink.Acknowledge}, Data: data})
	}
	if err != nil {
		return fmt.Errorf("rdmanl: set adaptive moderation of %s: %w", dev.Name, err)
	}
	return nil
}
