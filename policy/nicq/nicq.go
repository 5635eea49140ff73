// Package nicq applies rdmad's NIC queue policy for one netdev over ethtool
// netlink: ring sizes (ETHTOOL_MSG_RINGS_*, `ethtool -g/-G`), channel
// counts (ETHTOOL_MSG_CHANNELS_*, `ethtool -l/-L`) and interrupt
// coalescing (ETHTOOL_MSG_COALESCE_*, `ethtool -c/-C`).
//
// Each of the three is a Group of named parameters. The reconciler calls
// Get (the values and, for rings and channels, the driver's maximums),
// Plan (pure: what differs, and whether the wanted values are within the
// driver's limits), then Set with the values that differ. A SET request
// carries only the parameters that change: the kernel leaves the others
// as they are.
//
// # Unsupported devices
//
// A driver without the ethtool operation (veth has no rings and no
// coalescing) answers EOPNOTSUPP, and a driver that does not report a
// parameter leaves its attribute out of the reply. Both satisfy
// IsUnsupported: a steady state of the device, reported once, not an
// error to retry.
package nicq

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"

	"github.com/mdlayher/genetlink"
	"github.com/mdlayher/netlink"

	"github.com/rdmad/rdmad/inventory/ethtool"
)

// A Param is one parameter of a Group.
type Param struct {
	// Name is the parameter as the configuration spells it ("rx",
	// "rx_usecs", "adaptive_rx").
	Name string
	// Flag marks an on/off parameter (a u8 attribute); the others are u32.
	Flag bool
	attr uint16
	// maxAttr is the attribute with the driver's maximum, 0 for none.
	maxAttr uint16
}

// A Group is one ethtool message pair and its parameters.
type Group struct {
	// Kind names the group in status and configuration: "rings",
	// "channels" or "coalesce".
	Kind string
	// What is the group in an operator's words, for errors.
	What string
	// Tool is the ethtool command that shows the same, for hints.
	Tool   string
	Params []Param

	get, getReply, set uint8
}

// The groups.
var (
	Rings = &Group{Kind: "rings", What: "ring sizes", Tool: "ethtool -g", get: msgRingsGet, getReply: msgRingsGetReply, set: msgRingsSet,
		Params: []Param{{Name: "rx", attr: attrRingsRX, maxAttr: attrRingsRXMax}, {Name: "tx", attr: attrRingsTX, maxAttr: attrRingsTXMax}}}
	Channels = &Group{Kind: "channels", What: "channel counts", Tool: "ethtool -l", get: msgChannelsGet, getReply: msgChannelsGetReply, set: msgChannelsSet,
		Params: []Param{
			{Name: "combined", attr: attrChannelsCombined, maxAttr: attrChannelsCombinedMax},
			{Name: "rx", attr: attrChannelsRX, maxAttr: attrChannelsRXMax},
			{Name: "tx", attr: attrChannelsTX, maxAttr: attrChannelsTXMax},
		}}
	Coalesce = &Group{Kind: "coalesce", What: "interrupt coalescing", Tool: "ethtool -c", get: msgCoalesceGet, getReply: msgCoalesceGetReply, set: msgCoalesceSet,
		Params: []Param{
			{Name: "rx_usecs", attr: attrCoalesceRXUsecs},
			{Name: "tx_usecs", attr: attrCoalesceTXUsecs},
			{Name: "adaptive_rx", Flag: true, attr: attrCoalesceAdaptiveRX},
			{Name: "adaptive_tx", Flag: true, attr: attrCoalesceAdaptiveTX},
		}}
)

// Groups lists the groups in the order the reconciler visits them.
var Groups = []*Group{Rings, Channels, Coalesce}

// Param returns g's parameter called name.
func (g *Group) Param(name string) (Param, bool) {
	for _, p := range g.Params {
		if p.Name == name {
			return p, true
		}
	}
	return Param{}, false
}

// Values are parameter values by name; a flag is 0 or 1. In a desired
// Values a parameter that is absent is left as the device has it.
type Values map[string]uint32

