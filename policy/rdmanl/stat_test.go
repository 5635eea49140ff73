package rdmanl

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/mdlayher/netlink"
	"github.com/mdlayher/netlink/nltest"
)

// littleEndian skips t on a big-endian host: the literal bytes below are
// what an x86 or arm64 kernel reads.
func littleEndian(t *testing.T) {
	t.Helper()
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		t.Skip("the literal bytes are little-endian")
	}
}

// TestStatRequestBytes pins the STAT requests to the bytes the kernel's
// uapi spells, assembled by hand from <rdma/rdma_netlink.h>'s numbers
// (which TestConstantsMatchHeader checks): struct nlattr is a u16 length
// (header included, padding not) and a u16 type, the payload padded to 4.
func TestStatRequestBytes(t *testing.T) {
	littleEndian(t)
	dev := Device{Index: 3, Name: "mlx5_0"}
	port := []byte{
		8, 0, 1, 0, 3, 0, 0, 0, // RDMA_NLDEV_ATTR_DEV_INDEX (1) u32 3
		8, 0, 3, 0, 1, 0, 0, 0, // RDMA_NLDEV_ATTR_PORT_INDEX (3) u32 1
	}
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	for _, tc := range []struct {
		name string
		got  func() ([]byte, error)
		want []byte
	}{
		{"STAT_GET_STATUS", func() ([]byte, error) { return getStatusRequest(dev, 1) }, port},
		{"STAT_SET optional counters 5 and 9", func() ([]byte, error) { return setCountersRequest(dev, 1, []uint32{5, 9}) }, cat(port, []byte{
			20, 0, 80, 0x80, // RDMA_NLDEV_ATTR_STAT_HWCOUNTERS (80) | NLA_F_NESTED (0x8000), 4+8+8 bytes
			8, 0, 94, 0, 5, 0, 0, 0, // RDMA_NLDEV_ATTR_STAT_HWCOUNTER_INDEX (94) u32 5
			8, 0, 94, 0, 9, 0, 0, 0, // and 9
		})},
		{"STAT_SET no optional counter", func() ([]byte, error) { return setCountersRequest(dev, 1, nil) }, cat(port, []byte{
			4, 0, 80, 0x80, // an empty RDMA_NLDEV_ATTR_STAT_HWCOUNTERS: all off (`rdma statistic unset`)
		})},
		{"STAT_GET QP mode", func() ([]byte, error) { return qpModeRequest(dev, 1) }, cat(port, []byte{
			8, 0, 75, 0, 19, 0, 0, 0, // RDMA_NLDEV_ATTR_STAT_RES (75) u32 RDMA_NLDEV_ATTR_RES_QP (19)
			8, 0, 74, 0, 0, 0, 0, 0, // RDMA_NLDEV_ATTR_STAT_MODE (74) u32 0 (present, not read)
		})},
		{"STAT_SET QP auto type on", func() ([]byte, error) { return setQPAutoRequest(dev, 1, true) }, cat(port, []byte{
			8, 0, 75, 0, 19, 0, 0, 0, // STAT_RES = RES_QP
			8, 0, 74, 0, 1, 0, 0, 0, // STAT_MODE = RDMA_COUNTER_MODE_AUTO (1)
			8, 0, 76, 0, 1, 0, 0, 0, // RDMA_NLDEV_ATTR_STAT_AUTO_MODE_MASK (76) = RDMA_COUNTER_MASK_QP_TYPE (1)
		})},
		{"STAT_SET QP auto off", func() ([]byte, error) { return setQPAutoRequest(dev, 1, false) }, cat(port, []byte{
			8, 0, 75, 0, 19, 0, 0, 0,
			8, 0, 74, 0, 1, 0, 0, 0,
			8, 0, 76, 0, 0, 0, 0, 0, // mask 0: auto off
		})},
	} {
		got, err := tc.got()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !bytes.Equal(got, tc.want) {
			t.Errorf("%s:\n got % x\nwant % x", tc.name, got, tc.want)
		}
	}
}

// statusReply is a STAT_GET_STATUS reply as the kernel builds it
// (nldev_stat_get_counter_status_doit): the device, the port, and a
// nested table of entries, each with name and index, and DYNAMIC only on
// the optional ones.
func statusReply(dyn map[string]byte, names ...string) []byte {
	var entries [][]byte
	for i, n := range names {
		e := [][]byte{nla(82, []byte(n+"\x00")), nla(94, u32(uint32(i)))}
		if v, ok := dyn[n]; ok {
			e = append(e, nla(95, []byte{v}))
		}
		entries = append(entries, nla(81|0x8000, bytes.Join(e, nil)))
	}
	return bytes.Join([][]byte{nla(1, u32(3)), nla(2, []byte("mlx5_0\x00")), nla(3, u32(1)), nla(80|0x8000, bytes.Join(entries, nil))}, nil)
}

