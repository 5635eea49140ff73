// Package dcb speaks the kernel's Data Center Bridging netlink interface
// (dcbnl: rtnetlink RTM_GETDCB/RTM_SETDCB, IEEE 802.1Qaz commands) to read
// and change a port's priority flow control, APP table (DSCP to priority)
// and APP trust table.
//
// Netdevs whose driver has no dcbnl support (veth, virtio, most software
// devices) answer every request with EOPNOTSUPP; a missing device answers
// ENODEV. Both are returned wrapped in *OpError, so callers test them with
// errors.Is(err, syscall.EOPNOTSUPP).
package dcb

import (
	"errors"
	"fmt"

	"github.com/mdlayher/netlink"
)

// netlinkRoute is NETLINK_ROUTE; dcbnl lives on the rtnetlink socket.
const netlinkRoute = 0

// An OpError is an error from a dcbnl operation on one netdev. Err is the
// cause, usually a syscall.Errno from the kernel.
type OpError struct {
	Op     string // "get IEEE", "set PFC", "add APP entries", ...
	Ifname string
	Err    error
}

// Error formats e as "dcb: <op> on <ifname>: <cause>".
func (e *OpError) Error() string {
	return "dcb: " + e.Op + " on " + e.Ifname + ": " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *OpError) Unwrap() error { return e.Err }

// A Conn is a dcbnl (rtnetlink RTM_GETDCB/RTM_SETDCB) connection. It is
// safe for concurrent use; requests are serialised on the socket.
type Conn struct {
	c *netlink.Conn
}

// Dial opens a dcbnl connection. cfg may be nil; tests set cfg.NetNS to
// talk to a network namespace they created.
func Dial(cfg *netlink.Config) (*Conn, error) {
	c, err := netlink.Dial(netlinkRoute, cfg)
	if err != nil {
		return nil, fmt.Errorf("dcb: open rtnetlink socket: %w", err)
	}
	return &Conn{c: c}, nil
}

// NewConn wraps an already open rtnetlink connection, such as one from
// nltest.Dial. The Conn takes ownership of c.
func NewConn(c *netlink.Conn) *Conn { return &Conn{c: c} }

// Close closes the connection.
func (c *Conn) Close() error { return c.c.Close() }

// IEEE reads the IEEE DCB state of ifname (DCB_CMD_IEEE_GET): PFC, ETS, the
// APP table and, where the kernel and driver have it, the APP trust table.
func (c *Conn) IEEE(ifname string) (*IEEE, error) {
	const op = "get IEEE"
	req, err := ieeeGetRequest(ifname)
	if err != nil {
		return nil, &OpError{Op: op, Ifname: ifname, Err: err}
	}
	data, err := c.execute(rtmGetDCB, req)
	if err != nil {
		return nil, &OpError{Op: op, Ifname: ifname, Err: err}
	}
	ieee, err := decodeIEEE(data)
	if err != nil {
		return nil, &OpError{Op: op, Ifname: ifname, Err: err}
	}
	return ieee, nil
}

// SetPFC writes ifname's PFC object. The kernel takes the whole struct, so
// callers read it with IEEE first and change Enabled (Requests and
// Indications are ignored by drivers).
func (c *Conn) SetPFC(ifname string, pfc PFC) error {
	req, err := pfcSetRequest(ifname, pfc)
	return c.set("set PFC", ifname, cmdIEEESet, req, err)
}

// SetETS writes ifname's ETS object (DCB_CMD_IEEE_SET with
// DCB_ATTR_IEEE_ETS). The kernel takes the whole struct, so callers read
// it with IEEE first and change PrioTC, TCTSA and TCTxBW; the driver
// validates it (mlx5 refuses shares of its ETS classes that do not sum to
// 100 with EINVAL).
func (c *Conn) SetETS(ifname string, ets ETS) error {
	req, err := etsSetRequest(ifname, ets)
	return c.set("set ETS", ifname, cmdIEEESet, req, err)
}

// AddApps adds entries to ifname's APP table (DCB_CMD_IEEE_SET with
// DCB_ATTR_IEEE_APP_TABLE).
//
// The kernel keeps entries that differ only in priority side by side, and
// fails the whole request with EEXIST at the first entry that already
// exists, leaving the entries before it added. Callers that replace a
// mapping add the new entry and then delete the old one.
func (c *Conn) AddApps(ifname string, apps []App) error {
	req, err := appsRequest(cmdIEEESet, ifname, apps)
	return c.set("add APP entries", ifname, cmdIEEESet, req, err)
}

// DelApps deletes entries from ifname's APP table (DCB_CMD_IEEE_DEL). An
// entry must match selector, protocol and priority; the kernel stops with
// ENOENT at the first entry that does not exist.
func (c *Conn) DelApps(ifname string, apps []App) error {
	req, err := appsRequest(cmdIEEEDel, ifname, apps)
	return c.set("delete APP entries", ifname, cmdIEEEDel, req, err)
}

// SetTrust sets ifname's APP trust table: the selectors (SelectorDSCP,
// SelectorPCP, ...) whose APP entries classify traffic, in order of
// precedence. It needs Linux 6.3+ and a driver with dcbnl_setapptrust;
// otherwise the kernel answers EOPNOTSUPP.
func (c *Conn) SetTrust(ifname string, selectors []uint8) error {
	req, err := trustRequest(ifname, selectors)
	return c.set("set APP trust", ifname, cmdIEEESet, req, err)
}

func (c *Conn) set(op, ifname string, cmd uint8, req []byte, err error) error {
	if err == nil {
		var data []byte
		if data, err = c.execute(rtmSetDCB, req); err == nil {
			err = decodeSetReply(data, cmd)
		}
	}
	if err != nil {
		return &OpError{Op: op, Ifname: ifname, Err: err}
	}
	return nil
}

// execute sends one request and returns the payload of its reply. dcbnl
// answers every request with exactly one message of the request's type,
// or with a netlink error, so no NLM_F_ACK is asked for.
func (c *Conn) execute(typ netlink.HeaderType, payload []byte) ([]byte, error) {
	msgs, err := c.c.Execute(netlink.Message{
		Header: netlink.Header{Type: typ, Flags: netlink.Request},
		Data:   payload,
	})
	if err != nil {
		// Keep the kernel's errno as the cause, without the netlink
		// package's "netlink receive:" prefix, so messages read
		// "dcb: get IEEE on veth0: operation not supported".
		var nerr *netlink.OpError
		if errors.As(err, &nerr) && nerr.Err != nil {
			return nil, nerr.Err
		}
		return nil, err
	}
	for _, m := range msgs {
		if m.Header.Type == typ {
			return m.Data, nil
		}
	}
	return nil, malformed("no message of type %d in reply", typ)
}
