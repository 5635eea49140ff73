package dcb

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"

	"github.com/mdlayher/netlink"
)

// The kernel writes dcbnl structs with the host's byte order (they are
// copied with nla_put from C structs), so they are read and written in
// native order, as are netlink attribute headers.
var native = binary.NativeEndian

// An App is one entry of a port's APP table (struct dcb_app): traffic that
// matches Selector and Protocol is given the 802.1p Priority. For
// SelectorDSCP, Protocol is the DSCP value 0..63.
type App struct {
	Selector uint8
	Priority uint8
	Protocol uint16
}

// String formats a as "dscp 26 -> prio 3" (or "sel 1 proto 0x8915 -> prio 3").
func (a App) String() string {
	switch a.Selector {
	case SelectorDSCP:
		return fmt.Sprintf("dscp %d -> prio %d", a.Protocol, a.Priority)
	case SelectorPCP:
		return fmt.Sprintf("pcp %d -> prio %d", a.Protocol, a.Priority)
	}
	return fmt.Sprintf("sel %d proto %#x -> prio %d", a.Selector, a.Protocol, a.Priority)
}

// A PFC is the IEEE 802.1Qbb priority flow control object (struct ieee_pfc).
type PFC struct {
	// Cap is the number of priorities that may have PFC enabled at once.
	Cap uint8
	// Enabled is a bitmap: bit n set means PFC is on for priority n.
	Enabled uint8
	// MBC is the MACsec bypass capability bit.
	MBC uint8
	// Delay is the allowance for the link's round-trip delay, in bits.
	Delay uint16
	// Requests and Indications count PFC frames sent and received per
	// priority. They are read-only; the kernel ignores them on set.
	Requests    [maxTCs]uint64
	Indications [maxTCs]uint64
}

// IsEnabled reports whether PFC is enabled for priority prio (0..7).
func (p PFC) IsEnabled(prio int) bool {
	return prio >= 0 && prio < maxTCs && p.Enabled&(1<<prio) != 0
}

// An ETS is the IEEE 802.1Qaz enhanced transmission selection object
// (struct ieee_ets): which traffic class each priority is in, and how the
// classes share the link.
type ETS struct {
	Willing    uint8
	Cap        uint8
	CBS        uint8
	TCTxBW     [maxTCs]uint8
	TCRxBW     [maxTCs]uint8
	TCTSA      [maxTCs]uint8
	PrioTC     [maxTCs]uint8
	TCRecoBW   [maxTCs]uint8
	TCRecoTSA  [maxTCs]uint8
	RecoPrioTC [maxTCs]uint8
}

// An IEEE is a port's IEEE DCB state as returned by DCB_CMD_IEEE_GET.
// Fields the driver does not implement are nil or false.
type IEEE struct {
	Ifname string
	ETS    *ETS
	PFC    *PFC
	// Apps is the port's APP table, in kernel order.
	Apps []App
	// TrustTable reports whether the kernel and driver expose an APP trust
	// table (DCB_ATTR_DCB_APP_TRUST_TABLE, Linux 6.3+ and a driver with
	// dcbnl_getapptrust). Trust then lists the trusted selectors in order of
	// precedence.
	TrustTable bool
	Trust      []uint8
	// DCBX is the DCBX mode bitmap (DCB_CAP_DCBX_*), when HasDCBX.
	HasDCBX bool
	DCBX    uint8
}

func (p PFC) marshal() []byte {
	b := make([]byte, sizeofIEEEPFC)
	b[0], b[1], b[2] = p.Cap, p.Enabled, p.MBC
	native.PutUint16(b[offsetofPFCDelay:], p.Delay)
	for i := range maxTCs {
		native.PutUint64(b[offsetofPFCReqs+8*i:], p.Requests[i])
		native.PutUint64(b[offsetofPFCInds+8*i:], p.Indications[i])
	}
	return b
}

func unmarshalPFC(b []byte) (*PFC, error) {
	if len(b) < sizeofIEEEPFC {
		return nil, fmt.Errorf("ieee_pfc is %d bytes, want %d", len(b), sizeofIEEEPFC)
	}
	p := &PFC{Cap: b[0], Enabled: b[1], MBC: b[2], Delay: native.Uint16(b[offsetofPFCDelay:])}
	for i := range maxTCs {
		p.Requests[i] = native.Uint64(b[offsetofPFCReqs+8*i:])
		p.Indications[i] = native.Uint64(b[offsetofPFCInds+8*i:])
	}
	return p, nil
}

