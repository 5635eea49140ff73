package wire

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func testFingerprint() Fingerprint {
	return Fingerprint{Version: "1.4.0", Kernel: "6.1.0-18-amd64", Ports: []FingerprintPort{
		{Index: 0, Key: "mlx5_0/1", Netdev: "ens1f0np0", NetdevMTU: 4200, ActiveMTU: 4096, LinkLayer: "Ethernet",
			FWVer: "22.39.1002", Driver: "mlx5_core", HasToS: true, ToS: 106, RoCEMode: "v2", Trust: "dscp", PFC: "3", RateMbps: 100000},
		{Index: 1, Key: "mlx5_1/1", NetdevMTU: 1500, LinkLayer: "Ethernet"},
	}}
}

func TestFingerprintRoundTrip(t *testing.T) {
	f := testFingerprint()
	b := f.Marshal()
	got, err := DecodeFingerprint(b)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(f, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	// Carried in a tagged version-2 query and answer, with padding.
	for _, typ := range []uint8{TypeQuery, TypeAnswer} {
		m := Message{Version: 2, Type: typ, Nonce: 3, Count: 1, QPN: 0x11, QKey: 3, Ext: WithFingerprint(b)}
		w, err := m.Append(nil, testKey)
		if err != nil {
			t.Fatal(err)
		}
		if typ == TypeQuery && len(w) != Size+QueryExtArea+TagSize {
			t.Errorf("padded query of %d bytes, want %d", len(w), Size+QueryExtArea+TagSize)
		}
		d, err := Decode(w, testKey)
		if err != nil || !d.Authenticated {
			t.Fatalf("Decode = %v, authenticated %v", err, d.Authenticated)
		}
		fp, ok, err := d.Fingerprint()
		if !ok || err != nil || !cmp.Equal(fp, f) {
			t.Errorf("Fingerprint() = %+v, %v, %v", fp, ok, err)
		}
		// The tag covers the fingerprint: change one MTU byte.
		i := bytes.Index(w, []byte{tagNetdevMTU, 4, 0, 0, 0x10, 0x68})
		if i < 0 {
			t.Fatal("MTU 4200 not found in the message")
		}
		w[i+5] = 0xdc
		if _, err := Decode(w, testKey); !errors.Is(err, ErrBadTag) {
			t.Errorf("altered fingerprint: %v, want ErrBadTag", err)
		}
	}
	// A message without one: not ok, no error.
	m := Message{Version: 2, Type: TypeAnswer}
	if _, ok, err := m.Fingerprint(); ok || err != nil {
		t.Errorf("no fingerprint: ok %v err %v", ok, err)
	}
}

// TestFingerprintBounds: long strings are cut, control characters
// replaced, and ports that do not fit are left out and counted.
func TestFingerprintBounds(t *testing.T) {
	long := strings.Repeat("é", 40) // 80 bytes
	f := Fingerprint{Version: long, Kernel: "6.1\x1b[31m"}
	for i := range 12 {
		f.Ports = append(f.Ports, FingerprintPort{Index: uint8(i), Key: strings.Repeat("k", 70), FWVer: long, Driver: long, Netdev: long})
	}
	b := f.Marshal()
	if len(b) > MaxFingerprint {
		t.Fatalf("%d bytes, at most %d", len(b), MaxFingerprint)
	}
	got, err := DecodeFingerprint(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Version) != 64 || got.Version != strings.Repeat("é", 32) || got.Kernel != "6.1?[31m" {
		t.Errorf("strings %q %q: want cut at 64 bytes on a rune boundary, escape replaced", got.Version, got.Kernel)
	}
	if len(got.Ports) == 0 || len(got.Ports)+got.Omitted != 12 {
		t.Errorf("%d ports + %d omitted, want 12 in all", len(got.Ports), got.Omitted)
	}
	// Many small ports: at most MaxFingerprintPorts.
	f = Fingerprint{}
	for i := range 20 {
		f.Ports = append(f.Ports, FingerprintPort{Index: uint8(i), Key: "d/1"})
	}
	got, err = DecodeFingerprint(f.Marshal())
	if err != nil || len(got.Ports) != MaxFingerprintPorts || got.Omitted != 20-MaxFingerprintPorts {
		t.Errorf("20 small ports: %d carried, %d omitted, %v", len(got.Ports), got.Omitted, err)
	}
}

func TestFingerprintRejects(t *testing.T) {
	for name, b := range map[string][]byte{
		"overrun":            {tagVersion, 5, 'a'},
		"stray byte":         {tagVersion, 1, 'a', 9},
		"field before port":  {tagNetdevMTU, 4, 0, 0, 5, 0xdc},
		"mtu size":           {tagPort, 1, 0, tagNetdevMTU, 2, 5, 0xdc},
		"control character":  {tagKernel, 2, 'a', 0x1b},
		"invalid utf-8":      {tagKernel, 2, 0xff, 0xfe},
		"rate size":          {tagPort, 1, 0, tagRate, 2, 1, 0},
		"port without index": {tagPort, 0},
		"port twice":         {tagPort, 1, 0, tagPort, 1, 0},
		"too long":           bytes.Repeat([]byte{0x7e, 0}, MaxFingerprint/2+1),
	} {
		if _, err := DecodeFingerprint(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
	// Unknown tags are skipped: a later version may add fields.
	f, err := DecodeFingerprint([]byte{0x7e, 2, 1, 2, tagPort, 1, 3, 0x7f, 0, tagTrust, 4, 'd', 's', 'c', 'p'})
	if err != nil || len(f.Ports) != 1 || f.Ports[0].Index != 3 || f.Ports[0].Trust != "dscp" {
		t.Errorf("unknown tags: %+v, %v", f, err)
	}
	// A message whose fingerprint is malformed is malformed as a whole:
	// the receiver counts it and keeps nothing of it.
	m := Message{Version: 2, Type: TypeAnswer, Nonce: 1, Ext: []Ext{{Type: ExtFingerprint, Value: []byte{tagKernel, 9}}}}
	w, _ := m.Append(nil, nil)
	if _, err := Decode(w, nil); !errors.Is(err, ErrMalformed) {
		t.Errorf("message with a malformed fingerprint: %v, want ErrMalformed", err)
	}
}

// TestFingerprintNotPrintable performs #24's attack: fingerprint strings
// with C1 controls, bidi overrides and isolates, zero-width and separator
// characters, U+FFFD or invalid UTF-8, in every string field. Each makes
// the whole message malformed at Decode (the control endpoint counts it
// as such and keeps nothing of it); Marshal replaces such characters, so
// this rdmad never sends one.
func TestFingerprintNotPrintable(t *testing.T) {
	bad := map[string]string{
		"C1 NEL":             "a\u0085b",
		"C1 CSI":             "a\u009b31m",
		"bidi override RLO":  "fw\u202e1.2",
		"bidi isolate LRI":   "x\u2066y",
		"bidi mark RLM":      "x\u200fy",
		"arabic letter mark": "x\u061cy",
		"zero width space":   "x\u200by",
		"line separator":     "x\u2028y",
		"no-break space":     "x\u00a0y",
		"replacement char":   "x\ufffdy",
		"invalid utf-8":      "x\xc3(",
		"ESC":                "x\x1b[2J",
		"DEL":                "x\x7f",
	}
	fields := map[string]func(p *FingerprintPort, f *Fingerprint, s string){
		"version":   func(_ *FingerprintPort, f *Fingerprint, s string) { f.Version = s },
		"kernel":    func(_ *FingerprintPort, f *Fingerprint, s string) { f.Kernel = s },
		"key":       func(p *FingerprintPort, _ *Fingerprint, s string) { p.Key = s },
		"netdev":    func(p *FingerprintPort, _ *Fingerprint, s string) { p.Netdev = s },
		"firmware":  func(p *FingerprintPort, _ *Fingerprint, s string) { p.FWVer = s },
		"driver":    func(p *FingerprintPort, _ *Fingerprint, s string) { p.Driver = s },
		"link":      func(p *FingerprintPort, _ *Fingerprint, s string) { p.LinkLayer = s },
		"roce mode": func(p *FingerprintPort, _ *Fingerprint, s string) { p.RoCEMode = s },
		"trust":     func(p *FingerprintPort, _ *Fingerprint, s string) { p.Trust = s },
		"pfc":       func(p *FingerprintPort, _ *Fingerprint, s string) { p.PFC = s },
	}
	for bname, str := range bad {
		for fname, set := range fields {
			f := Fingerprint{Ports: []FingerprintPort{{Index: 0, Key: "mlx5_0/1"}}}
			set(&f.Ports[0], &f, str)
			// A hostile sender writes the raw bytes (Marshal would
			// clean them).
			raw := rawFingerprint(f)
			if _, err := DecodeFingerprint(raw); !errors.Is(err, ErrMalformed) {
				t.Errorf("%s in %s: DecodeFingerprint = %v, want ErrMalformed", bname, fname, err)
			}
			for _, typ := range []uint8{TypeQuery, TypeAnswer} {
				m := Message{Version: 2, Type: typ, Nonce: 1, Count: 1, QPN: 0x11, QKey: 3, Ext: WithFingerprint(raw)}
				for _, key := range [][]byte{nil, testKey} {
					w, err := m.Append(nil, key)
					if err != nil {
						t.Fatal(err)
					}
					if _, err := Decode(w, key); !errors.Is(err, ErrMalformed) {
						t.Errorf("%s in %s, type %d, key %v: Decode = %v, want ErrMalformed", bname, fname, typ, key != nil, err)
					}
				}
			}
			// What this rdmad sends is clean.
			if got, err := DecodeFingerprint(f.Marshal()); err != nil {
				t.Errorf("%s in %s: Marshal sent what Decode refuses: %v", bname, fname, err)
			} else if s := got.Version + got.Kernel + got.Ports[0].Key + got.Ports[0].FWVer; !Printable(s) {
				t.Errorf("%s in %s: Marshal sent %q", bname, fname, s)
			}
		}
	}
	// Printable text of other scripts is text.
	if !Printable("Grüße 1.2-ü 固件") || Printable("a\u202eb") {
		t.Errorf("Printable judges wrong")
	}
	// Checking allocates nothing (Decode checks every fingerprint).
	fp := testFingerprint()
	b := fp.Marshal()
	if a := testing.AllocsPerRun(100, func() { CheckFingerprint(b) }); a != 0 {
		t.Errorf("CheckFingerprint: %v allocations, want 0", a)
	}
}

// rawFingerprint encodes f as Marshal does but without cleaning strings.
func rawFingerprint(f Fingerprint) []byte {
	str := func(b []byte, tag byte, s string) []byte {
		if s == "" {
			return b
		}
		return append(append(b, tag, byte(len(s))), s...)
	}
	b := str(nil, tagVersion, f.Version)
	b = str(b, tagKernel, f.Kernel)
	for _, p := range f.Ports {
		b = append(b, tagPort, byte(1+len(p.Key)), p.Index)
		b = append(b, p.Key...)
		b = str(b, tagNetdev, p.Netdev)
		b = str(b, tagLinkLayer, p.LinkLayer)
		b = str(b, tagFWVer, p.FWVer)
		b = str(b, tagDriver, p.Driver)
		b = str(b, tagRoCEMode, p.RoCEMode)
		b = str(b, tagTrust, p.Trust)
		b = str(b, tagPFC, p.PFC)
	}
	return b
}

func FuzzDecodeFingerprint(f *testing.F) {
	fp := testFingerprint()
	f.Add(fp.Marshal())
	f.Add([]byte{tagPort, 1, 0})
	f.Add([]byte{0x7e, 2, 1, 2, tagPort, 1, 3, tagToS, 1, 106})
	f.Fuzz(func(t *testing.T, in []byte) {
		got, err := DecodeFingerprint(in)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		// What decodes re-encodes within the bounds and decodes the same
		// (unknown tags dropped).
		b := got.Marshal()
		if len(b) > MaxFingerprint {
			t.Fatalf("re-encoded to %d bytes", len(b))
		}
		again, err := DecodeFingerprint(b)
		if err != nil {
			t.Fatalf("re-decoding: %v", err)
		}
		if diff := cmp.Diff(got, again); diff != "" {
			t.Fatalf("re-encoding changed it (-first +second):\n%s", diff)
		}
	})
}

// TestMarshalCleanFingerprintAllocatesOnce: a node rebuilds its own
// fingerprint every few seconds (probe's fingerprintEvery), and its
// strings are nearly always printable and short: Marshal makes its buffer
// and copies none of them.
func TestMarshalCleanFingerprintAllocatesOnce(t *testing.T) {
	f := testFingerprint()
	if n := testing.AllocsPerRun(100, func() { f.Marshal() }); n != 1 {
		t.Errorf("Marshal of a clean fingerprint: %.0f allocations, want 1 (its buffer)", n)
	}
	// A string that needs cleaning is still cleaned.
	f.Ports[0].FWVer = "22.39\x1b[31m"
	got, err := DecodeFingerprint(f.Marshal())
	if err != nil || got.Ports[0].FWVer != "22.39?[31m" {
		t.Errorf("FWVer after cleaning %q (%v), want the escape replaced", got.Ports[0].FWVer, err)
	}
}
