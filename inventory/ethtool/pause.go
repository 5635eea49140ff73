package ethtool

import (
	"errors"
	"fmt"

	"github.com/mdlayher/genetlink"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Pause is a netdev's link-level (IEEE 802.3x) pause state and statistics,
// as `ethtool -I -a` prints them. Per-priority (PFC) pause frames are not
// here: drivers count them among their ethtool -S statistics
// (rx_prioN_pause, ...).
type Pause struct {
	// Ifindex and Netdev are the reply header's.
	Ifindex int
	Netdev  string
	// Autoneg, RX and TX are the pause settings: pause autonegotiation,
	// honouring received pause frames, sending them.
	Autoneg, RX, TX bool
	// TXFrames and RXFrames count the pause frames sent and received; a
	// driver without pause statistics (no get_pause_stats) reports none,
	// and then HasTXFrames and HasRXFrames are false.
	TXFrames, RXFrames       uint64
	HasTXFrames, HasRXFrames bool
}

// Pause reads netdev's pause settings and statistics (ETHTOOL_MSG_PAUSE_GET
// with ETHTOOL_FLAG_STATS). A driver without pause parameters gives an
// *Error that matches errors.ErrUnsupported.
func (r *Reader) Pause(netdev string) (Pause, error) {
	if err := checkName(netdev); err != nil {
		return Pause{}, err
	}
	if r.famErr != nil {
		return Pause{}, &Error{Netdev: netdev, Op: opPause, Err: r.famErr}
	}
	p, err := r.pauseGet(netdev, flagStats)
	if errors.Is(err, unix.EOPNOTSUPP) {
		// Kernels before 5.11 do not know ETHTOOL_FLAG_STATS and refuse
		// it as they refuse a driver without pause parameters: ask once
		// more without it to tell the two apart.
		if p2, err2 := r.pauseGet(netdev, 0); err2 == nil {
			return p2, nil
		}
	}
	if err != nil {
		return Pause{}, &Error{Netdev: netdev, Op: opPause, Err: err}
	}
	return p, nil
}

func (r *Reader) pauseGet(netdev string, flags uint32) (Pause, error) {
	req, err := pauseRequest(netdev, flags)
	if err != nil {
		return Pause{}, err
	}
	msgs, err := r.gc.Execute(genetlink.Message{
		Header: genetlink.Header{Command: msgPauseGet, Version: r.family.Version},
		Data:   req,
	}, r.family.ID, netlink.Request)
	if err != nil {
		return Pause{}, err
	}
	if len(msgs) != 1 {
		return Pause{}, fmt.Errorf("%d replies to ETHTOOL_MSG_PAUSE_GET, want 1", len(msgs))
	}
	if c := msgs[0].Header.Command; c != msgPauseGetReply {
		return Pause{}, fmt.Errorf("reply command %d to ETHTOOL_MSG_PAUSE_GET, want ETHTOOL_MSG_PAUSE_GET_REPLY (%d)", c, msgPauseGetReply)
	}
	p, err := decodePause(msgs[0].Data)
	if err != nil {
		return Pause{}, err
	}
	if p.Netdev != "" && p.Netdev != netdev {
		return Pause{}, fmt.Errorf("the kernel answered for %s", p.Netdev)
	}
	return p, nil
}

// pauseRequest encodes the attributes of ETHTOOL_MSG_PAUSE_GET for netdev.
func pauseRequest(netdev string, flags uint32) ([]byte, error) {
	ae := netlink.NewAttributeEncoder()
	ae.Nested(attrPauseHeader, func(nae *netlink.AttributeEncoder) error {
		nae.String(attrHeaderDevName, netdev)
		if flags != 0 {
			nae.Uint32(attrHeaderFlags, flags)
		}
		return nil
	})
	return ae.Encode()
}

// decodePause decodes the attributes of ETHTOOL_MSG_PAUSE_GET_REPLY (the
// generic netlink payload). Attributes it does not know (newer kernels'
// ETHTOOL_A_PAUSE_STATS_SRC) are skipped, and so is the padding attribute
// that 64-bit values get on architectures without efficient unaligned
// access. A statistic the driver does not count is absent from the reply.
func decodePause(b []byte) (Pause, error) {
	var p Pause
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return Pause{}, fmt.Errorf("decode ETHTOOL_MSG_PAUSE_GET_REPLY: %w", err)
	}
	for ad.Next() {
		switch ad.Type() {
		case attrPauseHeader:
			ad.Nested(func(nad *netlink.AttributeDecoder) error {
				for nad.Next() {
					switch nad.Type() {
					case attrHeaderDevIndex:
						p.Ifindex = int(nad.Uint32())
					case attrHeaderDevName:
						p.Netdev = nad.String()
					}
				}
				return nad.Err()
			})
		case attrPauseAutoneg:
			p.Autoneg = ad.Uint8() != 0
		case attrPauseRX:
			p.RX = ad.Uint8() != 0
		case attrPauseTX:
			p.TX = ad.Uint8() != 0
		case attrPauseStats:
			ad.Nested(func(nad *netlink.AttributeDecoder) error {
				for nad.Next() {
					switch nad.Type() {
					case attrPauseStatTXFrames:
						p.TXFrames, p.HasTXFrames = nad.Uint64(), true
					case attrPauseStatRXFrames:
						p.RXFrames, p.HasRXFrames = nad.Uint64(), true
					case attrPauseStatPad:
						// Alignment only: no data.
					}
				}
				return nad.Err()
			})
		}
	}
	if err := ad.Err(); err != nil {
		return Pause{}, fmt.Errorf("decode ETHTOOL_MSG_PAUSE_GET_REPLY: %w", err)
	}
	return p, nil
}