func unmarshalETS(b []byte) (*ETS, error) {
	if len(b) < sizeofIEEEETS {
		return nil, fmt.Errorf("ieee_ets is %d bytes, want %d", len(b), sizeofIEEEETS)
	}
	e := &ETS{Willing: b[0], Cap: b[1], CBS: b[2]}
	copy(e.TCTxBW[:], b[offsetofETSTCTxBW:])
	copy(e.TCRxBW[:], b[offsetofETSTCRxBW:])
	copy(e.TCTSA[:], b[offsetofETSTCTSA:])
	copy(e.PrioTC[:], b[offsetofETSPrioTC:])
	copy(e.TCRecoBW[:], b[offsetofETSRecoBW:])
	copy(e.TCRecoTSA[:], b[offsetofETSRecoTSA:])
	copy(e.RecoPrioTC[:], b[offsetofETSRecoPTC:])
	return e, nil
}

func (e ETS) marshal() []byte {
	b := make([]byte, sizeofIEEEETS)
	b[0], b[1], b[2] = e.Willing, e.Cap, e.CBS
	copy(b[offsetofETSTCTxBW:], e.TCTxBW[:])
	copy(b[offsetofETSTCRxBW:], e.TCRxBW[:])
	copy(b[offsetofETSTCTSA:], e.TCTSA[:])
	copy(b[offsetofETSPrioTC:], e.PrioTC[:])
	copy(b[offsetofETSRecoBW:], e.TCRecoBW[:])
	copy(b[offsetofETSRecoTSA:], e.TCRecoTSA[:])
	copy(b[offsetofETSRecoPTC:], e.RecoPrioTC[:])
	return b
}

func (a App) marshal() []byte {
	b := make([]byte, sizeofDCBApp)
	b[0], b[1] = a.Selector, a.Priority
	native.PutUint16(b[2:], a.Protocol)
	return b
}

func unmarshalApp(b []byte) (App, error) {
	if len(b) < sizeofDCBApp {
		return App{}, fmt.Errorf("dcb_app is %d bytes, want %d", len(b), sizeofDCBApp)
	}
	return App{Selector: b[0], Priority: b[1], Protocol: native.Uint16(b[2:])}, nil
}

// appAttrType is the nested attribute type the kernel uses for an APP (or
// trust) entry with selector sel: DCB_ATTR_DCB_APP for the non-standard PCP
// selector, DCB_ATTR_IEEE_APP otherwise (dcbnl_app_attr_type_get).
func appAttrType(sel uint8) uint16 {
	if sel == SelectorPCP {
		return attrDCBApp
	}
	return attrIEEEApp
}

// dcbMsg returns struct dcbmsg for cmd: family AF_UNSPEC, no padding.
func dcbMsg(cmd uint8) []byte { return []byte{0, cmd, 0, 0} }

// request builds the payload (struct dcbmsg + attributes) of a dcbnl
// request for cmd on ifname. ieee, if non-nil, fills the DCB_ATTR_IEEE nest.
//
// Nests are written without NLA_F_NESTED, as iproute2's dcb tool and the
// kernel's own replies do; dcbnl parses them with the liberal (deprecated)
// parser, which accepts nests with or without the flag.
func request(cmd uint8, ifname string, ieee func(ae *netlink.AttributeEncoder)) ([]byte, error) {
	ae := netlink.NewAttributeEncoder()
	ae.String(attrIfname, ifname)
	if ieee != nil {
		ae.Do(attrIEEE, func() ([]byte, error) {
			nae := netlink.NewAttributeEncoder()
			ieee(nae)
			return nae.Encode()
		})
	}
	attrs, err := ae.Encode()
	if err != nil {
		return nil, err
	}
	return append(dcbMsg(cmd), attrs...), nil
}

func ieeeGetRequest(ifname string) ([]byte, error) {
	return request(cmdIEEEGet, ifname, nil)
}

func pfcSetRequest(ifname string, p PFC) ([]byte, error) {
	return request(cmdIEEESet, ifname, func(ae *netlink.AttributeEncoder) {
		ae.Bytes(attrIEEEPFC, p.marshal())
	})
}

func etsSetRequest(ifname string, e ETS) ([]byte, error) {
	return request(cmdIEEESet, ifname, func(ae *netlink.AttributeEncoder) {
		ae.Bytes(attrIEEEETS, e.marshal())
	})
}

// appsRequest builds DCB_CMD_IEEE_SET or DCB_CMD_IEEE_DEL with an APP table.
func appsRequest(cmd uint8, ifname string, apps []App) ([]byte, error) {
	return request(cmd, ifname, func(ae *netlink.AttributeEncoder) {
		ae.Do(attrIEEEAppTable, func() ([]byte, error) {
			nae := netlink.NewAttributeEncoder()
			for _, a := range apps {
				nae.Bytes(appAttrType(a.Selector), a.marshal())
			}
			return nae.Encode()
		})
	})
}

// trustRequest builds DCB_CMD_IEEE_SET with an APP trust table: one u8
// attribute per selector, in order of precedence (dcbnl_ieee_set).
func trustRequest(ifname string, selectors []uint8) ([]byte, error) {
	return request(cmdIEEESet, ifname, func(ae *netlink.AttributeEncoder) {
		ae.Do(attrDCBTrustTable, func() ([]byte, error) {
			nae := netlink.NewAttributeEncoder()
			for _, s := range selectors {
				nae.Uint8(appAttrType(s), s)
			}
			b, err := nae.Encode()
			if b == nil && err == nil {
				// An empty nest still has to be present: it is how
				// "trust nothing" is said.
				b = []byte{}
			}
			return b, err
		})
	})
}

