package kmsg

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// rec is a Record with strings, for comparing.
type rec struct {
	Priority, Facility int
	Seq, TS            uint64
	Message            string
	Subsystem, Device  string
}

func toRec(r Record) rec {
	return rec{r.Priority, r.Facility, r.Seq, r.TS, string(r.Message), string(r.Subsystem), string(r.Device)}
}

func TestParseRecord(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want rec
	}{
		{"plain", "6,339,5140900,-;NET: Registered PF_INET6 protocol family\n",
			rec{Priority: 6, Seq: 339, TS: 5140900, Message: "NET: Registered PF_INET6 protocol family"}},
		{"dev_printk with dictionary",
			"3,1204,17982092,-;mlx5_core 0000:41:00.0: poll_health:852:(pid 0): device's health compromised - reached miss count\n SUBSYSTEM=pci\n DEVICE=+pci:0000:41:00.0\n",
			rec{Priority: 3, Seq: 1204, TS: 17982092,
				Message:   "mlx5_core 0000:41:00.0: poll_health:852:(pid 0): device's health compromised - reached miss count",
				Subsystem: "pci", Device: "+pci:0000:41:00.0"}},
		{"written by root: facility user", "11,341,698900438,-;infiniband rxe0: test\n",
			rec{Priority: 3, Facility: 1, Seq: 341, TS: 698900438, Message: "infiniband rxe0: test"}},
		{"caller field (CONFIG_PRINTK_CALLER)", "4,12,3000,-,caller=T1;msg\n",
			rec{Priority: 4, Seq: 12, TS: 3000, Message: "msg"}},
		{"continuation flag", "4,13,3001,c;more\n", rec{Priority: 4, Seq: 13, TS: 3001, Message: "more"}},
		{"no trailing newline", "2,1,2,-;x", rec{Priority: 2, Seq: 1, TS: 2, Message: "x"}},
		{"empty message", "2,1,2,-;\n", rec{Priority: 2, Seq: 1, TS: 2}},
		{"escaped text kept as is", `3,5,6,-;a\x0ab\x5cc` + "\n", rec{Priority: 3, Seq: 5, TS: 6, Message: `a\x0ab\x5cc`}},
		{"netdev device, unknown keys", "6,9,9,-;eth0: up\n SUBSYSTEM=net\n DEVICE=n2\n X=y\n",
			rec{Priority: 6, Seq: 9, TS: 9, Message: "eth0: up", Subsystem: "net", Device: "n2"}},
		{"semicolon in message", "3,1,1,-;a;b\n", rec{Priority: 3, Seq: 1, TS: 1, Message: "a;b"}},
		{"dictionary line without '=' skipped", "3,1,1,-;m\n junk\n DEVICE=+infiniband:rxe0\n",
			rec{Priority: 3, Seq: 1, TS: 1, Message: "m", Device: "+infiniband:rxe0"}},
		{"dictionary ends at a line without a space", "3,1,1,-;m\nDEVICE=+pci:x\n", rec{Priority: 3, Seq: 1, TS: 1, Message: "m"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := ParseRecord([]byte(tt.in))
			if err != nil {
				t.Fatalf("ParseRecord(%q): %v", tt.in, err)
			}
			if diff := cmp.Diff(tt.want, toRec(r)); diff != "" {
				t.Errorf("ParseRecord(%q) (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func TestParseRecordMalformed(t *testing.T) {
	for _, in := range []string{
		"",
		"no header at all",
		"6,339,5140900;three fields\n",
		"6,339;two\n",
		";\n",
		",,,;\n",
		"x,1,2,-;bad pri\n",
		"6,-1,2,-;negative seq\n",
		"6,1,2x,-;bad ts\n",
		"6,99999999999999999999,1,-;seq overflows\n",
		"6,1,99999999999999999999,-;ts overflows\n",
		"99999,1,1,-;pri too large\n",
	} {
		_, err := ParseRecord([]byte(in))
		if !errors.Is(err, errRecord) {
			t.Errorf("ParseRecord(%q) = %v, want an error matching errRecord", in, err)
		}
	}
}

// TestParseRecordNoAlloc: parsing is on the path of every record.
func TestParseRecordNoAlloc(t *testing.T) {
	b := []byte("3,1204,17982092,-;mlx5_core 0000:41:00.0: x\n SUBSYSTEM=pci\n DEVICE=+pci:0000:41:00.0\n")
	if n := testing.AllocsPerRun(100, func() { ParseRecord(b) }); n != 0 {
		t.Errorf("ParseRecord allocates %v times per record, want 0", n)
	}
}

// FuzzParseRecord: any input parses or fails with errRecord, never
// panics, and a parsed record's parts are slices of the input.
func FuzzParseRecord(f *testing.F) {
	f.Add([]byte("3,1204,17982092,-;mlx5_core 0000:41:00.0: x\n SUBSYSTEM=pci\n DEVICE=+pci:0000:41:00.0\n"))
	f.Add([]byte("11,341,698900438,-,caller=T1;infiniband rxe0: test\n"))
	f.Add([]byte("6,9,9,-;eth0: up\n DEVICE=n2\n"))
	f.Add([]byte(";;;\n \n=\n"))
	f.Add([]byte("4,1,1,-;mlx5_core 0000:41:00.0: wait_func:964:(pid 112): ENABLE_HCA(0x104) timeout. Will cause a leak of a command resource\n DEVICE=+pci:0000:41:00.0\n"))
	f.Add([]byte("6,1,1,-;pcieport 0000:00:01.0: AER: Uncorrected (Fatal) error received: 0000:41:00.0\n"))
	f.Add([]byte("3,1,1,-;infiniband rxe0: FATAL \u202e catastrophic Link is Down synd 0x8: x\n"))
	f.Add([]byte("6,1,1,-;pcieport 0000:00:01.0: AER: Uncorrected (Non-Fatal) error received: id=4100\n SUBSYSTEM=pci\n DEVICE=+pci:0000:00:01.0\n"))
	f.Add([]byte("6,1,1,-;virtio_net virtio0 eth0 (unregistering): Link is Down\n DEVICE=+virtio:virtio0\n"))
	f.Add([]byte("3,1,1,-;eth0: Link down[25167]: segfault at 0 ip 000055890efe5171\n"))
	f.Add([]byte("3,1,1,-;mlx5_core 0000:41:00.0: mlx5_cmd_out_err:838:(pid 1): ACCESS_REG(0x805) op_mod(0x1) failed, status bad resource(0x5), syndrome (0x305684), err(-22)\n DEVICE=+pci:0000:41:00.0\n"))
	f.Add([]byte("6,1,1,-;mlx5_core 0000:41:00.0: Port module event[error]: module 0, Cable error, High Temperature\n DEVICE=+pci:0000:41:00.0\n"))
	f.Add([]byte("4,1,1,-; mlx5e_napi_poll+0x5f/0x700 [mlx5_core]\n"))
	ix := newIndex([]Device{{Name: "rxe0", PCI: "0000:41:00.0", Netdevs: []string{"eth0"}, Ifindexes: []int{2}}})
	f.Fuzz(func(t *testing.T, b []byte) {
		// The literals of each pattern are in every message it matches.
		for i := range Catalog {
			if p := &Catalog[i]; p.Re.Match(b) && !p.prefilter(b) {
				t.Fatalf("pattern %s matches %q, which has none of its literals %q", p.Name, b, p.Any)
			}
		}
		// Escaping is printable, bounded, and needs only the first
		// MaxLine+1 bytes.
		full := printable(nil, b, MaxLine)
		checkPrintable(t, full)
		if cut := printable(nil, b[:min(len(b), MaxLine+1)], MaxLine); string(cut) != string(full) {
			t.Fatalf("printable of %q: %q, of its first %d bytes %q", b, full, MaxLine+1, cut)
		}

		r, err := ParseRecord(b)
		if err != nil {
			if !errors.Is(err, errRecord) {
				t.Fatalf("error %v does not match errRecord", err)
			}
			return
		}
		if r.Priority < 0 || r.Priority > 7 || r.Facility < 0 {
			t.Fatalf("priority %d facility %d", r.Priority, r.Facility)
		}
		if len(r.Message)+len(r.Subsystem)+len(r.Device) > len(b) {
			t.Fatalf("parts longer than the input")
		}
		// Matching never panics on what parses.
		if h, ok := ix.match(&r, true); ok && (h.device == "" || h.pattern == "" || h.class == "") {
			t.Fatalf("match ok with %+v", h)
		}
	})
}
