package qos

import (
	"encoding/binary"
	"fmt"
	"slices"
	"syscall"
	"testing"

	"github.com/mdlayher/netlink"
	"github.com/mdlayher/netlink/nltest"

	"github.com/rdmad/rdmad/policy/dcb"
)

// fakeDCB models the kernel side of dcbnl for one netdev whose driver has
// DCB ops, as net/dcb/dcbnl.c does with the default APP list helpers
// (dcb_ieee_setapp / dcb_ieee_delapp). It exists because no netdev with
// dcbnl_ops can be created on this machine or in the Soft-RoCE VM: veth,
// virtio-net and rxe have none, so the success paths of Apply cannot reach
// a real driver here. The error paths are tested against the real kernel
// in integration_test.go.
type fakeDCB struct {
	ifname string
	pfc    *dcb.PFC  // nil: driver has no ieee_getpfc/ieee_setpfc
	ets    []byte    // struct ieee_ets; nil: no ieee_getets/ieee_setets
	apps   []dcb.App // newest first, like dcb_app_list
	trust  []uint8   // nil: no dcbnl_getapptrust/setapptrust
	// setappErr, if set, is what the driver's ieee_setapp returns.
	setappErr syscall.Errno

	requests int
}

var native = binary.NativeEndian

func (f *fakeDCB) conn(t *testing.T) *dcb.Conn {
	t.Helper()
	c := dcb.NewConn(nltest.Dial(f.handle))
	t.Cleanup(func() { c.Close() })
	return c
}

func (f *fakeDCB) handle(reqs []netlink.Message) ([]netlink.Message, error) {
	f.requests++
	req := reqs[0]
	if len(req.Data) < 4 {
		return nltest.Error(int(syscall.EINVAL), reqs)
	}
	cmd := req.Data[1]
	ad, err := netlink.NewAttributeDecoder(req.Data[4:])
	if err != nil {
		return nil, err
	}
	var ifname string
	var ieee []byte
	for ad.Next() {
		switch ad.Type() {
		case 1: // DCB_ATTR_IFNAME
			ifname = ad.String()
		case 13: // DCB_ATTR_IEEE
			ieee = ad.Bytes()
		}
	}
	if err := ad.Err(); err != nil {
		return nil, err
	}
	if ifname != f.ifname {
		return nltest.Error(int(syscall.ENODEV), reqs)
	}
	var body []byte
	switch {
	case cmd == 21 && req.Header.Type == 78: // DCB_CMD_IEEE_GET, RTM_GETDCB
		body = f.fill()
	case cmd == 20 && req.Header.Type == 79: // DCB_CMD_IEEE_SET, RTM_SETDCB
		body = status(f.set(ieee))
	case cmd == 27 && req.Header.Type == 79: // DCB_CMD_IEEE_DEL
		body = status(f.del(ieee))
	default:
		return nltest.Error(int(syscall.EOPNOTSUPP), reqs)
	}
	return []netlink.Message{{
		Header: netlink.Header{Type: req.Header.Type, Sequence: req.Header.Sequence, PID: req.Header.PID},
		Data:   append([]byte{0, cmd, 0, 0}, body...),
	}}, nil
}

// status is dcbnl_ieee_set's reply: DCB_ATTR_IEEE u8 holding the return
// code truncated to 8 bits.
func status(errno syscall.Errno) []byte {
	ae := netlink.NewAttributeEncoder()
	ae.Uint8(13, uint8(-int(errno)))
	b, _ := ae.Encode()
	return b
}

func (f *fakeDCB) fill() []byte {
	ae := netlink.NewAttributeEncoder()
	ae.String(1, f.ifname)
	ae.Do(13, func() ([]byte, error) {
		nae := netlink.NewAttributeEncoder()
		if f.ets != nil {
			nae.Bytes(1, f.ets) // DCB_ATTR_IEEE_ETS
		}
		if f.pfc != nil {
			nae.Bytes(2, marshalPFC(*f.pfc))
		}
		nae.Do(3, func() ([]byte, error) {
			apps := netlink.NewAttributeEncoder()
			for _, a := range f.apps {
				typ := uint16(1)
				if a.Selector == dcb.SelectorPCP {
					typ = 2
				}
				apps.Bytes(typ, []byte{a.Selector, a.Priority, byte(a.Protocol), byte(a.Protocol >> 8)})
			}
			b, err := apps.Encode()
			return append([]byte{}, b...), err
		})
		if f.trust != nil {
			nae.Do(11, func() ([]byte, error) {
				tr := netlink.NewAttributeEncoder()
				for _, s := range f.trust {
					typ := uint16(1)
					if s == dcb.SelectorPCP {
						typ = 2
					}
					tr.Uint8(typ, s)
				}
				b, err := tr.Encode()
				return append([]byte{}, b...), err
			})
		}
		return nae.Encode()
	})
	b, _ := ae.Encode()
	return b
}

