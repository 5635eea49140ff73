package dcb

import (
	"errors"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Test helpers that lay out netlink attributes by hand (struct nlattr:
// u16 nla_len, u16 nla_type, payload padded to 4 bytes, all native order),
// independent of the netlink package's encoder that the code under test
// uses.
func nla(typ uint16, payload ...[]byte) []byte {
	var data []byte
	for _, p := range payload {
		data = append(data, p...)
	}
	b := append(u16(uint16(4+len(data))), u16(typ)...)
	b = append(b, data...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func u16(v uint16) []byte {
	b := make([]byte, 2)
	native.PutUint16(b, v)
	return b
}

func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// appBytes is struct dcb_app: u8 selector, u8 priority, u16 protocol.
func appBytes(sel, prio uint8, proto uint16) []byte {
	return append([]byte{sel, prio}, u16(proto)...)
}

var ifnameEth0 = nla(attrIfname, []byte("eth0\x00")) // NLA_NUL_STRING

func TestRequestEncoding(t *testing.T) {
	pfc := PFC{Cap: 8, Enabled: 1<<3 | 1<<5, Delay: 0x10}
	tests := []struct {
		name string
		got  func() ([]byte, error)
		want []byte
	}{
		{
			// struct dcbmsg {family AF_UNSPEC, cmd DCB_CMD_IEEE_GET=21, pad}
			// then DCB_ATTR_IFNAME (1): len 4+5, "eth0\0", 3 bytes pad.
			name: "IEEE get",
			got:  func() ([]byte, error) { return ieeeGetRequest("eth0") },
			want: []byte{
				0, 21, 0, 0,
				9, 0, 1, 0, 'e', 't', 'h', '0', 0, 0, 0, 0,
			},
		},
		{
			// DCB_CMD_IEEE_SET=20; DCB_ATTR_IEEE (13) { DCB_ATTR_IEEE_PFC (2):
			// the 136-byte struct ieee_pfc }.
			name: "set PFC",
			got:  func() ([]byte, error) { return pfcSetRequest("eth0", pfc) },
			want: cat([]byte{0, 20, 0, 0}, ifnameEth0, nla(attrIEEE, nla(attrIEEEPFC, pfc.marshal()))),
		},
		{
			// DCB_ATTR_IEEE (13) { DCB_ATTR_IEEE_ETS (1): the 59-byte
			// struct ieee_ets, padded to 64 } : 4 + 4 + 59 + 1 pad.
			name: "set ETS",
			got: func() ([]byte, error) {
				return etsSetRequest("eth0", ETS{Cap: 8, TCTxBW: [8]uint8{50, 50}, TCTSA: [8]uint8{2, 2}, PrioTC: [8]uint8{0, 0, 0, 1}})
			},
			want: cat([]byte{0, 20, 0, 0}, ifnameEth0,
				[]byte{68, 0, 13, 0}, []byte{63, 0, 1, 0},
				[]byte{0, 8, 0},                  // willing, ets_cap, cbs
				[]byte{50, 50, 0, 0, 0, 0, 0, 0}, // tc_tx_bw
				make([]byte, 8),                  // tc_rx_bw
				[]byte{2, 2, 0, 0, 0, 0, 0, 0},   // tc_tsa
				[]byte{0, 0, 0, 1, 0, 0, 0, 0},   // prio_tc
				make([]byte, 24+1)),              // tc_reco_bw, tc_reco_tsa, reco_prio_tc, pad
		},
		{
			// DCB_ATTR_IEEE { DCB_ATTR_IEEE_APP_TABLE (3) {
			//   DCB_ATTR_IEEE_APP (1): dcb_app{5, 3, 26},
			//   DCB_ATTR_DCB_APP (2): dcb_app{255, 1, 4} } }.
			name: "add apps",
			got: func() ([]byte, error) {
				return appsRequest(cmdIEEESet, "eth0", []App{
					{Selector: SelectorDSCP, Priority: 3, Protocol: 26},
					{Selector: SelectorPCP, Priority: 1, Protocol: 4},
				})
			},
			want: cat([]byte{0, 20, 0, 0}, ifnameEth0,
				[]byte{24, 0, 13, 0}, // IEEE nest: 4 + 20
				[]byte{20, 0, 3, 0},  // APP table nest: 4 + 2*8
				[]byte{8, 0, 1, 0}, appBytes(5, 3, 26),
				[]byte{8, 0, 2, 0}, appBytes(255, 1, 4)),
		},
		{
			// DCB_CMD_IEEE_DEL=27, same body as add.
			name: "delete apps",
			got: func() ([]byte, error) {
				return appsRequest(cmdIEEEDel, "eth0", []App{{Selector: SelectorDSCP, Priority: 3, Protocol: 26}})
			},
			want: cat([]byte{0, 27, 0, 0}, ifnameEth0,
				[]byte{16, 0, 13, 0}, []byte{12, 0, 3, 0},
				[]byte{8, 0, 1, 0}, appBytes(5, 3, 26)),
		},
		{
			// DCB_ATTR_IEEE { DCB_ATTR_DCB_APP_TRUST_TABLE (11) {
			//   DCB_ATTR_IEEE_APP (1): u8 5, DCB_ATTR_DCB_APP (2): u8 255 } }:
			// each u8 attribute is 5 bytes padded to 8.
			name: "set trust dscp then pcp",
			got:  func() ([]byte, error) { return trustRequest("eth0", []uint8{SelectorDSCP, SelectorPCP}) },
			want: cat([]byte{0, 20, 0, 0}, ifnameEth0,
				[]byte{24, 0, 13, 0}, []byte{20, 0, 11, 0},
				[]byte{5, 0, 1, 0, 5, 0, 0, 0},
				[]byte{5, 0, 2, 0, 255, 0, 0, 0}),
		},
		{
			// An empty trust table is an empty nest, not a missing one.
			name: "set trust nothing",
			got:  func() ([]byte, error) { return trustRequest("eth0", nil) },
			want: cat([]byte{0, 20, 0, 0}, ifnameEth0, []byte{8, 0, 13, 0}, []byte{4, 0, 11, 0}),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.got()
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("request bytes (-want +got):\n%s", diff)
			}
		})
	}
}

func pfcBytes(p PFC) []byte { return p.marshal() }

// mlx5Reply is shaped like dcbnl_ieee_fill's answer for a driver with ETS,
// PFC, maxrate, an APP table, an empty rewrite table and a trust table.
func mlx5Reply() []byte {
	ets := make([]byte, sizeofIEEEETS)
	ets[offsetofETSPrioTC+3] = 3
	return cat([]byte{0, 21, 0, 0}, nla(attrIfname, []byte("ens1f0\x00")),
		nla(attrIEEE,
			nla(attrIEEEETS, ets),
			nla(attrIEEEMaxrate, make([]byte, 64)), // unknown to the decoder: skipped
			nla(attrIEEEPFC, pfcBytes(PFC{Cap: 8, Enabled: 1 << 3, Delay: 7})),
			nla(attrIEEEAppTable,
				nla(attrIEEEApp, appBytes(SelectorDSCP, 3, 26)),
				nla(attrIEEEApp, appBytes(SelectorEthertype, 4, 0x8915)),
				nla(attrDCBApp, appBytes(SelectorPCP, 2, 5)),
				nla(attrIEEEAppUnspec, appBytes(0, 0, 0))), // not an entry type: skipped
			nla(attrDCBRewrTable),
			nla(attrDCBTrustTable, nla(attrIEEEApp, []byte{SelectorDSCP})),
		),
		nla(attrDCBX, []byte{0x08}))
}

func TestDecodeIEEE(t *testing.T) {
	var wantETS ETS
	wantETS.PrioTC[3] = 3
	tests := []struct {
		name    string
		in      []byte
		want    *IEEE
		wantErr bool
	}{
		{
			name: "full",
			in:   mlx5Reply(),
			want: &IEEE{
				Ifname: "ens1f0",
				ETS:    &wantETS,
				PFC:    &PFC{Cap: 8, Enabled: 1 << 3, Delay: 7},
				Apps: []App{
					{Selector: SelectorDSCP, Priority: 3, Protocol: 26},
					{Selector: SelectorEthertype, Priority: 4, Protocol: 0x8915},
					{Selector: SelectorPCP, Priority: 2, Protocol: 5},
				},
				TrustTable: true,
				Trust:      []uint8{SelectorDSCP},
				HasDCBX:    true,
				DCBX:       0x08,
			},
		},
		{
			// A driver with only an APP table (dcb_ieee_setapp defaults),
			// on a kernel without trust tables: empty nests, no PFC.
			name: "minimal",
			in:   cat([]byte{0, 21, 0, 0}, nla(attrIfname, []byte("eth0\x00")), nla(attrIEEE, nla(attrIEEEAppTable))),
			want: &IEEE{Ifname: "eth0"},
		},
		{
			name: "empty trust table",
			in:   cat([]byte{0, 21, 0, 0}, nla(attrIEEE, nla(attrDCBTrustTable))),
			want: &IEEE{TrustTable: true, Trust: []uint8{}},
		},
		{name: "short header", in: []byte{0, 21}, wantErr: true},
		{name: "wrong command", in: cat([]byte{0, 20, 0, 0}, nla(attrIEEE)), wantErr: true},
		{name: "no IEEE nest", in: cat([]byte{0, 21, 0, 0}, ifnameEth0), wantErr: true},
		{name: "short PFC", in: cat([]byte{0, 21, 0, 0}, nla(attrIEEE, nla(attrIEEEPFC, make([]byte, 8)))), wantErr: true},
		{name: "short ETS", in: cat([]byte{0, 21, 0, 0}, nla(attrIEEE, nla(attrIEEEETS, make([]byte, 8)))), wantErr: true},
		{name: "short app", in: cat([]byte{0, 21, 0, 0}, nla(attrIEEE, nla(attrIEEEAppTable, nla(attrIEEEApp, []byte{5, 3})))), wantErr: true},
		{name: "wide trust entry", in: cat([]byte{0, 21, 0, 0}, nla(attrIEEE, nla(attrDCBTrustTable, nla(attrIEEEApp, []byte{5, 0})))), wantErr: true},
		{name: "attribute overruns message", in: cat([]byte{0, 21, 0, 0}, []byte{200, 0, 13, 0, 1, 2}), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeIEEE(tt.in)
			if tt.wantErr {
				if !errors.Is(err, errMalformed) {
					t.Fatalf("decodeIEEE = %+v, %v; want an errMalformed error", got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("decodeIEEE (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodeSetReply(t *testing.T) {
	// dcbnl_ieee_set answers with DCB_ATTR_IEEE u8 = the driver's return
	// value, a negative errno truncated to 8 bits.
	status := func(code int) []byte {
		return cat([]byte{0, 20, 0, 0}, nla(attrIEEE, []byte{uint8(code)}))
	}
	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"ok", status(0), nil},
		{"EOPNOTSUPP", status(-int(syscall.EOPNOTSUPP)), syscall.EOPNOTSUPP},
		{"EEXIST", status(-int(syscall.EEXIST)), syscall.EEXIST},
		{"EINVAL", status(-int(syscall.EINVAL)), syscall.EINVAL},
		{"ERANGE", status(-int(syscall.ERANGE)), syscall.ERANGE},
		{"no status", cat([]byte{0, 20, 0, 0}, ifnameEth0), errMalformed},
		{"wrong command", cat([]byte{0, 27, 0, 0}, nla(attrIEEE, []byte{0})), errMalformed},
		{"wide status", cat([]byte{0, 20, 0, 0}, nla(attrIEEE, []byte{0, 0})), errMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := decodeSetReply(tt.in, cmdIEEESet)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("decodeSetReply = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("decodeSetReply = %v, want errors.Is %v", err, tt.want)
			}
		})
	}
}

func FuzzDecodeIEEE(f *testing.F) {
	f.Add(mlx5Reply())
	f.Add(cat([]byte{0, 21, 0, 0}, nla(attrIEEE, nla(attrDCBTrustTable))))
	f.Add([]byte{0, 21, 0, 0, 200, 0, 13, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		ieee, err := decodeIEEE(b)
		if err == nil && ieee == nil {
			t.Fatal("decodeIEEE returned nil, nil")
		}
		if err != nil && !errors.Is(err, errMalformed) {
			t.Fatalf("decodeIEEE error %v does not wrap errMalformed", err)
		}
	})
}

func FuzzDecodeSetReply(f *testing.F) {
	f.Add([]byte{0, 20, 0, 0, 5, 0, 13, 0, 0xa1, 0, 0, 0})
	f.Add([]byte{0, 20, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = decodeSetReply(b, cmdIEEESet)
	})
}