// Format renders v in g's parameter order ("rx=4096 tx=1024",
// "adaptive_rx=on").
func (g *Group) Format(v Values) string {
	var parts []string
	for _, p := range g.Params {
		n, ok := v[p.Name]
		if !ok {
			continue
		}
		s := strconv.FormatUint(uint64(n), 10)
		if p.Flag {
			s = "off"
			if n != 0 {
				s = "on"
			}
		}
		parts = append(parts, p.Name+"="+s)
	}
	return strings.Join(parts, " ")
}

// State is what a *_GET reply says of a netdev: the values of the
// parameters the driver reports, and the maximums it reports.
type State struct {
	Values Values
	Max    Values
}

// ErrUnsupported is wrapped by errors about a driver that cannot do what
// is asked.
var ErrUnsupported = errors.New("not supported by the driver")

// IsUnsupported reports whether err says the driver cannot get or set
// the group or parameter: EOPNOTSUPP or ErrUnsupported. Like qos's, it is
// the target's steady state, not a failure to retry.
func IsUnsupported(err error) bool {
	return errors.Is(err, ErrUnsupported) || errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, errors.ErrUnsupported)
}

// An OpError is a failed ethtool netlink request.
type OpError struct {
	Op     string // "get ring sizes", "set channel counts"
	Ifname string
	Err    error
}

func (e *OpError) Error() string {
	s := fmt.Sprintf("nicq: %s of %s: %v", e.Op, e.Ifname, e.Err)
	var oe *netlink.OpError
	if errors.As(e.Err, &oe) && oe.Message != "" {
		// The kernel's extended ack says which value it refused; the
		// netlink error's own text buries it after an offset.
		s = fmt.Sprintf("nicq: %s of %s: %v (kernel: %s)", e.Op, e.Ifname, oe.Err, oe.Message)
	}
	return s
}

// Unwrap returns the cause.
func (e *OpError) Unwrap() error { return e.Err }

// A Conn speaks ethtool netlink's ring, channel and coalescing messages.
// It is not safe for concurrent use (the reconciler owns it).
type Conn struct {
	gc     *genetlink.Conn
	family genetlink.Family
}

// Dial opens a generic netlink socket in the network namespace netns (a
// file descriptor; 0 is the caller's) and looks up the ethtool family.
func Dial(netns int) (*Conn, error) {
	gc, err := genetlink.Dial(&netlink.Config{NetNS: netns})
	if err != nil {
		return nil, fmt.Errorf("nicq: open a generic netlink socket: %w", err)
	}
	// The extended ack carries the kernel's reason for a refusal
	// ("requested channel count exceeds maximum").
	if err := gc.SetOption(netlink.ExtendedAcknowledge, true); err != nil {
		gc.Close()
		return nil, fmt.Errorf("nicq: enable netlink extended acks: %w", err)
	}
	return NewConn(gc)
}

// NewConn returns a Conn over an open generic netlink connection (tests
// pass genltest's), looking up the ethtool family; it closes gc on
// failure.
func NewConn(gc *genetlink.Conn) (*Conn, error) {
	f, err := ethtool.Family(gc)
	if err != nil {
		gc.Close()
		return nil, fmt.Errorf("nicq: %w", err)
	}
	return &Conn{gc: gc, family: f}, nil
}

// Close closes the socket.
func (c *Conn) Close() error { return c.gc.Close() }

func header(ifname string) func(*netlink.AttributeEncoder) error {
	return func(nae *netlink.AttributeEncoder) error {
		nae.String(attrHeaderDevName, ifname)
		return nil
	}
}

// getRequest encodes the attributes of g's *_GET for ifname.
func getRequest(ifname string) ([]byte, error) {
	ae := netlink.NewAttributeEncoder()
	ae.Nested(attrHeader, header(ifname))
	return ae.Encode()
}

// setRequest encodes the attributes of g's *_SET: the header and the
// parameters in v, in g's order.
func setRequest(g *Group, ifname string, v Values) ([]byte, error) {
	ae := netlink.NewAttributeEncoder()
	ae.Nested(attrHeader, header(ifname))
	for _, p := range g.Params {
		n, ok := v[p.Name]
		if !ok {
			continue
		}
		if p.Flag {
			ae.Uint8(p.attr, uint8(min(n, 1)))
		} else {
			ae.Uint32(p.attr, n)
		}
	}
	return ae.Encode()
}

