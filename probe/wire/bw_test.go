package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var bwGID = [16]byte{10: 0xff, 11: 0xff, 12: 192, 13: 168, 14: 77, 15: 1}

// bwSeeds are one message of each bandwidth type, for the round trip and
// as FuzzDecode's seeds.
func bwSeeds() []Message {
	return []Message{
		{Version: 2, Type: TypeBWRequest, Nonce: 7, QPN: 0x11, GID: bwGID, NodeID: 3,
			Ext: []Ext{BW{Op: BWWrite, MTU: 3, PSN: 0xabcdef, Size: 65536, Duration: 3 * time.Second}.Ext()}},
		{Version: 2, Type: TypeBWAnswer, Nonce: 7, QPN: 0x12, GID: bwGID, NodeID: 4,
			Ext: []Ext{BW{Op: BWRead, MTU: 5, PSN: 1, Size: 1 << 20, Duration: 30 * time.Second, Addr: 0x7f0000001000, RKey: 0x1234}.Ext()}},
		{Version: 2, Type: TypeBWAnswer, Nonce: 8, NodeID: 4, Ext: []Ext{BW{Op: BWSend, Status: BWBusy}.Ext()}},
		{Version: 2, Type: TypeBWDone, Nonce: 7, QPN: 0x11, NodeID: 3, Ext: []Ext{BW{Op: BWSend}.Ext()}},
		{Version: 2, Type: TypeBWRequest, Nonce: 10, QPN: 0x11, GID: bwGID, NodeID: 3,
			Ext: []Ext{BW{Op: BWWrite, MTU: 3, PSN: 5, Size: 4096, Duration: time.Second}.Ext(), BWQPsExt([]BWQP{{QPN: 0x13, PSN: 6}, {QPN: 0x15, PSN: 0xffffff}})}},
		{Version: 2, Type: TypeBWAnswer, Nonce: 10, QPN: 0x21, GID: bwGID, NodeID: 4,
			Ext: []Ext{BW{Op: BWWrite, MTU: 3, PSN: 7, Size: 4096, Duration: time.Second, Addr: 0x1000, RKey: 9}.Ext(),
				BWQPsExt([]BWQP{{QPN: 0x23, PSN: 8, Addr: 0x2000, RKey: 10}, {QPN: 0x25, PSN: 9, Addr: 0x3000, RKey: 11}})}},
		{Version: 2, Type: TypeBWRequest, Nonce: 9, QPN: 0x11, GID: bwGID, NodeID: 3,
			Ext: []Ext{BW{Op: BWRead, MTU: 3, PSN: 5, Size: 4096, Duration: time.Second}.Ext(), BWTimeExt(time.UnixMilli(1795000000123))}},
	}
}

// TestBWTime: a request's time round-trips to the millisecond; a time in
// another message, twice, or of another size is malformed.
func TestBWTime(t *testing.T) {
	seeds := bwSeeds()
	m := seeds[len(seeds)-1]
	b, _ := m.Append(nil, testKey)
	d, err := Decode(b, testKey)
	if err != nil {
		t.Fatal(err)
	}
	if at, ok := BWTimeOf(d); !ok || at.UnixMilli() != 1795000000123 {
		t.Errorf("BWTimeOf = %v, %v", at, ok)
	}
	if _, ok := BWTimeOf(seeds[0]); ok {
		t.Errorf("a request without a time has one")
	}
	tm := BWTimeExt(time.Now())
	for name, bad := range map[string]Message{
		"twice":    {Version: 2, Type: TypeBWRequest, Nonce: 9, QPN: 0x11, Ext: append(append([]Ext{}, m.Ext...), tm)},
		"short":    {Version: 2, Type: TypeBWRequest, Nonce: 9, QPN: 0x11, Ext: []Ext{m.Ext[0], {Type: ExtBWTime, Value: tm.Value[:7]}}},
		"in done":  {Version: 2, Type: TypeBWDone, Nonce: 7, QPN: 0x11, Ext: []Ext{BW{Op: BWSend}.Ext(), tm}},
		"in query": {Version: 2, Type: TypeQuery, Nonce: 7, Count: 1, QPN: 0x11, QKey: 3, Ext: []Ext{tm}},
	} {
		b, err := bad.Append(nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Decode(b, nil); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
}

func TestBWRoundTrip(t *testing.T) {
	for _, m := range bwSeeds() {
		for _, key := range [][]byte{nil, testKey} {
			b, err := m.Append(nil, key)
			if err != nil {
				t.Fatalf("Append %d: %v", m.Type, err)
			}
			got, err := Decode(b, key)
			if err != nil {
				t.Fatalf("Decode %d: %v", m.Type, err)
			}
			want := m
			want.Tagged, want.Authenticated = key != nil, key != nil
			if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b []byte) bool { return bytes.Equal(a, b) })); diff != "" {
				t.Errorf("type %d round trip (-want +got):\n%s", m.Type, diff)
			}
			wb, _ := BWOf(m)
			gb, err := BWOf(got)
			if err != nil || wb != gb {
				t.Errorf("BWOf = %+v, %v; want %+v", gb, err, wb)
			}
			if w, g := BWQPsOf(m), BWQPsOf(got); !cmp.Equal(w, g) {
				t.Errorf("BWQPsOf = %+v; want %+v", g, w)
			}
		}
	}
}

