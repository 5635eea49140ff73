package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var testKey = ControlKey([]byte("0123456789abcdef0123456789abcdef"))

func TestRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		m    Message
		key  []byte
	}{
		{"query v1", Message{Version: 1, Type: TypeQuery, Nonce: 42, Index: 1, Count: 2, QPN: 0x11, QKey: 0x1234, GID: [16]byte{10: 0xff, 11: 0xff, 12: 192, 13: 168, 14: 77, 15: 2}, NodeID: 99}, nil},
		{"answer v1", Message{Version: 1, Type: TypeAnswer, Nonce: 1<<64 - 1, Index: 0, Count: 1, QPN: 0xffffff, QKey: 7, LID: 3}, nil},
		{"answer without ports v1", Message{Version: 1, Type: TypeAnswer, Nonce: 5}, nil},
		{"query v2 untagged", Message{Version: 2, Type: TypeQuery, Nonce: 42, Count: 1, QPN: 0x11, QKey: 3, NodeID: 9}, nil},
		{"query v2 tagged", Message{Version: 2, Type: TypeQuery, Nonce: 42, Count: 1, QPN: 0x11, QKey: 3, NodeID: 9, Tagged: true, Authenticated: true}, testKey},
		{"answer v2 with extensions", Message{Version: 2, Type: TypeAnswer, Nonce: 7, Count: 1, QPN: 0x12, QKey: 4,
			Ext: []Ext{{Type: 0x10, Value: []byte("fingerprint")}, {Type: 0x7fff, Value: []byte{}}}, Tagged: true, Authenticated: true}, testKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := tt.m.Append(nil, tt.key)
			if err != nil {
				t.Fatalf("Append: %v", err)
			}
			got, err := Decode(b, tt.key)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if diff := cmp.Diff(tt.m, got, cmp.Comparer(func(a, b []byte) bool { return bytes.Equal(a, b) })); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDecodeExtCopies: the extensions of a decoded message are copies of
// the datagram's bytes (the buffer is read into again), each capped, so
// that appending to one cannot write into the next; however many there are,
// they take two allocations.
func TestDecodeExtCopies(t *testing.T) {
	m := Message{Version: 2, Type: TypeAnswer, Nonce: 7, Count: 1, QPN: 0x12, QKey: 4,
		Ext: []Ext{{Type: 0x10, Value: []byte("one")}, {Type: 0x11, Value: []byte("two")}, {Type: 0x12}, {Type: 0x13, Value: []byte("three")}}}
	b, err := m.Append(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	clear(b) // the read buffer, reused
	_ = append(got.Ext[0].Value, "XXXX"...)
	want := []string{"one", "two", "", "three"}
	for i, e := range got.Ext {
		if string(e.Value) != want[i] || e.Type != m.Ext[i].Type {
			t.Errorf("extension %d = %#x %q, want %#x %q", i, e.Type, e.Value, m.Ext[i].Type, want[i])
		}
	}
	b, _ = m.Append(nil, nil)
	if a := testing.AllocsPerRun(100, func() { decodeExt(b[Size:], nil, true) }); a > 2 {
		t.Errorf("decoding four extensions allocates %v times, want 2", a)
	}
}

// TestDecodeAlias checks that DecodeAlias decodes as DecodeKeys does
// without allocating, its values in the datagram's bytes, and that Clone
// makes a message that outlives that buffer.
func TestDecodeAlias(t *testing.T) {
	m := Message{Version: 2, Type: TypeAnswer, Nonce: 9, Count: 1, QPN: 0x11, QKey: 3,
		Ext: []Ext{{Type: 0x20, Value: []byte("one")}, {Type: 0x21}, {Type: 0x22, Value: []byte("three")}}}
	key := []byte("k")
	b, err := m.Append(nil, key)
	if err != nil {
		t.Fatal(err)
	}
	want, err := DecodeKeys(b, key)
	if err != nil {
		t.Fatal(err)
	}
	exts := make([]Ext, 0, 4)
	got, err := DecodeAlias(b, exts, key)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("DecodeAlias = %+v, want %+v", got, want)
	}
	if &got.Ext[0] != &exts[:1][0] || &got.Ext[0].Value[0] != &b[Size+4] {
		t.Error("DecodeAlias's extensions are not in the given slice and the datagram")
	}
	kept := got.Clone()
	if !reflect.DeepEqual(kept, want) {
		t.Fatalf("Clone = %+v, want %+v", kept, want)
	}
	clear(b) // the read buffer, reused
	if string(kept.Ext[0].Value) != "one" || string(kept.Ext[2].Value) != "three" || kept.Ext[1].Value != nil {
		t.Errorf("the clone changed with the buffer: %+v", kept.Ext)
	}
	b, _ = m.Append(nil, nil)
	if a := testing.AllocsPerRun(100, func() { DecodeAlias(b, exts) }); a != 0 {
		t.Errorf("DecodeAlias allocates %v times, want 0", a)
	}
}

// TestV2Header checks that a version-2 message is the version-1 header with
// version 2, its flags and the extension length, then the extensions and
// the tag: a v1 node reading one sees "version 2" and drops it cleanly.
func TestV2Header(t *testing.T) {
	m := Message{Version: 2, Type: TypeQuery, Nonce: 0x0102030405060708, Count: 1, QPN: 0x11, QKey: 3,
		Ext: []Ext{{Type: 0x20, Value: []byte("abc")}}}
	b, err := m.Append(nil, testKey)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != Size+4+3+TagSize {
		t.Fatalf("%d bytes, want header 64 + extension 7 + tag 32", len(b))
	}
	if string(b[:4]) != "RDPC" || b[4] != 2 || b[6] != FlagAuthenticated || binary.BigEndian.Uint16(b[56:]) != 7 {
		t.Errorf("header % x: want magic, version 2, flag authenticated, extension length 7", b[:Size])
	}
	v1 := m
	v1.Ext = nil
	v1b := v1.Encode()
	if !bytes.Equal(b[8:56], v1b[8:56]) {
		t.Errorf("fields differ from the version-1 layout:\n% x\n% x", b[8:56], v1b[8:56])
	}
	if _, err := (&Message{Version: 1, Type: TypeQuery}).Append(nil, testKey); err == nil {
		t.Error("a version-1 message was tagged")
	}
	big := Message{Version: 2, Type: TypeQuery, Count: 1, QPN: 1, Ext: []Ext{{Type: 1, Value: make([]byte, MaxExtBytes)}}}
	if _, err := big.Append(nil, testKey); err == nil {
		t.Error("encoded a message over MaxSize")
	}
}

func TestDecodeRejects(t *testing.T) {
	q := Message{Version: 1, Type: TypeQuery, Nonce: 1, Count: 1, QPN: 0x11, QKey: 5}
	good := q.Encode()
	mut := func(i int, v byte) []byte {
		b := good
		b[i] = v
		return b[:]
	}
	q2 := Message{Version: 2, Type: TypeQuery, Nonce: 1, Count: 1, QPN: 0x11, QKey: 5, Ext: []Ext{{Type: 1, Value: []byte{1, 2}}}}
	good2, err := q2.Append(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	mut2 := func(i int, v byte) []byte {
		b := bytes.Clone(good2)
		b[i] = v
		return b
	}
	tests := []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"short", good[:Size-1]},
		{"long v1", append(good[:], 0)},
		{"magic", mut(0, 'x')},
		{"version 3", mut(4, 3)},
		{"type", mut(5, 3)},
		{"v1 flags", mut(6, 1)},
		{"reserved", mut(63, 1)},
		{"QPN over 24 bits", mut(20, 1)},
		{"query without ports", mut(17, 0)},
		{"controlled qkey", mut(24, 0x80)},
		{"answer index past count", func() []byte {
			a := Message{Version: 1, Type: TypeAnswer, Index: 2, Count: 2, QPN: 1}
			b := a.Encode()
			return b[:]
		}()},
		{"v2 unknown flag", mut2(6, 0x80)},
		{"v2 reserved", mut2(60, 1)},
		{"v2 extension length past the datagram", mut2(57, 7)},
		{"v2 extension overruns its area", mut2(Size+3, 9)},
		{"v2 critical extension", mut2(Size, 0x80)},
		{"v2 trailing byte", append(bytes.Clone(good2), 0)},
		{"v2 flagged but no tag", mut2(6, FlagAuthenticated)},
		{"v2 over MaxSize", func() []byte {
			b := make([]byte, MaxSize+1)
			copy(b, good2)
			return b
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Decode(tt.b, testKey); !errors.Is(err, ErrMalformed) {
				t.Errorf("Decode = %v, want ErrMalformed", err)
			}
		})
	}
}

// TestTag checks that a tag verifies only under the right key and over the
// exact bytes: any change to header, extensions or tag is caught.
func TestTag(t *testing.T) {
	m := Message{Version: 2, Type: TypeAnswer, Nonce: 77, Count: 1, QPN: 0x33, QKey: 9, Ext: []Ext{{Type: 5, Value: []byte("x")}}}
	b, err := m.Append(nil, testKey)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := Decode(b, testKey); err != nil || !got.Authenticated {
		t.Fatalf("Decode with the key = %+v, %v; want authenticated", got, err)
	}
	if _, err := Decode(b, ControlKey([]byte("another fleet's key, 32 bytes.."))); !errors.Is(err, ErrBadTag) {
		t.Errorf("Decode with another key = %v, want ErrBadTag", err)
	}
	for i := 8; i < len(b); i++ {
		if i >= 56 && i < 64 {
			continue // reserved and length: malformed rather than a bad tag
		}
		c := bytes.Clone(b)
		c[i] ^= 1
		if _, err := Decode(c, testKey); err == nil {
			t.Errorf("byte %d flipped: still decodes", i)
		}
	}
	// Without a key the tag cannot be checked: the message is read, but
	// not as authenticated.
	if got, err := Decode(b, nil); err != nil || got.Authenticated || !got.Tagged {
		t.Errorf("Decode without a key = %+v, %v; want tagged, not authenticated", got, err)
	}
	// An untagged message is never authenticated, key or not.
	u, _ := m.Append(nil, nil)
	if got, err := Decode(u, testKey); err != nil || got.Authenticated || got.Tagged {
		t.Errorf("untagged = %+v, %v; want not authenticated", got, err)
	}
}

func FuzzDecode(f *testing.F) {
	q := Message{Version: 1, Type: TypeQuery, Nonce: 1, Count: 1, QPN: 0x11, QKey: 5}
	b := q.Encode()
	f.Add(b[:])
	a := Message{Version: 1, Type: TypeAnswer, Nonce: 1, Count: 2, Index: 1, QPN: 0x12, QKey: 6}
	b = a.Encode()
	f.Add(b[:])
	f.Add([]byte("RDPC\x01"))
	q2 := Message{Version: 2, Type: TypeQuery, Nonce: 1, Count: 1, QPN: 0x11, QKey: 5, Ext: []Ext{{Type: 1, Value: []byte("v")}}}
	v2, _ := q2.Append(nil, nil)
	f.Add(v2)
	v2t, _ := q2.Append(nil, testKey)
	f.Add(v2t)
	fp := testFingerprint()
	q3 := Message{Version: 2, Type: TypeQuery, Nonce: 1, Count: 1, QPN: 0x11, QKey: 5, Ext: WithFingerprint(fp.Marshal())}
	v2f, _ := q3.Append(nil, testKey)
	f.Add(v2f)
	a3 := Message{Version: 2, Type: TypeAnswer, Nonce: 1, Count: 1, QPN: 0x12, QKey: 6, Ext: []Ext{{Type: ExtFingerprint, Value: fp.Marshal()}}}
	v2a, _ := a3.Append(nil, nil)
	f.Add(v2a)
	// The clock extension of a query and of an answer.
	qc := Message{Version: 2, Type: TypeQuery, Nonce: 1, Count: 1, QPN: 0x11, QKey: 5,
		Ext: append(WithFingerprint(fp.Marshal()), Ext{Type: ExtClock, Value: AppendClockQuery(nil, time.Unix(1_800_000_000, 0))})}
	v2c, _ := qc.Append(nil, testKey)
	f.Add(v2c)
	ac := Message{Version: 2, Type: TypeAnswer, Nonce: 1, Count: 1, QPN: 0x12, QKey: 6, Ext: []Ext{ClockAnswerExt(time.Unix(1_800_000_000, 0), time.Unix(1_800_000_000, 5000))}}
	v2ac, _ := ac.Append(nil, nil)
	f.Add(v2ac)
	for _, m := range bwSeeds() {
		b, _ := m.Append(nil, testKey)
		f.Add(b)
		b, _ = m.Append(nil, nil)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		m, err := Decode(in, testKey)
		// The control endpoint decodes what anyone sends with
		// DecodeAlias, into a room it keeps: it must take and refuse
		// exactly what Decode does, and give the same message.
		am, aerr := DecodeAlias(in, make([]Ext, 0, 1), testKey)
		if (err == nil) != (aerr == nil) || (err != nil && err.Error() != aerr.Error()) {
			t.Fatalf("Decode = %v, DecodeAlias = %v", err, aerr)
		}
		if err == nil && !reflect.DeepEqual(m, am) {
			t.Fatalf("Decode = %+v, DecodeAlias = %+v", m, am)
		}
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrBadTag) {
				t.Fatalf("error %v wraps neither ErrMalformed nor ErrBadTag", err)
			}
			return
		}
		if m.Tagged != m.Authenticated {
			t.Fatalf("tagged %v but authenticated %v under the key", m.Tagged, m.Authenticated)
		}
		// A clock taken is within the bounds a receiver relies on.
		if t1, ok := QueryClock(&m); ok && !validClock(t1) {
			t.Fatalf("query clock %d taken", t1)
		}
		if t2, t3, ok := AnswerClock(&m); ok && (!validClock(t2) || !validClock(t3) || t3 < t2) {
			t.Fatalf("answer clock %d %d taken", t2, t3)
		}
		// The decoder accepts exactly what the encoder writes.
		var key []byte
		if m.Tagged {
			key = testKey
		}
		out, err := m.Append(nil, key)
		if err != nil {
			t.Fatalf("re-encoding: %v", err)
		}
		if diff := cmp.Diff(in, out); diff != "" {
			t.Fatalf("re-encoding differs (-in +out):\n%s", diff)
		}
		// A message Decode takes carries only printable fingerprint
		// strings (#24 item 4): never one a terminal or D-Bus chokes on.
		if fp, ok, err := m.Fingerprint(); err != nil {
			t.Fatalf("Decode took a message whose fingerprint is malformed: %v", err)
		} else if ok {
			strs := []string{fp.Version, fp.Kernel}
			for _, p := range fp.Ports {
				strs = append(strs, p.Key, p.Netdev, p.LinkLayer, p.FWVer, p.Driver, p.RoCEMode, p.Trust, p.PFC)
			}
			for _, s := range strs {
				if !Printable(s) {
					t.Fatalf("Decode took a fingerprint string %q", s)
				}
			}
		}
	})
}

