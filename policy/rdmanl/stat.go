package rdmanl

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"syscall"

	"github.com/mdlayher/netlink"
)

// The statistics part of the kernel ABI, from <rdma/rdma_netlink.h>;
// TestConstantsMatchHeader compares them with the installed header.
const (
	cmdStatSet       = 16 // RDMA_NLDEV_CMD_STAT_SET
	cmdStatGet       = 17 // RDMA_NLDEV_CMD_STAT_GET
	cmdStatGetStatus = 24 // RDMA_NLDEV_CMD_STAT_GET_STATUS (Linux 5.18)

	attrPortIndex          = 3  // RDMA_NLDEV_ATTR_PORT_INDEX, u32
	attrResQP              = 19 // RDMA_NLDEV_ATTR_RES_QP: the value of STAT_RES for QP counters
	attrStatMode           = 74 // RDMA_NLDEV_ATTR_STAT_MODE, u32 (enum rdma_nl_counter_mode)
	attrStatRes            = 75 // RDMA_NLDEV_ATTR_STAT_RES, u32
	attrStatAutoModeMask   = 76 // RDMA_NLDEV_ATTR_STAT_AUTO_MODE_MASK, u32 (enum rdma_nl_counter_mask)
	attrStatHWCounters     = 80 // RDMA_NLDEV_ATTR_STAT_HWCOUNTERS, nested
	attrStatHWCounterEntry = 81 // RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY, nested
	attrStatHWCounterName  = 82 // RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_NAME, string
	attrStatHWCounterIndex = 94 // RDMA_NLDEV_ATTR_STAT_HWCOUNTER_INDEX, u32
	attrStatHWCounterDyn   = 95 // RDMA_NLDEV_ATTR_STAT_HWCOUNTER_DYNAMIC, u8: an optional counter, and whether it is on

	counterModeNone   = 0 // RDMA_COUNTER_MODE_NONE
	counterModeAuto   = 1 // RDMA_COUNTER_MODE_AUTO
	counterModeManual = 2 // RDMA_COUNTER_MODE_MANUAL
	counterMaskQPType = 1 // RDMA_COUNTER_MASK_QP_TYPE
	counterMaskPID    = 2 // RDMA_COUNTER_MASK_PID
)

// QP counter modes of a port, as [policy.rdma] qp_counters and the
// targets spell them.
const (
	QPCountersAuto   = "auto"   // auto mode by QP type (`rdma statistic qp set link X auto type on`)
	QPCountersOff    = "off"    // no automatic binding (`auto off`): RDMA_COUNTER_MODE_NONE
	QPCountersManual = "manual" // QPs bound to counters by hand (`rdma statistic qp bind`)
)

// A Counter is one hardware counter of a port, as
// RDMA_NLDEV_CMD_STAT_GET_STATUS lists it.
type Counter struct {
	Name  string
	Index uint32
	// Optional counters are off until enabled (`rdma statistic set link
	// ... optional-counters`); Enabled says whether this one is on. The
	// others are always on.
	Optional, Enabled bool
}

// portAttrs encodes the attributes that name a port.
func portAttrs(ae *netlink.AttributeEncoder, dev Device, port uint32) {
	ae.Uint32(attrDevIndex, dev.Index)
	ae.Uint32(attrPortIndex, port)
}

// getStatusRequest encodes RDMA_NLDEV_CMD_STAT_GET_STATUS's attributes.
func getStatusRequest(dev Device, port uint32) ([]byte, error) {
	ae := netlink.NewAttributeEncoder()
	portAttrs(ae, dev, port)
	return ae.Encode()
}

// decodeCounters decodes a STAT_GET_STATUS reply's counter table.
func decodeCounters(b []byte) ([]Counter, error) {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return nil, err
	}
	var out []Counter
	found := false
	for ad.Next() {
		if ad.Type() != attrStatHWCounters {
			continue
		}
		found = true
		ad.Nested(func(tab *netlink.AttributeDecoder) error {
			for tab.Next() {
				if tab.Type() != attrStatHWCounterEntry {
					continue
				}
				var c Counter
				hasName, hasIndex := false, false
				tab.Nested(func(e *netlink.AttributeDecoder) error {
					for e.Next() {
						switch e.Type() {
						case attrStatHWCounterName:
							c.Name, hasName = e.String(), true
						case attrStatHWCounterIndex:
							c.Index, hasIndex = e.Uint32(), true
						case attrStatHWCounterDyn:
							c.Optional, c.Enabled = true, e.Uint8() != 0
						}
					}
					return e.Err()
				})
				if tab.Err() == nil && (!hasName || !hasIndex) {
					return errors.New("a counter without name or index")
				}
				out = append(out, c)
			}
			return tab.Err()
		})
	}
	if err := ad.Err(); err != nil {
		return nil, err
	}
	if !found {
		return nil, errors.New("no RDMA_NLDEV_ATTR_STAT_HWCOUNTERS in the reply")
	}
	return out, nil
}

