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
			FWVer: "22.39.1002", Driver: "mlx5_core", HasToS: true, ToS: 106, RoCEMode: "v2", Trust: "dscp", PFC: "3"},
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
	// A message whose fingerprint is malformed still decodes; only the
	// fingerprint is refused.
	m := Message{Version: 2, Type: TypeAnswer, Nonce: 1, Ext: []Ext{{Type: ExtFingerprint, Value: []byte{tagKernel, 9}}}}
	w, _ := m.Append(nil, nil)
	d, err := Decode(w, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := d.Fingerprint(); ok || !errors.Is(err, ErrMalformed) {
		t.Errorf("malformed fingerprint: ok %v, %v", ok, err)
	}
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
