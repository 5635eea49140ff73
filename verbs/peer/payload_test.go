package peer

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rdmad/rdmad/probe/ud"
	"github.com/rdmad/rdmad/verbs"
)

func TestPayloadRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		p    Payload
	}{
		{"probe", Payload{Version: PayloadV1, Kind: KindProbe, Seq: 1, SentAt: 12345, GID: [16]byte{10: 0xff, 11: 0xff, 12: 192, 13: 168, 14: 77, 15: 1}}},
		{"reply", Payload{Version: PayloadV1, Kind: KindReply, Seq: 1 << 60, SentAt: 5, RecvAt: 100, ReplyAt: 150}},
		{"v2 probe", Payload{Version: PayloadV2, Kind: KindProbe, Seq: 2, SentAt: 12345, Tag: [TagSize]byte{0: 1, 15: 0xff}}},
		{"v2 reply", Payload{Version: PayloadV2, Kind: KindReply, Seq: 3, SentAt: 5, RecvAt: 100, ReplyAt: 150, Tag: [TagSize]byte{7: 7}}},
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
		{"version 0", mut(func(b []byte) []byte { b[4] = 0; return b })},
		{"version 3", mut(func(b []byte) []byte { b[4] = 3; return b })},
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

// TestDecodePayloadV2Rejects covers what differs in version 2: the GID's
// place is reserved, so a version-1 payload with a GID relabelled as
// version 2 is malformed, not a payload with a strange tag.
func TestDecodePayloadV2Rejects(t *testing.T) {
	b := make([]byte, PayloadSize)
	(&Payload{Version: PayloadV1, Kind: KindProbe, Seq: 1, SentAt: 2, GID: [16]byte{0: 0xfe, 1: 0x80, 15: 1}}).Encode(b)
	b[4] = PayloadV2
	if _, err := DecodePayload(b); !errors.Is(err, ErrMalformed) {
		t.Errorf("v1 payload with a GID relabelled v2: DecodePayload = %v, want ErrMalformed", err)
	}
	(&Payload{Version: PayloadV2, Kind: KindProbe, Seq: 1, SentAt: 2}).Encode(b)
	b[47] = 1
	if _, err := DecodePayload(b); !errors.Is(err, ErrMalformed) {
		t.Errorf("v2 reserved byte set: DecodePayload = %v, want ErrMalformed", err)
	}
}

func FuzzDecodePayload(f *testing.F) {
	b := make([]byte, PayloadSize)
	(&Payload{Kind: KindProbe, Seq: 3, SentAt: 9}).Encode(b)
	f.Add(bytes.Clone(b))
	(&Payload{Kind: KindReply, Seq: 3, SentAt: 9, RecvAt: 11, ReplyAt: 12}).Encode(b)
	f.Add(bytes.Clone(b))
	(&Payload{Version: PayloadV2, Kind: KindReply, Seq: 3, SentAt: 9, RecvAt: 11, ReplyAt: 12, Tag: [TagSize]byte{1, 2, 3}}).Encode(b)
	f.Add(bytes.Clone(b))
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

// TestReclaim checks the unsignalled-send bookkeeping: one completion
// returns the slots of every send posted before it, in posting order, and
// the ring wraps.
func TestReclaim(t *testing.T) {
	p := &udPort{flows: []flowQP{{posted: ring{buf: make([]int, 4)}}}}
	f := &p.flows[0]
	post := func(slots ...int) {
		for _, s := range slots {
			f.posted.push(s)
		}
	}
	post(7, 3, 9)
	p.reclaim(f, 3) // the second send was signalled
	if want := []int{7, 3}; !slices.Equal(p.free, want) || f.posted.size != 1 {
		t.Fatalf("after reclaim(3): free %v, %d in flight; want %v, 1", p.free, f.posted.size, want)
	}
	post(1, 2, 5) // wraps around the 4-slot ring
	p.reclaim(f, 5)
	if want := []int{7, 3, 9, 1, 2, 5}; !slices.Equal(p.free, want) || f.posted.size != 0 {
		t.Fatalf("after reclaim(5): free %v, %d in flight; want %v, 0", p.free, f.posted.size, want)
	}
	// A completion for a slot not in flight frees what is there and
	// stops at an empty ring rather than looping.
	post(4)
	p.reclaim(f, 8)
	if f.posted.size != 0 || p.free[len(p.free)-1] != 4 {
		t.Fatalf("after reclaim of an unknown slot: free %v, %d in flight", p.free, f.posted.size)
	}
}

// TestRxeSourcePort checks the Soft-RoCE source port formula against
// values worked out by hand from the kernel's definition (0xc000 +
// ((qpn * 0x61c88647) mod 2^32) >> 18) and that it stays in the dynamic
// range.
func TestRxeSourcePort(t *testing.T) {
	for _, c := range []struct {
		qpn  uint32
		want uint16
	}{
		{0, 0xc000},
		{1, 0xc000 + 0x1872},  // 0x61c88647 >> 18
		{17, 0xc000 + 0x1f94}, // 17 * 0x61c88647 = 0x67e50eab7, mod 2^32 0x7e50eab7, >> 18
	} {
		if got := rxeSourcePort(c.qpn); got != c.want {
			t.Errorf("rxeSourcePort(%d) = %#x, want %#x", c.qpn, got, c.want)
		}
	}
	for qpn := uint32(0); qpn < 1<<16; qpn += 7 {
		if p := rxeSourcePort(qpn); p < 0xc000 {
			t.Fatalf("rxeSourcePort(%d) = %d, below the dynamic range", qpn, p)
		}
	}
}

// TestPendingFlow: a reply is taken only on the flow whose QP sent the
// probe; one that comes to another flow's QP leaves the entry alone.
func TestPendingFlow(t *testing.T) {
	pt := newPendingTable(16)
	dst := ud.Endpoint{GID: verbs.GID{15: 2}, QPN: 0x22}
	pt.add(5, 100, dst, PayloadV1, 1)
	if _, ok := pt.match(5, dst.GID, dst.QPN, PayloadV1, 0, 200); ok {
		t.Error("a reply on flow 0 matched a probe of flow 1")
	}
	if sent, ok := pt.match(5, dst.GID, dst.QPN, PayloadV1, 1, 200); !ok || sent != 100 {
		t.Errorf("the reply on flow 1: %d, %v", sent, ok)
	}
}