// refused wraps what the kernel answered a statistics command with:
// EOPNOTSUPP, and EINVAL, which is how the RDMA core answers a command it
// does not have (an older kernel) and a port without hardware counters,
// make the setting unsupported (the port is valid: it is from this
// pass's dump). The kernel's words stay in the message.
func refused(err error) error {
	if errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.EINVAL) {
		return fmt.Errorf("%w: %w", ErrUnsupported, err)
	}
	return err
}

// Counters lists the hardware counters of dev's port
// (RDMA_NLDEV_CMD_STAT_GET_STATUS, Linux 5.18 and later), in the kernel's
// order.
func (c *Conn) Counters(dev Device, port uint32) ([]Counter, error) {
	data, err := getStatusRequest(dev, port)
	var msgs []netlink.Message
	if err == nil {
		msgs, err = c.nl.Execute(netlink.Message{Header: netlink.Header{Type: msgType(cmdStatGetStatus), Flags: netlink.Request}, Data: data})
	}
	if err != nil {
		return nil, fmt.Errorf("rdmanl: list the counters of %s/%d (RDMA_NLDEV_CMD_STAT_GET_STATUS): %w", dev.Name, port, refused(err))
	}
	for _, m := range msgs {
		cs, err := decodeCounters(m.Data)
		if err != nil {
			return nil, fmt.Errorf("rdmanl: list the counters of %s/%d (RDMA_NLDEV_CMD_STAT_GET_STATUS): %w", dev.Name, port, err)
		}
		return cs, nil
	}
	return nil, fmt.Errorf("rdmanl: list the counters of %s/%d (RDMA_NLDEV_CMD_STAT_GET_STATUS): no reply", dev.Name, port)
}

// EnabledOptional returns the names of the optional counters that are on,
// sorted.
func EnabledOptional(cs []Counter) []string {
	out := []string{}
	for _, c := range cs {
		if c.Optional && c.Enabled {
			out = append(out, c.Name)
		}
	}
	sort.Strings(out)
	return out
}

// OptionalIndexes maps the names of optional counters to their indexes in
// cs. A name that is not an optional counter of the port is unsupported:
// the error names what the port offers.
func OptionalIndexes(cs []Counter, names []string) ([]uint32, error) {
	byName := map[string]Counter{}
	var offered []string
	for _, c := range cs {
		if c.Optional {
			byName[c.Name] = c
			offered = append(offered, c.Name)
		}
	}
	var missing []string
	out := make([]uint32, 0, len(names))
	for _, n := range names {
		c, ok := byName[n]
		if !ok {
			missing = append(missing, n)
			continue
		}
		out = append(out, c.Index)
	}
	if len(missing) == 0 {
		return out, nil
	}
	if len(offered) == 0 {
		return nil, fmt.Errorf("%w: the driver offers no optional counters on this port (%d counters, all always on)", ErrUnsupported, len(cs))
	}
	sort.Strings(offered)
	return nil, fmt.Errorf("%w: the driver does not offer the optional counter(s) %s on this port; it offers %s", ErrUnsupported, strings.Join(missing, ", "), strings.Join(offered, ", "))
}

// setCountersRequest encodes RDMA_NLDEV_CMD_STAT_SET's attributes that
// make indexes the port's enabled optional counters (every other optional
// counter off), as `rdma statistic set link ... optional-counters` does.
func setCountersRequest(dev Device, port uint32, indexes []uint32) ([]byte, error) {
	ae := netlink.NewAttributeEncoder()
	portAttrs(ae, dev, port)
	ae.Nested(attrStatHWCounters, func(nae *netlink.AttributeEncoder) error {
		for _, i := range indexes {
			nae.Uint32(attrStatHWCounterIndex, i)
		}
		return nil
	})
	return ae.Encode()
}

// statSet sends one RDMA_NLDEV_CMD_STAT_SET. It asks for no
// acknowledgement: the kernel answers a successful STAT_SET with a reply
// message of its own, and an acknowledgement on top would be left in the
// socket for the next request to trip over. An error comes either way.
func (c *Conn) statSet(data []byte) error {
	_, err := c.nl.Execute(netlink.Message{Header: netlink.Header{Type: msgType(cmdStatSet), Flags: netlink.Request}, Data: data})
	return err
}

// SetOptionalCounters enables exactly the optional counters at indexes on
// dev's port (the others off). Counters gives the indexes.
func (c *Conn) SetOptionalCounters(dev Device, port uint32, indexes []uint32) error {
	data, err := setCountersRequest(dev, port, indexes)
	if err == nil {
		err = c.statSet(data)
	}
	if err != nil {
		return fmt.Errorf("rdmanl: set the optional counters of %s/%d (RDMA_NLDEV_CMD_STAT_SET): %w", dev.Name, port, refused(err))
	}
	return nil
}

