package nicq

import (
	"bytes"
	"encoding/binary"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/mdlayher/genetlink"
	"github.com/mdlayher/genetlink/genltest"
	"github.com/mdlayher/netlink"
)

var testFamily = genetlink.Family{ID: 26, Version: 1, Name: "ethtool"}

// nla is one netlink attribute, padded to 4 bytes, in host order.
func nla(typ uint16, data []byte) []byte {
	b := make([]byte, 4, 4+len(data)+3)
	binary.NativeEndian.PutUint16(b, uint16(4+len(data)))
	binary.NativeEndian.PutUint16(b[2:], typ)
	b = append(b, data...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func u32(v uint32) []byte { return binary.NativeEndian.AppendUint32(nil, v) }

// hdr is ETHTOOL_A_*_HEADER (1, with NLA_F_NESTED) { ETHTOOL_A_HEADER_DEV_NAME (2) "eth0" }.
var hdr = nla(1|netlink.Nested, nla(2, []byte("eth0\x00"))) // NLA_F_NESTED: ethtool parses strictly

func TestRequestBytes(t *testing.T) {
	for _, tt := range []struct {
		name string
		got  func() ([]byte, error)
		want []byte
	}{
		{"get", func() ([]byte, error) { return getRequest("eth0") }, hdr},
		// ETHTOOL_A_RINGS_RX (6), ETHTOOL_A_RINGS_TX (9), u32 each.
		{"set rings", func() ([]byte, error) { return setRequest(Rings, "eth0", Values{"tx": 1024, "rx": 4096}) },
			bytes.Join([][]byte{hdr, nla(6, u32(4096)), nla(9, u32(1024))}, nil)},
		// ETHTOOL_A_CHANNELS_COMBINED_COUNT (9) only.
		{"set channels", func() ([]byte, error) { return setRequest(Channels, "eth0", Values{"combined": 16}) },
			bytes.Join([][]byte{hdr, nla(9, u32(16))}, nil)},
		// ETHTOOL_A_COALESCE_RX_USECS (2) u32, USE_ADAPTIVE_RX (11) and
		// _TX (12) u8: 5 bytes padded to 8.
		{"set coalesce", func() ([]byte, error) {
			return setRequest(Coalesce, "eth0", Values{"rx_usecs": 8, "adaptive_rx": 1, "adaptive_tx": 0})
		}, bytes.Join([][]byte{hdr, nla(2, u32(8)), nla(11, []byte{1}), nla(12, []byte{0})}, nil)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.got()
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("request (-want +got):\n%s", diff)
			}
		})
	}
}

// kernel is a scripted ethtool netlink: it answers *_GET with reply and
// records the attributes of every *_SET.
type kernel struct {
	reply map[uint8][]byte // by GET command: the reply's attributes
	sets  map[uint8][]byte
	errno syscall.Errno // for SET
}

func (k *kernel) conn(t *testing.T) *Conn {
	t.Helper()
	gc := genltest.Dial(genltest.ServeFamily(testFamily, func(greq genetlink.Message, nreq netlink.Message) ([]genetlink.Message, error) {
		if nreq.Header.Type == 0 {
			return nil, nil // nltest's empty call when the connection closes
		}
		if b, ok := k.reply[greq.Header.Command]; ok {
			if !bytes.Equal(greq.Data, hdr) {
				t.Errorf("GET %d carries %x, want only the header %x", greq.Header.Command, greq.Data, hdr)
			}
			return []genetlink.Message{{Header: genetlink.Header{Command: greq.Header.Command + 1, Version: 1}, Data: b}}, nil
		}
		if nreq.Header.Flags&netlink.Acknowledge == 0 {
			t.Errorf("SET %d without NLM_F_ACK", greq.Header.Command)
		}
		if k.errno != 0 {
			return nil, genltest.Error(int(k.errno))
		}
		k.sets[greq.Header.Command] = greq.Data
		return nil, nil
	}))
	c, err := NewConn(gc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestGetPlanSet(t *testing.T) {
	k := &kernel{sets: map[uint8][]byte{}, reply: map[uint8][]byte{
		// ethtool -g: RX_MAX 8192, RX_MINI_MAX 0... as mlx5 reports:
		// RX_MAX (2), TX_MAX (5), RX (6), TX (9), plus RX_BUF_LEN (10),
		// which nicq does not know and skips.
		msgRingsGet: bytes.Join([][]byte{hdr, nla(2, u32(8192)), nla(5, u32(8192)), nla(6, u32(1024)), nla(9, u32(1024)), nla(10, u32(0))}, nil),
		// ethtool -c: rx-usecs 8, tx-usecs 16, adaptive-rx on; no
		// adaptive-tx attribute (the driver does not support it).
		msgCoalesceGet: bytes.Join([][]byte{hdr, nla(2, u32(8)), nla(6, u32(16)), nla(11, []byte{1})}, nil),
	}}
	c := k.conn(t)

	st, err := c.Get(Rings, "eth0")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(State{Values: Values{"rx": 1024, "tx": 1024}, Max: Values{"rx": 8192, "tx": 8192}}, st); diff != "" {
		t.Fatalf("rings (-want +got):\n%s", diff)
	}
	if _, err := Plan(Rings, "eth0", Values{"rx": 16384}, st); err == nil ||
		!strings.Contains(err.Error(), "rings rx of eth0: 16384 is beyond the driver's maximum 8192 (ethtool -g eth0: pre-set maximums); use at most 8192") {
		t.Errorf("Plan rx=16384 = %v, want the limit named", err)
	}
	d, err := Plan(Rings, "eth0", Values{"rx": 8192, "tx": 1024}, st)
	if err != nil || !cmp.Equal(d, Values{"rx": 8192}) {
		t.Fatalf("Plan rx=8192 tx=1024 = %v, %v; want only rx", d, err)
	}
	if err := c.Set(Rings, "eth0", d); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(bytes.Join([][]byte{hdr, nla(6, u32(8192))}, nil), k.sets[msgRingsSet]); diff != "" {
		t.Errorf("RINGS_SET attributes (-want +got):\n%s", diff)
	}
	if got := Rings.Actual(Values{"rx": 0}, st); got != "rx=1024" {
		t.Errorf("Actual = %q", got)
	}

	st, err = c.Get(Coalesce, "eth0")
	if err != nil {
		t.Fatal(err)
	}
	if d, err := Plan(Coalesce, "eth0", Values{"rx_usecs": 8, "adaptive_rx": 1}, st); err != nil || d != nil {
		t.Errorf("Plan in sync = %v, %v; want nothing", d, err)
	}
	if _, err := Plan(Coalesce, "eth0", Values{"adaptive_tx": 1}, st); !IsUnsupported(err) {
		t.Errorf("Plan adaptive_tx on a driver without it = %v, want unsupported", err)
	}
	if got := Coalesce.Format(Values{"adaptive_rx": 1, "tx_usecs": 16}); got != "tx_usecs=16 adaptive_rx=on" {
		t.Errorf("Format = %q", got)
	}

	k.errno = syscall.EINVAL
	if err := c.Set(Coalesce, "eth0", Values{"rx_usecs": 1}); err == nil || !strings.HasPrefix(err.Error(), "nicq: set interrupt coalescing of eth0: ") {
		t.Errorf("refused SET = %v", err)
	}
}
