package peer

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestPayloadRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		p    Payload
	}{
		{"probe", Payload{Kind: KindProbe, Seq: 1, SentAt: 12345, GID: [16]byte{10: 0xff, 11: 0xff, 12: 192, 13: 168, 14: 77, 15: 1}}},
		{"reply", Payload{Kind: KindReply, Seq: 1 << 60, SentAt: 5, RecvAt: 100, ReplyAt: 150}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := make([]byte, PayloadSize)
			tt.p.Encode(b)
			got, err := DecodePayload(b)
			if err != nil {
				t.Fatalf("DecodePayload: %v", err)
			}
			if diff := cmp.Diff(tt.p, got); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodePayloadRejects(t *testing.T) {
	good := make([]byte, PayloadSize)
	(&Payload{Kind: KindReply, Seq: 7, RecvAt: 10, ReplyAt: 20}).Encode(good)
	mut := func(f func(b []byte) []byte) []byte {
		return f(append([]byte(nil), good...))
	}
	tests := []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"short", good[:PayloadSize-1]},
		{"long", append(append([]byte(nil), good...), 0)},
		{"magic", mut(func(b []byte) []byte { b[0] = 'X'; return b })},
		{"version", mut(func(b []byte) []byte { b[4] = 2; return b })},
		{"kind", mut(func(b []byte) []byte { b[5] = 9; return b })},
		{"flags", mut(func(b []byte) []byte { b[7] = 1; return b })},
		{"reserved", mut(func(b []byte) []byte { b[63] = 1; return b })},
		{"reply runs backwards", mut(func(b []byte) []byte { b[39] = 0; return b })},
		{"probe with responder times", mut(func(b []byte) []byte { b[5] = KindProbe; return b })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := DecodePayload(tt.b); !errors.Is(err, ErrMalformed) {
				t.Errorf("DecodePayload = %v, want ErrMalformed", err)
			}
		})
	}
}

func FuzzDecodePayload(f *testing.F) {
	b := make([]byte, PayloadSize)
	(&Payload{Kind: KindProbe, Seq: 3, SentAt: 9}).Encode(b)
	f.Add(b)
	(&Payload{Kind: KindReply, Seq: 3, SentAt: 9, RecvAt: 11, ReplyAt: 12}).Encode(b)
	f.Add(b)
	f.Add([]byte("RDPP"))
	f.Fuzz(func(t *testing.T, in []byte) {
		p, err := DecodePayload(in)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		// Whatever decodes must encode back to the same bytes: the
		// decoder accepts exactly the encoder's language.
		out := make([]byte, PayloadSize)
		p.Encode(out)
		if diff := cmp.Diff(in, out); diff != "" {
			t.Fatalf("re-encoding differs (-in +out):\n%s", diff)
		}
	})
}