func TestDecodeCounters(t *testing.T) {
	littleEndian(t)
	// Assembled by hand: one always-on counter, one optional counter on
	// and one off.
	b := []byte{
		8, 0, 1, 0, 3, 0, 0, 0, // DEV_INDEX 3
		8, 0, 3, 0, 1, 0, 0, 0, // PORT_INDEX 1
		84, 0, 80, 0x80, // HWCOUNTERS, nested: 4+20+32+28 (a nest's length counts its members' padding)
		20, 0, 81, 0x80, // HWCOUNTER_ENTRY, nested
		8, 0, 82, 0, 'r', 'x', '1', 0, // ENTRY_NAME "rx1"
		8, 0, 94, 0, 0, 0, 0, 0, // INDEX 0
		32, 0, 81, 0x80,
		10, 0, 82, 0, 'c', 'c', '_', 'c', 'e', 0, 0, 0, // "cc_ce", 6 bytes padded to 8
		8, 0, 94, 0, 1, 0, 0, 0, // INDEX 1
		5, 0, 95, 0, 1, 0, 0, 0, // DYNAMIC 1: optional, on
		28, 0, 81, 0x80,
		8, 0, 82, 0, 'c', 'n', 'p', 0, // "cnp"
		8, 0, 94, 0, 2, 0, 0, 0, // INDEX 2
		5, 0, 95, 0, 0, 0, 0, 0, // DYNAMIC 0: optional, off
	}
	got, err := decodeCounters(b)
	if err != nil {
		t.Fatal(err)
	}
	want := []Counter{{Name: "rx1"}, {Name: "cc_ce", Index: 1, Optional: true, Enabled: true}, {Name: "cnp", Index: 2, Optional: true}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("decodeCounters (-want +got):\n%s", diff)
	}
	if _, err := decodeCounters(b[:16]); err == nil {
		t.Error("a reply without HWCOUNTERS decoded")
	}
	if _, err := decodeCounters(b[:len(b)-4]); err == nil {
		t.Error("a truncated reply decoded")
	}
}

func TestDecodeQPMode(t *testing.T) {
	littleEndian(t)
	port := []byte{8, 0, 1, 0, 3, 0, 0, 0, 8, 0, 3, 0, 1, 0, 0, 0}
	for _, tc := range []struct {
		attrs []byte
		want  string
	}{
		{[]byte{8, 0, 74, 0, 1, 0, 0, 0, 8, 0, 76, 0, 1, 0, 0, 0}, "auto"},           // AUTO, mask QP_TYPE
		{[]byte{8, 0, 74, 0, 0, 0, 0, 0}, "off"},                                     // NONE (no mask sent)
		{[]byte{8, 0, 74, 0, 2, 0, 0, 0}, "manual"},                                  // MANUAL
		{[]byte{8, 0, 74, 0, 1, 0, 0, 0, 8, 0, 76, 0, 3, 0, 0, 0}, "auto(type,pid)"}, // AUTO, QP_TYPE|PID
		{[]byte{8, 0, 74, 0, 1, 0, 0, 0, 8, 0, 76, 0, 2, 0, 0, 0}, "auto(pid)"},
	} {
		got, err := decodeQPMode(append(append([]byte{}, port...), tc.attrs...))
		if err != nil || got != tc.want {
			t.Errorf("decodeQPMode(% x) = %q, %v; want %q", tc.attrs, got, err, tc.want)
		}
	}
	if _, err := decodeQPMode(port); err == nil {
		t.Error("a reply without STAT_MODE decoded")
	}
}

// fakeStat is a kernel's statistics commands on mlx5_0/1: counters (nil:
// STAT_GET_STATUS refused with statusErr), the QP counter mode, and what
// STAT_SET answers with (setErr).
type fakeStat struct {
	names     []string
	dyn       map[string]byte
	statusErr syscall.Errno
	mode      uint32
	mask      uint32
	setErr    syscall.Errno
	sets      [][]byte
}

func (f *fakeStat) handle(reqs []netlink.Message) ([]netlink.Message, error) {
	req := reqs[0]
	reply := func(b []byte) ([]netlink.Message, error) {
		return []netlink.Message{{Header: req.Header, Data: b}}, nil
	}
	switch req.Header.Type {
	case 5<<10 + 24:
		if f.statusErr != 0 {
			return nltest.Error(int(f.statusErr), reqs)
		}
		return reply(statusReply(f.dyn, f.names...))
	case 5<<10 + 17:
		b := bytes.Join([][]byte{nla(1, u32(3)), nla(3, u32(1)), nla(74, u32(f.mode))}, nil)
		if f.mode == 1 {
			b = append(b, nla(76, u32(f.mask))...)
		}
		return reply(b)
	case 5<<10 + 16:
		if req.Header.Flags&netlink.Acknowledge != 0 {
			// An ack after the reply would be left in the socket.
			return nltest.Error(int(syscall.EPROTO), reqs)
		}
		if f.setErr != 0 {
			return nltest.Error(int(f.setErr), reqs)
		}
		f.sets = append(f.sets, req.Data)
		if bytes.Contains(req.Data, nla(74, u32(1))) {
			f.mode, f.mask = 1, 0
			if bytes.Contains(req.Data, nla(76, u32(1))) {
				f.mask = 1
			} else {
				f.mode = 0
			}
		}
		if i := bytes.Index(req.Data, []byte{80, 0x80}); i >= 2 {
			on := map[uint32]bool{}
			n := int(binary.NativeEndian.Uint16(req.Data[i-2:]))
			for b := req.Data[i+2 : i-2+n]; len(b) >= 8; b = b[8:] {
				on[binary.NativeEndian.Uint32(b[4:])] = true
			}
			for idx, name := range f.names {
				if _, opt := f.dyn[name]; opt {
					f.dyn[name] = 0
					if on[uint32(idx)] {
						f.dyn[name] = 1
					}
				}
			}
		}
		return reply(bytes.Join([][]byte{nla(1, u32(3)), nla(3, u32(1))}, nil))
	}
	return nltest.Error(int(syscall.EOPNOTSUPP), reqs)
}