// TestFlowsExt: a query's further flows and an answer's admitted count go
// through Decode; a list too long, with a zero, the header's QPN or a
// duplicate, twice in one message or in the wrong message type is
// malformed.
func TestFlowsExt(t *testing.T) {
	enc := func(m Message) []byte {
		t.Helper()
		b, err := m.Append(nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	q := Message{Version: Version2, Type: TypeQuery, Nonce: 1, Count: 1, QPN: 0x11, QKey: 5,
		Ext: []Ext{FlowsExt([]uint32{0x12, 0xabcdef, 0x13})}}
	m, err := Decode(enc(q), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := QueryFlows(m); len(got) != 3 || got[0] != 0x12 || got[1] != 0xabcdef || got[2] != 0x13 {
		t.Errorf("QueryFlows = %#x", got)
	}
	a := Message{Version: Version2, Type: TypeAnswer, Nonce: 1, Count: 1, QPN: 0x21, QKey: 5, Ext: []Ext{FlowsAcceptedExt(3)}}
	if m, err := Decode(enc(a), nil); err != nil {
		t.Fatal(err)
	} else if n, ok := FlowsAccepted(m); n != 3 || !ok {
		t.Errorf("FlowsAccepted = %d, %v", n, ok)
	}
	if _, ok := FlowsAccepted(Message{Type: TypeAnswer}); ok {
		t.Error("an answer without the extension says it accepted flows")
	}
	many := make([]uint32, MaxFlowQPNs+1)
	for i := range many {
		many[i] = uint32(0x100 + i)
	}
	bad := map[string]Message{
		"16 flows":       {Ext: []Ext{FlowsExt(many)}},
		"zero":           {Ext: []Ext{FlowsExt([]uint32{0x12, 0})}},
		"header QPN":     {Ext: []Ext{FlowsExt([]uint32{0x11})}},
		"duplicate":      {Ext: []Ext{FlowsExt([]uint32{0x12, 0x13, 0x12})}},
		"twice":          {Ext: []Ext{FlowsExt([]uint32{0x12}), FlowsExt([]uint32{0x13})}},
		"empty":          {Ext: []Ext{{Type: ExtFlows}}},
		"stray byte":     {Ext: []Ext{{Type: ExtFlows, Value: []byte{0, 0, 0x12, 1}}}},
		"answer of 2":    {Type: TypeAnswer, Ext: []Ext{{Type: ExtFlows, Value: []byte{1, 2}}}},
		"answer over 15": {Type: TypeAnswer, Ext: []Ext{{Type: ExtFlows, Value: []byte{16}}}},
	}
	for name, b := range bad {
		m := q
		if b.Type != 0 {
			m = a
		}
		m.Ext = b.Ext
		if _, err := Decode(enc(m), nil); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: Decode = %v, want malformed", name, err)
		}
	}
}
