package wire

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		m    Message
	}{
		{"query", Message{Type: TypeQuery, Nonce: 42, Index: 1, Count: 2, QPN: 0x11, QKey: 0x1234, GID: [16]byte{10: 0xff, 11: 0xff, 12: 192, 13: 168, 14: 77, 15: 2}, NodeID: 99}},
		{"answer", Message{Type: TypeAnswer, Nonce: 1<<64 - 1, Index: 0, Count: 1, QPN: 0xffffff, QKey: 7, LID: 3}},
		{"answer without ports", Message{Type: TypeAnswer, Nonce: 5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tt.m.Encode()
			got, err := Decode(b[:])
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if diff := cmp.Diff(tt.m, got); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodeRejects(t *testing.T) {
	q := Message{Type: TypeQuery, Nonce: 1, Count: 1, QPN: 0x11, QKey: 5}
	good := q.Encode()
	mut := func(i int, v byte) []byte {
		b := good
		b[i] = v
		return b[:]
	}
	tests := []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"short", good[:Size-1]},
		{"long", append(good[:], 0)},
		{"magic", mut(0, 'x')},
		{"version", mut(4, 2)},
		{"type", mut(5, 3)},
		{"flags", mut(7, 1)},
		{"reserved", mut(63, 1)},
		{"QPN over 24 bits", mut(20, 1)},
		{"query without ports", mut(17, 0)},
		{"controlled qkey", mut(24, 0x80)},
		{"answer index past count", func() []byte {
			a := Message{Type: TypeAnswer, Index: 2, Count: 2, QPN: 1}
			b := a.Encode()
			return b[:]
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Decode(tt.b); !errors.Is(err, ErrMalformed) {
				t.Errorf("Decode = %v, want ErrMalformed", err)
			}
		})
	}
}

func FuzzDecode(f *testing.F) {
	q := Message{Type: TypeQuery, Nonce: 1, Count: 1, QPN: 0x11, QKey: 5}
	b := q.Encode()
	f.Add(b[:])
	a := Message{Type: TypeAnswer, Nonce: 1, Count: 2, Index: 1, QPN: 0x12, QKey: 6}
	b = a.Encode()
	f.Add(b[:])
	f.Add([]byte("RDPC\x01"))
	f.Fuzz(func(t *testing.T, in []byte) {
		m, err := Decode(in)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		// The decoder accepts exactly what the encoder writes.
		out := m.Encode()
		if diff := cmp.Diff(in, out[:]); diff != "" {
			t.Fatalf("re-encoding differs (-in +out):\n%s", diff)
		}
	})
}