// decodeReply decodes the attributes of g's *_GET_REPLY.
func decodeReply(g *Group, b []byte) (State, error) {
	st := State{Values: Values{}, Max: Values{}}
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return State{}, err
	}
	for ad.Next() {
		for _, p := range g.Params {
			switch ad.Type() {
			case p.attr:
				if p.Flag {
					st.Values[p.Name] = uint32(ad.Uint8())
				} else {
					st.Values[p.Name] = ad.Uint32()
				}
			case p.maxAttr:
				if p.maxAttr != 0 {
					st.Max[p.Name] = ad.Uint32()
				}
			}
		}
	}
	return st, ad.Err()
}

// Get reads g's parameters of ifname.
func (c *Conn) Get(g *Group, ifname string) (State, error) {
	op := "get " + g.What
	req, err := getRequest(ifname)
	if err != nil {
		return State{}, &OpError{Op: op, Ifname: ifname, Err: err}
	}
	msgs, err := c.gc.Execute(genetlink.Message{
		Header: genetlink.Header{Command: g.get, Version: c.family.Version},
		Data:   req,
	}, c.family.ID, netlink.Request)
	if err != nil {
		return State{}, &OpError{Op: op, Ifname: ifname, Err: err}
	}
	if len(msgs) != 1 || msgs[0].Header.Command != g.getReply {
		return State{}, &OpError{Op: op, Ifname: ifname, Err: fmt.Errorf("unexpected reply: %d messages, want one of command %d", len(msgs), g.getReply)}
	}
	st, err := decodeReply(g, msgs[0].Data)
	if err != nil {
		return State{}, &OpError{Op: op, Ifname: ifname, Err: fmt.Errorf("decode reply: %w", err)}
	}
	return st, nil
}

// Set writes the parameters in v to ifname; the others stay as they are.
func (c *Conn) Set(g *Group, ifname string, v Values) error {
	op := "set " + g.What
	req, err := setRequest(g, ifname, v)
	if err == nil {
		_, err = c.gc.Execute(genetlink.Message{
			Header: genetlink.Header{Command: g.set, Version: c.family.Version},
			Data:   req,
		}, c.family.ID, netlink.Request|netlink.Acknowledge)
	}
	if err != nil {
		return &OpError{Op: op, Ifname: ifname, Err: err}
	}
	return nil
}

// Plan returns the parameters of want that differ from st, to pass to
// Set, and nil when st already has them. It fails when the driver does
// not report a wanted parameter (IsUnsupported) and when a value is
// beyond the maximum the driver reports, naming the limit.
func Plan(g *Group, ifname string, want Values, st State) (Values, error) {
	diff := Values{}
	for _, p := range g.Params {
		w, ok := want[p.Name]
		if !ok {
			continue
		}
		have, ok := st.Values[p.Name]
		if !ok {
			return nil, fmt.Errorf("nicq: %s %s of %s: %w (the driver reports no such value; %s %s shows n/a or nothing); leave %s out of [policy.%s]",
				g.Kind, p.Name, ifname, ErrUnsupported, g.Tool, ifname, p.Name, g.Kind)
		}
		if max, ok := st.Max[p.Name]; ok && p.maxAttr != 0 && w > max {
			return nil, fmt.Errorf("nicq: %s %s of %s: %d is beyond the driver's maximum %d (%s %s: pre-set maximums); use at most %d",
				g.Kind, p.Name, ifname, w, max, g.Tool, ifname, max)
		}
		if p.Flag {
			w = min(w, 1)
			have = min(have, 1)
		}
		if w != have {
			diff[p.Name] = w
		}
	}
	if len(diff) == 0 {
		return nil, nil
	}
	return diff, nil
}

// Actual renders st's values of the parameters in want, for status.
func (g *Group) Actual(want Values, st State) string {
	v := Values{}
	for name := range want {
		if n, ok := st.Values[name]; ok {
			v[name] = n
		}
	}
	return g.Format(v)
}