// TestBWHostile feeds the decoder bandwidth messages that must be dropped:
// each is what a careless or hostile sender could put on the wire.
func TestBWHostile(t *testing.T) {
	req := bwSeeds()[0]
	enc := func(m Message) []byte {
		b, err := m.Append(nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// ext returns req's encoding with the bandwidth extension's value
	// changed by f.
	ext := func(f func(v []byte)) []byte {
		b := enc(req)
		f(b[Size+4 : Size+4+bwExtLen])
		return b
	}
	with := func(f func(m *Message)) []byte {
		m := req
		m.Ext = append([]Ext(nil), req.Ext...)
		f(&m)
		return enc(m)
	}
	v1 := req.Encode() // version 1 cannot carry the extension
	tests := []struct {
		name string
		in   []byte
		want string
	}{
		{"version 1", v1[:], "version 2"},
		{"no extension", with(func(m *Message) { m.Ext = nil }), "without its extension"},
		{"two extensions", with(func(m *Message) { m.Ext = append(m.Ext, m.Ext[0]) }), "two bandwidth extensions"},
		{"short extension", with(func(m *Message) { m.Ext[0].Value = m.Ext[0].Value[:8] }), "bytes, want"},
		{"unknown op", ext(func(v []byte) { v[0] = 9 }), "operation"},
		{"op zero", ext(func(v []byte) { v[0] = 0 }), "operation"},
		{"reserved byte", ext(func(v []byte) { v[3] = 1 }), "reserved"},
		{"reserved tail", ext(func(v []byte) { v[31] = 1 }), "reserved"},
		{"PSN over 24 bits", ext(func(v []byte) { binary.BigEndian.PutUint32(v[4:], 1<<24) }), "PSN"},
		{"request with a status", ext(func(v []byte) { v[1] = 1 }), "a bandwidth request"},
		{"request with an rkey", ext(func(v []byte) { v[24] = 1 }), "a bandwidth request"},
		{"request without a QP", with(func(m *Message) { m.QPN = 0 }), "a bandwidth request"},
		{"qkey set", with(func(m *Message) { m.QKey = 1 }), "qkey"},
		{"count set", with(func(m *Message) { m.Count = 1 }), "count"},
		{"answer status unknown", with(func(m *Message) {
			m.Type = TypeBWAnswer
			m.Ext[0] = BW{Op: BWWrite, Status: maxBWStatus + 1}.Ext()
		}), "status"},
		{"accepted without a QP", with(func(m *Message) { m.Type, m.QPN = TypeBWAnswer, 0 }), "without a QP"},
		{"done with an rkey", with(func(m *Message) {
			m.Type = TypeBWDone
			m.Ext[0] = BW{Op: BWWrite, RKey: 5}.Ext()
		}), "done message"},
		{"extension in a query", with(func(m *Message) { m.Type, m.Count, m.QKey = TypeQuery, 1, 5 }), "bandwidth extension in a message"},
		{"queue pairs in a query", enc(Message{Version: 2, Type: TypeQuery, Nonce: 7, Count: 1, QPN: 0x11, QKey: 3,
			Ext: []Ext{BWQPsExt([]BWQP{{QPN: 1}})}}), "bandwidth extension in a message"},
		{"queue pairs twice", with(func(m *Message) {
			m.Ext = append(m.Ext, BWQPsExt([]BWQP{{QPN: 1}}), BWQPsExt([]BWQP{{QPN: 2}}))
		}), "at most one set"},
		{"queue pairs empty", with(func(m *Message) { m.Ext = append(m.Ext, Ext{Type: ExtBWQPs}) }), "at most one set"},
		{"queue pairs cut", with(func(m *Message) { m.Ext = append(m.Ext, Ext{Type: ExtBWQPs, Value: make([]byte, 19)}) }), "at most one set"},
		{"16 more queue pairs", with(func(m *Message) { m.Ext = append(m.Ext, BWQPsExt(make([]BWQP, MaxBWQPs))) }), "at most one set"},
		{"queue pairs in done", with(func(m *Message) {
			m.Type = TypeBWDone
			m.Ext = append(m.Ext, BWQPsExt([]BWQP{{QPN: 1}}))
		}), "a done message none"},
		{"listed QPN zero", with(func(m *Message) { m.Ext = append(m.Ext, BWQPsExt([]BWQP{{QPN: 0}})) }), "a listed queue pair"},
		{"listed PSN over 24 bits", with(func(m *Message) { m.Ext = append(m.Ext, BWQPsExt([]BWQP{{QPN: 1, PSN: 1 << 24}})) }), "a listed queue pair"},
		{"listed rkey in a request", with(func(m *Message) { m.Ext = append(m.Ext, BWQPsExt([]BWQP{{QPN: 1, RKey: 3}})) }), "a listed queue pair"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode(tt.in, nil)
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Decode = %v; want ErrMalformed saying %q", err, tt.want)
			}
		})
	}
	// A tag made with another key is a bad tag, not a request.
	b, _ := req.Append(nil, ControlKey([]byte("another key, another fleet")))
	if _, err := Decode(b, testKey); !errors.Is(err, ErrBadTag) {
		t.Errorf("Decode with another key = %v; want ErrBadTag", err)
	}
}

func TestBWOpAndStatus(t *testing.T) {
	for _, s := range []string{"write", "read", "send"} {
		o, err := ParseBWOp(s)
		if err != nil || o.String() != s {
			t.Errorf("ParseBWOp(%q) = %v, %v", s, o, err)
		}
	}
	if _, err := ParseBWOp("atomic"); err == nil || !strings.Contains(err.Error(), "use write, read or send") {
		t.Errorf("ParseBWOp(atomic) = %v; want an error naming the choices", err)
	}
	for s := BWDisabled; s <= maxBWStatus; s++ {
		if r := s.Reason(); r == "" || strings.HasPrefix(r, "status") {
			t.Errorf("status %d has no reason", s)
		}
	}
	if !strings.Contains(BWDisabled.Reason(), "[probe] bandwidth = true") {
		t.Errorf("the disabled reason %q does not say how to enable", BWDisabled.Reason())
	}
}