func TestOptionalCountersAndQPMode(t *testing.T) {
	f := &fakeStat{names: []string{"rx_write_requests", "cc_rx_ce_pkts", "cc_rx_cnp_pkts"}, dyn: map[string]byte{"cc_rx_ce_pkts": 0, "cc_rx_cnp_pkts": 1}}
	c := NewConn(nltest.Dial(f.handle))
	defer c.Close()
	dev := Device{Index: 3, Name: "mlx5_0"}
	cs, err := c.Counters(dev, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := EnabledOptional(cs); !cmp.Equal(got, []string{"cc_rx_cnp_pkts"}) {
		t.Errorf("enabled = %v", got)
	}
	idx, err := OptionalIndexes(cs, []string{"cc_rx_ce_pkts"})
	if err != nil || !cmp.Equal(idx, []uint32{1}) {
		t.Fatalf("OptionalIndexes = %v, %v", idx, err)
	}
	if err := c.SetOptionalCounters(dev, 1, idx); err != nil {
		t.Fatal(err)
	}
	if cs, _ := c.Counters(dev, 1); !cmp.Equal(EnabledOptional(cs), []string{"cc_rx_ce_pkts"}) {
		t.Errorf("after set: %v, want only cc_rx_ce_pkts", EnabledOptional(cs))
	}
	// A name the port does not offer is unsupported, naming what it does.
	if _, err := OptionalIndexes(cs, []string{"cc_bogus"}); !IsUnsupported(err) || !strings.Contains(err.Error(), "cc_rx_ce_pkts, cc_rx_cnp_pkts") {
		t.Errorf("unknown counter: %v", err)
	}
	// rxe: counters, none optional.
	if _, err := OptionalIndexes([]Counter{{Name: "sent_pkts"}}, []string{"cc_rx_ce_pkts"}); !IsUnsupported(err) || !strings.Contains(err.Error(), "no optional counters") {
		t.Errorf("no optional counters: %v", err)
	}

	if m, err := c.QPCounterMode(dev, 1); err != nil || m != QPCountersOff {
		t.Fatalf("QPCounterMode = %q, %v; want off", m, err)
	}
	if err := c.SetQPCounters(dev, 1, QPCountersAuto); err != nil {
		t.Fatal(err)
	}
	if m, _ := c.QPCounterMode(dev, 1); m != QPCountersAuto {
		t.Errorf("after auto: %q", m)
	}
	if err := c.SetQPCounters(dev, 1, QPCountersOff); err != nil {
		t.Fatal(err)
	}
	if m, _ := c.QPCounterMode(dev, 1); m != QPCountersOff {
		t.Errorf("after off: %q", m)
	}
	if err := c.SetQPCounters(dev, 1, "manual"); err == nil {
		t.Error("SetQPCounters(manual) = nil")
	}

	// The kernel's refusals.
	f.setErr = syscall.EOPNOTSUPP
	if err := c.SetQPCounters(dev, 1, QPCountersAuto); !IsUnsupported(err) || !errors.Is(err, syscall.EOPNOTSUPP) {
		t.Errorf("EOPNOTSUPP: %v, want unsupported", err)
	}
	f.setErr = syscall.EBUSY
	if err := c.SetQPCounters(dev, 1, QPCountersAuto); IsUnsupported(err) || !strings.Contains(err.Error(), "unbind") {
		t.Errorf("EBUSY: %v, want an error with the hint", err)
	}
	f.statusErr = syscall.EINVAL // a kernel before 5.18, or no hardware counters
	if _, err := c.Counters(dev, 1); !IsUnsupported(err) {
		t.Errorf("STAT_GET_STATUS refused: %v, want unsupported", err)
	}
	f.statusErr = syscall.EPERM
	if _, err := c.Counters(dev, 1); err == nil || IsUnsupported(err) {
		t.Errorf("EPERM: %v, want an error, not unsupported", err)
	}
}
