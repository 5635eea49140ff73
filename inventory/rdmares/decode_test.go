package rdmares

import (
	"encoding/binary"
	"errors"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/internal/hexdump"
)

// fixtureSeq is the sequence number the fixtures answer.
const fixtureSeq = 7

// readHex reads a testdata .hex file: hex bytes, "#" comments.
func readHex(t testing.TB, name string) []byte {
	t.Helper()
	b, err := hexdump.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// splitMessages splits the datagram b into its netlink messages, as
// netlink.Conn does; it stops at the first that does not fit.
func splitMessages(b []byte) ([]netlink.Message, error) {
	var msgs []netlink.Message
	for len(b) > 0 {
		var m netlink.Message
		if err := m.UnmarshalBinary(b); err != nil {
			return msgs, err
		}
		msgs = append(msgs, m)
		n := (int(m.Header.Length) + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1)
		if n > len(b) {
			n = len(b)
		}
		b = b[n:]
	}
	return msgs, nil
}

// feed hands the messages of the datagram b to d, until one ends the dump
// or is refused.
func feed(t testing.TB, d *dump, b []byte) (done bool, err error) {
	t.Helper()
	msgs, err := splitMessages(b)
	if err != nil {
		t.Fatalf("fixture: %v", err)
	}
	for _, m := range msgs {
		if done, err = d.message(m); done || err != nil {
			return done, err
		}
	}
	return false, nil
}

// feedAll feeds b to d and requires it to end the dump.
func feedAll(t *testing.T, d *dump, b []byte) {
	t.Helper()
	done, err := feed(t, d, b)
	if err != nil {
		t.Fatal(err)
	}
	if !done {
		t.Fatal("the fixture did not end the dump (no NLMSG_DONE)")
	}
}

func TestDecodeDevices(t *testing.T) {
	d := &dump{summary: true}
	feedAll(t, d, readHex(t, "res-get.hex"))
	want := []Device{
		{Index: 1, Name: "rxe0", Tracked: map[string]uint64{"pd": 2, "cq": 2, "qp": 2, "cm_id": 0, "mr": 1, "ctx": 1, "srq": 0}},
		{Index: 2, Name: "mlx5_0", Tracked: map[string]uint64{"pd": 0, "cq": 0, "qp": 0, "cm_id": 0, "mr": 0, "ctx": 0, "srq": 0}},
	}
	if diff := cmp.Diff(want, d.devices); diff != "" {
		t.Errorf("devices (-want +got):\n%s", diff)
	}
}

func TestDecodeObjects(t *testing.T) {
	for _, tt := range []struct {
		file string
		kind Kind
		want []Object
	}{
		{"res-qp.hex", QP, []Object{
			{Kind: QP, DevIndex: 1, Device: "rxe0", KernName: "ib_core"},
			{Kind: QP, DevIndex: 1, Device: "rxe0", PID: 4242},
		}},
		{"res-cq.hex", CQ, []Object{
			{Kind: CQ, DevIndex: 1, Device: "rxe0", KernName: "ib_core"},
			{Kind: CQ, DevIndex: 1, Device: "rxe0", PID: 4242},
		}},
		{"res-mr.hex", MR, []Object{
			{Kind: MR, DevIndex: 1, Device: "rxe0", PID: 4242, Length: 4096},
			{Kind: MR, DevIndex: 1, Device: "rxe0", PID: 4242, Length: 1 << 20},
			{Kind: MR, DevIndex: 1, Device: "rxe0", Length: 8192},
		}},
		{"res-mr-pad.hex", MR, []Object{
			{Kind: MR, DevIndex: 2, Device: "mlx5_0", KernName: "nvme_rdma", Length: 1<<32 + 4096},
		}},
		{"res-pd.hex", PD, []Object{
			{Kind: PD, DevIndex: 1, Device: "rxe0", KernName: "ib_core"},
			{Kind: PD, DevIndex: 1, Device: "rxe0", PID: 4242},
		}},
	} {
		t.Run(tt.file, func(t *testing.T) {
			d := &dump{kind: tt.kind}
			feedAll(t, d, readHex(t, tt.file))
			if diff := cmp.Diff(tt.want, d.objects); diff != "" {
				t.Errorf("objects (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDecodeNestedFlag: a kernel that marks nests NLA_F_NESTED (nldev.c
// uses nla_nest_start_noflag today) decodes the same.
func TestDecodeNestedFlag(t *testing.T) {
	b := readHex(t, "res-mr.hex")
	// The RES_MR table is the third attribute, at 16+8+12.
	const tableAt = 16 + 8 + 12
	typ := binary.NativeEndian.Uint16(b[tableAt+2:])
	if typ != attrResMR {
		t.Fatalf("fixture: attribute at %d is %d, want RES_MR %d", tableAt, typ, attrResMR)
	}
	binary.NativeEndian.PutUint16(b[tableAt+2:], typ|0x8000)
	d := &dump{kind: MR}
	feedAll(t, d, b)
	if len(d.objects) != 3 {
		t.Errorf("got %d objects, want 3", len(d.objects))
	}
}

// TestDecodeKernelErrors: an NLMSG_DONE without NLM_F_MULTI (which
// netlink.Conn passes on) ends the dump with its error code, the errno;
// an acknowledgement ends it without one. (Multipart NLMSG_DONEs and
// NLMSG_ERRORs with a code: TestReadKernelErrors.)
func TestDecodeKernelErrors(t *testing.T) {
	code := -int32(syscall.EINVAL)
	for _, tt := range []struct {
		typ  netlink.HeaderType
		code int32
		want error
	}{
		{netlink.Done, code, syscall.EINVAL},
		{netlink.Done, 0, nil},
		{netlink.Error, 0, nil},
	} {
		data := binary.NativeEndian.AppendUint32(nil, uint32(tt.code))
		d := &dump{kind: QP}
		done, err := d.message(netlink.Message{Header: netlink.Header{Type: tt.typ, Sequence: fixtureSeq}, Data: data})
		if !done || !errors.Is(err, tt.want) || (tt.want == nil && err != nil) {
			t.Errorf("type %v with code %d: done %v, err %v; want done and %v", tt.typ, tt.code, done, err, tt.want)
		}
	}
}

// hostile returns the fixture with change applied to a copy.
func hostile(t *testing.T, file string, change func(b []byte) []byte) []byte {
	t.Helper()
	b := readHex(t, file)
	return change(append([]byte(nil), b...))
}

// TestDecodeHostile: bytes the kernel never sends give an error that
// says what is wrong, and never a panic or a half-decoded object. (The
// framing of messages in a datagram is netlink.Conn's to check; a reply
// to another request: TestReadWrongSequence.)
func TestDecodeHostile(t *testing.T) {
	put16 := func(off int, v uint16) func([]byte) []byte {
		return func(b []byte) []byte { binary.NativeEndian.PutUint16(b[off:], v); return b }
	}
	// Offsets in res-mr.hex: nlmsghdr 0, DEV_INDEX 16, DEV_NAME 24,
	// RES_MR 36, first entry 40, its RKEY 44 ... RES_MRLEN 60, MRN 72,
	// PDN 80, PID 88.
	for _, tt := range []struct {
		name, file string
		kind       Kind
		change     func([]byte) []byte
		want       string
	}{
		{"attribute longer than the message", "res-mr.hex", MR, put16(16, 400), "attribute 1 claims 400 bytes"},
		{"attribute shorter than its header", "res-mr.hex", MR, put16(16, 2), "claims 2 bytes"},
		{"table longer than the message", "res-mr.hex", MR, put16(36, 300), "claims 300 bytes"},
		{"entry longer than its table", "res-mr.hex", MR, put16(40, 200), "mr table"},
		{"nested garbage in an entry", "res-mr.hex", MR, put16(60, 0xffff), "rxe0 mr entry"},
		{"u64 of 4 bytes", "res-mr.hex", MR, put16(74, attrResMRLen), "want a u64"}, // MRN u32 -> MRLEN
		{"pid of 2 bytes", "res-mr.hex", MR, put16(88, 6), "want a u32"},
		{"device name without NUL", "res-mr.hex", MR, func(b []byte) []byte { b[24+8] = 'x'; return b }, "without its NUL"},
		{"no device handle", "res-mr.hex", MR, func(b []byte) []byte {
			binary.NativeEndian.PutUint16(b[18:], 99) // DEV_INDEX -> unknown
			return b
		}, "without its device index"},
		{"memory region without length", "res-mr.hex", MR, put16(62, 99), "without its length"},
		{"pid and kernel owner", "res-qp.hex", QP, func(b []byte) []byte {
			// The kernel QP's RES_KERN_NAME stays; its SQ_PSN becomes a pid.
			i := strings.Index(string(b), "\x08\x00\x18\x00") // SQ_PSN u32 of the first entry
			binary.NativeEndian.PutUint16(b[i+2:], attrResPID)
			binary.NativeEndian.PutUint32(b[i+4:], 77)
			return b
		}, "both a pid"},
		{"another operation's reply", "res-mr.hex", QP, func(b []byte) []byte { return b }, "message type 0x140d"},
		{"summary entry without count", "res-get.hex", MR, func(b []byte) []byte { return b }, "message type 0x1409"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := &dump{kind: tt.kind}
			_, err := feed(t, d, hostile(t, tt.file, tt.change))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// TestDecodeSummaryHostile: a summary entry without its count.
func TestDecodeSummaryHostile(t *testing.T) {
	b := readHex(t, "res-get.hex")
	i := strings.Index(string(b), "\x0c\x00\x12\x00") // the first ENTRY_CURR
	binary.NativeEndian.PutUint16(b[i+2:], 99)
	d := &dump{summary: true}
	if _, err := feed(t, d, b); err == nil || !strings.Contains(err.Error(), "without its name or count") {
		t.Fatalf("err = %v, want a summary entry without its count", err)
	}
}

func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"ibv_rc_pingpong": "ibv_rc_pingpong",
		"a\x1b[2Jb":       "a?[2Jb",
		"tab\there":       "tab?here",
		"\xff\xfe":        "??",
		"ünïcode":         "ünïcode",
	} {
		if got := Printable(in); got != want {
			t.Errorf("Printable(%q) = %q, want %q", in, got, want)
		}
	}
}