func marshalPFC(p dcb.PFC) []byte {
	b := make([]byte, 136) // sizeof(struct ieee_pfc), checked in package dcb
	b[0], b[1], b[2] = p.Cap, p.Enabled, p.MBC
	native.PutUint16(b[4:], p.Delay)
	return b
}

func parseApps(b []byte) ([]dcb.App, error) {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return nil, err
	}
	var apps []dcb.App
	for ad.Next() {
		d := ad.Bytes()
		if len(d) < 4 {
			return nil, fmt.Errorf("short dcb_app")
		}
		apps = append(apps, dcb.App{Selector: d[0], Priority: d[1], Protocol: native.Uint16(d[2:])})
	}
	return apps, ad.Err()
}

func (f *fakeDCB) set(ieee []byte) syscall.Errno {
	ad, err := netlink.NewAttributeDecoder(ieee)
	if err != nil {
		return syscall.EINVAL
	}
	for ad.Next() {
		switch ad.Type() {
		case 1: // DCB_ATTR_IEEE_ETS: validated as mlx5e_dbcnl_validate_ets does
			if f.ets == nil {
				continue // ignored without ieee_setets, as dcbnl does
			}
			d := ad.Bytes()
			if len(d) < 59 {
				return syscall.EINVAL
			}
			sum := 0
			for tc := range 8 {
				if d[19+tc] == 2 { // tc_tsa ETS
					sum += int(d[3+tc]) // tc_tx_bw
				}
				if d[27+tc] >= d[1] { // prio_tc beyond ets_cap
					return syscall.EINVAL
				}
			}
			if sum != 100 {
				return syscall.EINVAL
			}
			f.ets = slices.Clone(d[:59])
		case 2: // DCB_ATTR_IEEE_PFC; ignored without ieee_setpfc, as dcbnl does
			if f.pfc != nil {
				d := ad.Bytes()
				if len(d) < 136 {
					return syscall.EINVAL
				}
				f.pfc.Enabled = d[1]
			}
		case 3: // DCB_ATTR_IEEE_APP_TABLE: stop at the first failing entry
			apps, err := parseApps(ad.Bytes())
			if err != nil {
				return syscall.ERANGE
			}
			for _, a := range apps {
				if f.setappErr != 0 {
					return f.setappErr
				}
				if slices.Contains(f.apps, a) {
					return syscall.EEXIST
				}
				f.apps = append([]dcb.App{a}, f.apps...)
			}
		case 11: // DCB_ATTR_DCB_APP_TRUST_TABLE
			if f.trust == nil {
				return syscall.EOPNOTSUPP
			}
			tad, err := netlink.NewAttributeDecoder(ad.Bytes())
			if err != nil {
				return syscall.EINVAL
			}
			trust := []uint8{}
			for tad.Next() {
				trust = append(trust, tad.Uint8())
			}
			if tad.Err() != nil {
				return syscall.EINVAL
			}
			f.trust = trust
		}
	}
	return 0
}

func (f *fakeDCB) del(ieee []byte) syscall.Errno {
	ad, err := netlink.NewAttributeDecoder(ieee)
	if err != nil {
		return syscall.EINVAL
	}
	for ad.Next() {
		if ad.Type() != 3 {
			continue
		}
		apps, err := parseApps(ad.Bytes())
		if err != nil {
			return syscall.ERANGE
		}
		for _, a := range apps {
			i := slices.Index(f.apps, a)
			if i < 0 {
				return syscall.ENOENT
			}
			f.apps = slices.Delete(f.apps, i, i+1)
		}
	}
	return 0
}