// qpModeRequest encodes RDMA_NLDEV_CMD_STAT_GET's attributes asking for
// the QP counter mode of a port. The kernel wants STAT_MODE present in
// the request (its value is not read).
func qpModeRequest(dev Device, port uint32) ([]byte, error) {
	ae := netlink.NewAttributeEncoder()
	portAttrs(ae, dev, port)
	ae.Uint32(attrStatRes, attrResQP)
	ae.Uint32(attrStatMode, counterModeNone)
	return ae.Encode()
}

// qpModeString spells a port's QP counter mode and auto mode mask.
func qpModeString(mode, mask uint32) string {
	switch mode {
	case counterModeNone:
		return QPCountersOff
	case counterModeManual:
		return QPCountersManual
	case counterModeAuto:
		if mask == counterMaskQPType {
			return QPCountersAuto
		}
		var by []string
		if mask&counterMaskQPType != 0 {
			by = append(by, "type")
		}
		if mask&counterMaskPID != 0 {
			by = append(by, "pid")
		}
		if rest := mask &^ (counterMaskQPType | counterMaskPID); rest != 0 || len(by) == 0 {
			by = append(by, fmt.Sprintf("%#x", rest))
		}
		return "auto(" + strings.Join(by, ",") + ")"
	}
	return fmt.Sprintf("mode %d", mode)
}

// decodeQPMode decodes a STAT_GET reply to qpModeRequest.
func decodeQPMode(b []byte) (string, error) {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return "", err
	}
	var mode, mask uint32
	hasMode := false
	for ad.Next() {
		switch ad.Type() {
		case attrStatMode:
			mode, hasMode = ad.Uint32(), true
		case attrStatAutoModeMask:
			mask = ad.Uint32()
		}
	}
	if err := ad.Err(); err != nil {
		return "", err
	}
	if !hasMode {
		return "", errors.New("no RDMA_NLDEV_ATTR_STAT_MODE in the reply")
	}
	return qpModeString(mode, mask), nil
}

// QPCounterMode reads the QP counter mode of dev's port
// (RDMA_NLDEV_CMD_STAT_GET, what `rdma statistic qp mode` shows): "auto",
// "off", "manual", or "auto(…)" for an auto mode by other criteria.
func (c *Conn) QPCounterMode(dev Device, port uint32) (string, error) {
	data, err := qpModeRequest(dev, port)
	var msgs []netlink.Message
	if err == nil {
		msgs, err = c.nl.Execute(netlink.Message{Header: netlink.Header{Type: msgType(cmdStatGet), Flags: netlink.Request}, Data: data})
	}
	if err != nil {
		return "", fmt.Errorf("rdmanl: get the QP counter mode of %s/%d (RDMA_NLDEV_CMD_STAT_GET): %w", dev.Name, port, refused(err))
	}
	for _, m := range msgs {
		s, err := decodeQPMode(m.Data)
		if err != nil {
			return "", fmt.Errorf("rdmanl: get the QP counter mode of %s/%d (RDMA_NLDEV_CMD_STAT_GET): %w", dev.Name, port, err)
		}
		return s, nil
	}
	return "", fmt.Errorf("rdmanl: get the QP counter mode of %s/%d (RDMA_NLDEV_CMD_STAT_GET): no reply", dev.Name, port)
}

// setQPAutoRequest encodes RDMA_NLDEV_CMD_STAT_SET's attributes turning
// the QP counter auto mode by QP type on (`auto type on`) or off (`auto
// off`: the kernel goes back to no mode, or manual while QPs are bound).
func setQPAutoRequest(dev Device, port uint32, on bool) ([]byte, error) {
	ae := netlink.NewAttributeEncoder()
	portAttrs(ae, dev, port)
	ae.Uint32(attrStatRes, attrResQP)
	ae.Uint32(attrStatMode, counterModeAuto)
	mask := uint32(0)
	if on {
		mask = counterMaskQPType
	}
	ae.Uint32(attrStatAutoModeMask, mask)
	return ae.Encode()
}

// SetQPCounters sets the QP counter mode of dev's port to QPCountersAuto
// or QPCountersOff. The kernel refuses a change (EBUSY) while QPs are
// bound to counters by hand.
func (c *Conn) SetQPCounters(dev Device, port uint32, mode string) error {
	if mode != QPCountersAuto && mode != QPCountersOff {
		return fmt.Errorf("rdmanl: QP counter mode %q: want %q or %q", mode, QPCountersAuto, QPCountersOff)
	}
	data, err := setQPAutoRequest(dev, port, mode == QPCountersAuto)
	if err == nil {
		err = c.statSet(data)
	}
	if errors.Is(err, syscall.EBUSY) {
		return fmt.Errorf("rdmanl: set the QP counter mode of %s/%d to %s (RDMA_NLDEV_CMD_STAT_SET): %w (QPs are bound to counters by hand: unbind them with rdma statistic qp unbind)", dev.Name, port, mode, err)
	}
	if err != nil {
		return fmt.Errorf("rdmanl: set the QP counter mode of %s/%d to %s (RDMA_NLDEV_CMD_STAT_SET): %w", dev.Name, port, mode, refused(err))
	}
	return nil
}