// errMalformed is wrapped by every decoding error.
var errMalformed = errors.New("malformed dcbnl reply")

func malformed(format string, a ...any) error {
	return fmt.Errorf("%w: %s", errMalformed, fmt.Sprintf(format, a...))
}

// checkHeader validates the struct dcbmsg at the start of a reply payload
// and returns the attributes that follow it.
func checkHeader(b []byte, cmd uint8) ([]byte, error) {
	if len(b) < sizeofDCBMsg {
		return nil, malformed("%d bytes, shorter than struct dcbmsg", len(b))
	}
	if b[1] != cmd {
		return nil, malformed("reply for command %d, want %d", b[1], cmd)
	}
	return b[sizeofDCBMsg:], nil
}

// decodeIEEE decodes the payload of a DCB_CMD_IEEE_GET reply (struct dcbmsg
// followed by attributes, as filled by dcbnl_ieee_fill). Attributes it does
// not know are skipped, so newer kernels do not break it.
func decodeIEEE(b []byte) (*IEEE, error) {
	attrs, err := checkHeader(b, cmdIEEEGet)
	if err != nil {
		return nil, err
	}
	ad, err := netlink.NewAttributeDecoder(attrs)
	if err != nil {
		return nil, malformed("%v", err)
	}
	ad.ByteOrder = native
	var out IEEE
	sawIEEE := false
	for ad.Next() {
		switch ad.Type() {
		case attrIfname:
			out.Ifname = ad.String()
		case attrDCBX:
			out.HasDCBX = true
			out.DCBX = ad.Uint8()
		case attrIEEE:
			sawIEEE = true
			ad.Nested(func(nad *netlink.AttributeDecoder) error {
				return decodeIEEENest(nad, &out)
			})
		}
	}
	if err := ad.Err(); err != nil {
		return nil, malformed("%v", err)
	}
	if !sawIEEE {
		return nil, malformed("no DCB_ATTR_IEEE attribute")
	}
	return &out, nil
}

func decodeIEEENest(ad *netlink.AttributeDecoder, out *IEEE) error {
	for ad.Next() {
		switch ad.Type() {
		case attrIEEEPFC:
			p, err := unmarshalPFC(ad.Bytes())
			if err != nil {
				return err
			}
			out.PFC = p
		case attrIEEEETS:
			e, err := unmarshalETS(ad.Bytes())
			if err != nil {
				return err
			}
			out.ETS = e
		case attrIEEEAppTable:
			ad.Nested(func(nad *netlink.AttributeDecoder) error {
				for nad.Next() {
					switch nad.Type() {
					case attrIEEEApp, attrDCBApp:
						a, err := unmarshalApp(nad.Bytes())
						if err != nil {
							return err
						}
						out.Apps = append(out.Apps, a)
					}
				}
				return nil
			})
		case attrDCBTrustTable:
			out.TrustTable = true
			out.Trust = []uint8{}
			ad.Nested(func(nad *netlink.AttributeDecoder) error {
				for nad.Next() {
					switch nad.Type() {
					case attrIEEEApp, attrDCBApp:
						if nad.Len() != 1 {
							return fmt.Errorf("trust table entry is %d bytes, want 1", nad.Len())
						}
						out.Trust = append(out.Trust, nad.Uint8())
					}
				}
				return nil
			})
		}
	}
	return nil
}

// decodeSetReply decodes the reply to DCB_CMD_IEEE_SET or DCB_CMD_IEEE_DEL.
// dcbnl acknowledges these with a DCB_ATTR_IEEE u8 holding the driver's
// return code: the negative errno truncated to 8 bits (dcbnl_ieee_set:
// nla_put_u8(skb, DCB_ATTR_IEEE, err)). Errno values above 255, such as
// the kernel-internal ENOTSUPP (524), arrive aliased; that is a kernel
// limitation no reader can undo.
func decodeSetReply(b []byte, cmd uint8) error {
	attrs, err := checkHeader(b, cmd)
	if err != nil {
		return err
	}
	ad, err := netlink.NewAttributeDecoder(attrs)
	if err != nil {
		return malformed("%v", err)
	}
	var code uint8
	found := false
	for ad.Next() {
		if ad.Type() == attrIEEE {
			found = true
			code = ad.Uint8()
		}
	}
	if err := ad.Err(); err != nil {
		return malformed("%v", err)
	}
	if !found {
		return malformed("no DCB_ATTR_IEEE status attribute")
	}
	if code == 0 {
		return nil
	}
	if v := int8(code); v < 0 {
		return syscall.Errno(-int(v))
	}
	return syscall.Errno(code)
}
