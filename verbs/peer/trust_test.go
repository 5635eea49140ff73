package peer

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/rdmad/rdmad/probe/ud"
	"github.com/rdmad/rdmad/verbs"
)

// These tests drive the port's pure halves (probeOutgoing, encodeOut, sent,
// receive, the admission table) the way post and completions do, with
// packets built byte by byte: what the adapter would hand over, including
// forged ones. Only the verbs calls are left to the e2e suite.

var (
	gidA = v4GID(192, 0, 2, 1) // a prober
	gidB = v4GID(192, 0, 2, 2) // a responder
	gidM = v4GID(192, 0, 2, 66)
	// An IPv6 (RoCE v2 over IPv6, or IB) GID.
	gid6 = verbs.GID{0: 0xfe, 1: 0x80, 8: 0x02, 9: 0x11, 15: 0x42}
	key  = []byte("fleet key for the probe tests, 32B")
)

const (
	qpnA = 0x11
	qpnB = 0x22
	qpnM = 0x66
)

func v4GID(a, b, c, d byte) verbs.GID {
	return verbs.GID{10: 0xff, 11: 0xff, 12: a, 13: b, 14: c, 15: d}
}

// testPort is a port with no verbs objects: enough for everything but
// posting.
func testPort(t *testing.T, e *Engine, key string, gid verbs.GID) *udPort {
	t.Helper()
	p := &udPort{key: key, e: e, gid: verbs.GIDEntry{GID: gid}, admitted: newAdmTable(4*e.cfg.MaxAH, admitPerSource),
		pend: newPendingTable(pendingSlots)}
	e.mu.Lock()
	e.ports[key] = p
	e.mu.Unlock()
	return p
}

func testEngine(t *testing.T) *Engine {
	t.Helper()
	e, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// grhFor builds the 40 bytes an adapter puts in front of a UD payload from
// src to dst: for IPv4-mapped GIDs the RoCE v2 layout (20 undefined bytes,
// here zero as rxe leaves them, then the IPv4 header), else an IPv6/GRH
// header.
func grhFor(src, dst verbs.GID) []byte {
	g := make([]byte, grhSize)
	if src[10] == 0xff && src[11] == 0xff && bytes.Equal(src[:10], make([]byte, 10)) {
		ip := g[20:]
		ip[0], ip[8], ip[9] = 0x45, 64, 17
		copy(ip[12:16], src[12:])
		copy(ip[16:20], dst[12:])
		c := ipv4Checksum(ip)
		ip[10], ip[11] = byte(c>>8), byte(c)
		return g
	}
	g[0], g[6], g[7] = 0x60, 17, 64
	copy(g[8:24], src[:])
	copy(g[24:40], dst[:])
	return g
}

// deliver hands port to a packet from (src, srcQPN) with payload b, as the
// completion loop would, at stamp at, and returns the replies accepted.
func deliver(p *udPort, src verbs.GID, srcQPN uint32, b []byte, at int64) []ud.Reply {
	pkt := append(grhFor(src, p.gid.GID), b...)
	wc := verbs.WorkCompletion{WRID: wrRecv, ByteLen: uint32(len(pkt)), SrcQP: srcQPN, Flags: verbs.WCGRH}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.authLocked()
	p.out = p.out[:0]
	return p.receive(&wc, pkt, at, time.Now(), nil)
}

// probe makes port p send the probe of target at stamp at, as ProbeBatch
// and post do, and returns its bytes on the wire (nil, err if it would not
// go).
func probe(p *udPort, tg ud.Target, at int64) ([]byte, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	o, ok := p.probeOutgoing(&tg, p.authLocked())
	if !ok {
		return nil, tg.Err
	}
	b := make([]byte, PayloadSize)
	p.encodeOut(&o, b, at)
	p.sent(&o, at)
	return b, nil
}

// answer returns the bytes of the reply p queued (the only one), sent at
// stamp at, and where it goes.
func answer(t *testing.T, p *udPort, at int64) ([]byte, ud.Endpoint) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.out) != 1 {
		t.Fatalf("%d answers queued, want 1", len(p.out))
	}
	b := make([]byte, PayloadSize)
	p.encodeOut(&p.out[0], b, at)
	return b, p.out[0].dst
}

func queued(p *udPort) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.out)
}

// pair returns a prober port A and a responder port B (two engines) where
// B admitted A, both with auth set as given.
func pair(t *testing.T, authKey []byte, require bool) (ea *Engine, a *udPort, eb *Engine, b *udPort) {
	t.Helper()
	ea, eb = testEngine(t), testEngine(t)
	ea.SetAuth(authKey, require)
	eb.SetAuth(authKey, require)
	a, b = testPort(t, ea, "a/1", gidA), testPort(t, eb, "b/1", gidB)
	if err := eb.Admit("b/1", ud.Endpoint{GID: gidA, QPN: qpnA, QKey: 7}, netip.MustParseAddr("192.0.2.1"), false, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	return ea, a, eb, b
}

var toB = ud.Endpoint{GID: gidB, QPN: qpnB, QKey: 9}

// TestRoundTrip sends a probe from A to B and B's answer back, in both
// versions, and checks what each side saw.
func TestRoundTrip(t *testing.T) {
	for _, auth := range []bool{false, true} {
		t.Run(fmt.Sprintf("auth=%v", auth), func(t *testing.T) {
			_, a, eb, b := pair(t, key, false)
			pb, err := probe(a, ud.Target{Dst: toB, Seq: 5, Auth: auth}, 1000)
			if err != nil {
				t.Fatal(err)
			}
			if wantV := map[bool]byte{false: PayloadV1, true: PayloadV2}[auth]; pb[4] != wantV {
				t.Fatalf("probe version %d, want %d", pb[4], wantV)
			}
			deliver(b, gidA, qpnA, pb, 50_000)
			rb, dst := answer(t, b, 50_300)
			if dst != (ud.Endpoint{GID: gidA, QPN: qpnA, QKey: 7}) {
				t.Errorf("answer goes to %+v, want A with the admitted qkey", dst)
			}
			if rb[4] != pb[4] {
				t.Errorf("answer version %d, probe's %d: a responder answers in the probe's version", rb[4], pb[4])
			}
			if auth && !VerifyPayload(key, rb, gidB, gidA) {
				t.Error("B's tagged answer does not verify with PayloadTag")
			}
			rs := deliver(a, gidB, qpnB, rb, 3000)
			if len(rs) != 1 {
				t.Fatalf("replies %+v, want 1", rs)
			}
			r := rs[0]
			if r.RTT != 2000 || r.ResponderDelay != 300 || r.Seq != 5 || r.From != (ud.Endpoint{GID: gidB, QPN: qpnB}) || r.Authenticated != auth || r.Local != "a/1" {
				t.Errorf("reply %+v: want RTT 2000ns, delay 300ns, seq 5, from B, authenticated %v", r, auth)
			}
			if st := eb.Stats(); st.Unadmitted+st.BadTag+st.Untagged+st.Malformed != 0 {
				t.Errorf("responder dropped something: %+v", st)
			}
		})
	}
}

// TestRTTIgnoresEchoedSentAt: a responder rewrites the echoed t1 to
// report a better (or worse) latency of its own. The prober measures from
// its own record of the send, so the RTT does not move. For version 2 the
// responder is a fleet member with the key: the tag is valid, the lie is
// still useless.
func TestRTTIgnoresEchoedSentAt(t *testing.T) {
	for _, auth := range []bool{false, true} {
		for _, forged := range []int64{2999, 1, -5, 1 << 62} {
			t.Run(fmt.Sprintf("auth=%v/t1=%d", auth, forged), func(t *testing.T) {
				_, a, _, b := pair(t, key, false)
				pb, _ := probe(a, ud.Target{Dst: toB, Seq: 9, Auth: auth}, 1000)
				deliver(b, gidA, qpnA, pb, 10)
				rb, _ := answer(t, b, 20)
				pl, err := DecodePayload(rb)
				if err != nil {
					t.Fatal(err)
				}
				pl.SentAt = forged
				pl.Encode(rb)
				if auth {
					SealPayload(key, rb, gidB, gidA)
				}
				rs := deliver(a, gidB, qpnB, rb, 3000)
				if len(rs) != 1 || rs[0].RTT != 2000 {
					t.Fatalf("replies %+v: want one with the locally measured RTT 2000ns", rs)
				}
			})
		}
	}
}

// TestReplyMustMatchProbe forges replies that do not answer a probe in
// flight from where it went; each is dropped as unsolicited, and none of
// them uses up the probe: the real reply afterwards is still accepted.
func TestReplyMustMatchProbe(t *testing.T) {
	// forge returns a v1 reply to seq claiming (in the payload) to be B.
	forge := func(seq uint64) []byte {
		b := make([]byte, PayloadSize)
		(&Payload{Version: PayloadV1, Kind: KindReply, Seq: seq, SentAt: 999, RecvAt: 1, ReplyAt: 2, GID: gidB}).Encode(b)
		return b
	}
	tests := []struct {
		name string
		src  verbs.GID
		qpn  uint32
		b    []byte
	}{
		{"unknown seq", gidB, qpnB, forge(8)},
		{"other QPN", gidB, qpnM, forge(7)},
		{"other GID in the GRH, B's in the payload", gidM, qpnB, forge(7)},
		{"IPv6 GID", gid6, qpnB, forge(7)},
		{"v2 reply to a v1 probe (no key: cannot check)", gidB, qpnB, func() []byte {
			b := make([]byte, PayloadSize)
			(&Payload{Version: PayloadV2, Kind: KindReply, Seq: 7, RecvAt: 1, ReplyAt: 2}).Encode(b)
			return b
		}()},
		{"a probe, not a reply", gidB, qpnB, func() []byte {
			b := make([]byte, PayloadSize)
			(&Payload{Version: PayloadV1, Kind: KindProbe, Seq: 7, SentAt: 1}).Encode(b)
			return b
		}()},
	}
	ea, a, _, _ := pair(t, nil, false)
	if _, err := probe(a, ud.Target{Dst: toB, Seq: 7}, 1000); err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if rs := deliver(a, tt.src, tt.qpn, tt.b, 2000); len(rs) != 0 {
				t.Errorf("forged reply accepted: %+v", rs)
			}
		})
	}
	st := ea.Stats()
	if st.Unsolicited != 4 || st.BadTag != 1 || st.Unadmitted != 1 || st.Replies != 0 {
		t.Errorf("stats %+v: want 4 unsolicited, 1 bad tag, 1 unadmitted probe, 0 replies", st)
	}
	if rs := deliver(a, gidB, qpnB, forge(7), 2500); len(rs) != 1 || rs[0].RTT != 1500 {
		t.Fatalf("the real reply after the forgeries: %+v, want accepted with RTT 1500ns", rs)
	}
	// Replayed: the probe was answered, its entry is gone.
	if rs := deliver(a, gidB, qpnB, forge(7), 2600); len(rs) != 0 || ea.Stats().Unsolicited != 5 {
		t.Errorf("replayed reply: %+v, stats %+v; want dropped as unsolicited", rs, ea.Stats())
	}
}

// TestPendingReclaim: entries of probes without a reply are reclaimed when
// their slot is reused and after pendingTTL; a late reply for either is
// unsolicited, and the table never grows.
func TestPendingReclaim(t *testing.T) {
	ea, a, _, _ := pair(t, nil, false)
	reply := func(seq uint64) []byte {
		b := make([]byte, PayloadSize)
		(&Payload{Version: PayloadV1, Kind: KindReply, Seq: seq, RecvAt: 1, ReplyAt: 2}).Encode(b)
		return b
	}
	probe(a, ud.Target{Dst: toB, Seq: 3}, 100)
	probe(a, ud.Target{Dst: toB, Seq: 3 + pendingSlots}, 200) // same slot
	if rs := deliver(a, gidB, qpnB, reply(3), 300); len(rs) != 0 {
		t.Errorf("reply to an overwritten probe accepted: %+v", rs)
	}
	if rs := deliver(a, gidB, qpnB, reply(3+pendingSlots), 300); len(rs) != 1 {
		t.Errorf("reply to the probe that reused the slot: %+v, want accepted", rs)
	}
	probe(a, ud.Target{Dst: toB, Seq: 4}, 100)
	if rs := deliver(a, gidB, qpnB, reply(4), 100+pendingTTL+1); len(rs) != 0 {
		t.Errorf("reply after the TTL accepted: %+v", rs)
	}
	if a.pend.slots[4].live {
		t.Error("expired entry still live")
	}
	if st := ea.Stats(); st.Unsolicited != 2 || st.Replies != 1 {
		t.Errorf("stats %+v: want 2 unsolicited, 1 reply", st)
	}
	if len(a.pend.slots) != pendingSlots {
		t.Errorf("pending table has %d slots, want %d", len(a.pend.slots), pendingSlots)
	}
}

// TestResponderDelayLie: a responder claims it held the probe longer than
// the whole round trip, to make the network share look like zero. The
// reply is dropped.
func TestResponderDelayLie(t *testing.T) {
	ea, a, _, _ := pair(t, nil, false)
	probe(a, ud.Target{Dst: toB, Seq: 1}, 1000)
	b := make([]byte, PayloadSize)
	(&Payload{Version: PayloadV1, Kind: KindReply, Seq: 1, SentAt: 1000, RecvAt: 10, ReplyAt: 10 + 5000}).Encode(b)
	if rs := deliver(a, gidB, qpnB, b, 3000); len(rs) != 0 || ea.Stats().Malformed != 1 {
		t.Errorf("reply claiming a 5us delay in a 2us round trip: %+v, stats %+v; want dropped as malformed", rs, ea.Stats())
	}
}

// TestResponderUsesGRH: the responder recognises and answers the source of
// the GRH and the adapter, never the GID a version-1 payload claims. A
// spoofer that claims an admitted GID is not admitted, and a probe from an
// admitted source that claims a victim's GID is answered to its real
// source, not reflected at the victim.
func TestResponderUsesGRH(t *testing.T) {
	_, _, eb, b := pair(t, nil, false)
	pl := func(claim verbs.GID) []byte {
		buf := make([]byte, PayloadSize)
		(&Payload{Version: PayloadV1, Kind: KindProbe, Seq: 1, SentAt: 5, GID: claim}).Encode(buf)
		return buf
	}
	deliver(b, gidM, qpnA, pl(gidA), 10)
	if n := queued(b); n != 0 || eb.Stats().Unadmitted != 1 {
		t.Fatalf("probe from M claiming A's GID: %d answers, stats %+v; want none, unadmitted", n, eb.Stats())
	}
	deliver(b, gidA, qpnA, pl(gidM), 10)
	_, dst := answer(t, b, 20)
	if dst.GID != gidA || dst.QPN != qpnA {
		t.Errorf("probe from A claiming M's GID answered to %+v, want A", dst)
	}
}

// TestTags forges version-2 payloads: a flipped bit anywhere, the wrong
// key, a tag made for another source or destination, no key at all. Each
// is dropped as a bad tag, and a bad reply does not use up its probe.
func TestTags(t *testing.T) {
	t.Run("probe", func(t *testing.T) {
		good := make([]byte, PayloadSize)
		(&Payload{Version: PayloadV2, Kind: KindProbe, Seq: 1, SentAt: 5}).Encode(good)
		SealPayload(key, good, gidA, gidB)
		type forged struct {
			name string
			b    []byte
			src  verbs.GID
		}
		var cases []forged
		for i := 0; i < PayloadSize; i++ {
			for _, bit := range []byte{0x01, 0x80} {
				b := bytes.Clone(good)
				b[i] ^= bit
				cases = append(cases, forged{fmt.Sprintf("byte %d bit %#x", i, bit), b, gidA})
			}
		}
		wrongKey := bytes.Clone(good)
		SealPayload([]byte("another key"), wrongKey, gidA, gidB)
		otherDst := bytes.Clone(good)
		SealPayload(key, otherDst, gidA, gidM)
		cases = append(cases,
			forged{"wrong key", wrongKey, gidA},
			forged{"tagged for another destination", otherDst, gidA},
			// M replays A's probe with M's own source; M is admitted too.
			forged{"replayed from another source", good, gidM},
		)
		for _, c := range cases {
			_, _, eb, b := pair(t, key, false)
			eb.Admit("b/1", ud.Endpoint{GID: gidM, QPN: qpnA}, netip.MustParseAddr("192.0.2.66"), false, time.Now().Add(time.Minute))
			deliver(b, c.src, qpnA, c.b, 10)
			st := eb.Stats()
			if queued(b) != 0 || st.BadTag+st.Malformed != 1 {
				t.Errorf("%s: answered (%d) or not counted (%+v)", c.name, queued(b), st)
			}
		}
		_, _, eb, b := pair(t, key, false)
		deliver(b, gidA, qpnA, good, 10)
		if queued(b) != 1 {
			t.Errorf("the genuine probe was not answered: %+v", eb.Stats())
		}
	})
	t.Run("reply", func(t *testing.T) {
		ea, a, _, _ := pair(t, key, false)
		probe(a, ud.Target{Dst: toB, Seq: 3, Auth: true}, 100)
		r := make([]byte, PayloadSize)
		(&Payload{Version: PayloadV2, Kind: KindReply, Seq: 3, SentAt: 100, RecvAt: 1, ReplyAt: 2}).Encode(r)
		bad := bytes.Clone(r)
		SealPayload([]byte("guessed key"), bad, gidB, gidA)
		if rs := deliver(a, gidB, qpnB, bad, 200); len(rs) != 0 || ea.Stats().BadTag != 1 {
			t.Fatalf("reply with a wrong tag: %+v, %+v; want dropped as a bad tag", rs, ea.Stats())
		}
		// A fleet member M with the key answers in B's place: tagged from
		// M, it comes from the wrong GID. Tagged as if from B but sent from
		// M, the tag fails.
		fromM := bytes.Clone(r)
		SealPayload(key, fromM, gidM, gidA)
		deliver(a, gidM, qpnB, fromM, 200)
		asB := bytes.Clone(r)
		SealPayload(key, asB, gidB, gidA)
		deliver(a, gidM, qpnB, asB, 200)
		if st := ea.Stats(); st.Unsolicited != 1 || st.BadTag != 2 || st.Replies != 0 {
			t.Fatalf("replies from M: stats %+v, want 1 unsolicited, 2 bad tags", st)
		}
		// A downgrade: an untagged v1 reply to a tagged probe.
		v1 := make([]byte, PayloadSize)
		(&Payload{Version: PayloadV1, Kind: KindReply, Seq: 3, RecvAt: 1, ReplyAt: 2, GID: gidB}).Encode(v1)
		if rs := deliver(a, gidB, qpnB, v1, 200); len(rs) != 0 {
			t.Fatalf("v1 reply to a v2 probe accepted: %+v", rs)
		}
		if rs := deliver(a, gidB, qpnB, asB, 300); len(rs) != 1 || !rs[0].Authenticated || rs[0].RTT != 200 {
			t.Fatalf("the genuine reply after the forgeries: %+v, want accepted, authenticated, RTT 200ns", rs)
		}
	})
	t.Run("no key", func(t *testing.T) {
		_, _, eb, b := pair(t, nil, false)
		p := make([]byte, PayloadSize)
		(&Payload{Version: PayloadV2, Kind: KindProbe, Seq: 1, SentAt: 5}).Encode(p)
		SealPayload(key, p, gidA, gidB)
		deliver(b, gidA, qpnA, p, 10)
		if queued(b) != 0 || eb.Stats().BadTag != 1 {
			t.Errorf("v2 probe to a responder without a key: %d answers, %+v; want dropped as a bad tag", queued(b), eb.Stats())
		}
	})
}

// TestRequireTags: with require, untagged probes and replies are dropped
// and counted, and the prober refuses to send untagged probes; without a
// key, it refuses tagged ones.
func TestRequireTags(t *testing.T) {
	ea, a, eb, b := pair(t, key, true)
	v1 := make([]byte, PayloadSize)
	(&Payload{Version: PayloadV1, Kind: KindProbe, Seq: 1, SentAt: 5, GID: gidA}).Encode(v1)
	deliver(b, gidA, qpnA, v1, 10)
	if queued(b) != 0 || eb.Stats().Untagged != 1 {
		t.Errorf("untagged probe with tags required: %d answers, %+v", queued(b), eb.Stats())
	}
	if _, err := probe(a, ud.Target{Dst: toB, Seq: 2}, 10); !errors.Is(err, ErrAuthRequired) {
		t.Errorf("untagged probe with tags required: %v, want ErrAuthRequired", err)
	}
	// An untagged reply (to a probe sent before tags were required).
	ea.SetAuth(key, false)
	probe(a, ud.Target{Dst: toB, Seq: 3}, 10)
	ea.SetAuth(key, true)
	r := make([]byte, PayloadSize)
	(&Payload{Version: PayloadV1, Kind: KindReply, Seq: 3, RecvAt: 1, ReplyAt: 2}).Encode(r)
	if rs := deliver(a, gidB, qpnB, r, 20); len(rs) != 0 || ea.Stats().Untagged != 1 {
		t.Errorf("untagged reply with tags required: %+v, %+v", rs, ea.Stats())
	}
	ea.SetAuth(nil, true)
	if _, err := probe(a, ud.Target{Dst: toB, Seq: 4, Auth: true}, 10); !errors.Is(err, ErrNoKey) {
		t.Errorf("tagged probe without a key: %v, want ErrNoKey", err)
	}
	if _, err := probe(a, ud.Target{Dst: toB, Seq: 5}, 10); err != nil {
		t.Errorf("untagged probe with auth off (nil key, require ignored): %v", err)
	}
}

// TestMixedFleet: with a key but tags not required, a responder answers
// v1 probes in v1 (to old probers, with its GID in the payload as they
// expect) and v2 probes in v2.
func TestMixedFleet(t *testing.T) {
	_, _, _, b := pair(t, key, false)
	v1 := make([]byte, PayloadSize)
	(&Payload{Version: PayloadV1, Kind: KindProbe, Seq: 1, SentAt: 5, GID: gidA}).Encode(v1)
	deliver(b, gidA, qpnA, v1, 10)
	rb, _ := answer(t, b, 20)
	pl, err := DecodePayload(rb)
	if err != nil || pl.Version != PayloadV1 || pl.GID != gidB || pl.SentAt != 5 || pl.Seq != 1 {
		t.Errorf("answer to a v1 probe: %+v, %v; want v1 with B's GID, echoing seq and t1", pl, err)
	}
}

// TestSetAuthWhileRunning changes the key while a port handles packets;
// run with -race.
func TestSetAuthWhileRunning(t *testing.T) {
	ea, a, _, _ := pair(t, key, false)
	var wg sync.WaitGroup
	wg.Add(1)
	stop := make(chan struct{})
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			ea.SetAuth([]byte{byte(i), 1, 2, 3}, i%2 == 0)
			if i%5 == 0 {
				ea.SetAuth(nil, false)
			}
		}
	}()
	r := make([]byte, PayloadSize)
	(&Payload{Version: PayloadV2, Kind: KindReply, Seq: 3, RecvAt: 1, ReplyAt: 2}).Encode(r)
	for i := 0; i < 2000; i++ {
		probe(a, ud.Target{Dst: toB, Seq: uint64(i), Auth: i%2 == 0}, 10)
		deliver(a, gidB, qpnB, r, 20)
	}
	close(stop)
	wg.Wait()
}

// TestReceiveMalformedHeaders: packets without a GRH, with one that is
// neither IPv6 nor IPv4, with a zero source GID, or of the wrong length.
func TestReceiveMalformedHeaders(t *testing.T) {
	_, _, eb, b := pair(t, nil, false)
	pl := make([]byte, PayloadSize)
	(&Payload{Version: PayloadV1, Kind: KindProbe, Seq: 1, SentAt: 5}).Encode(pl)
	good := append(grhFor(gidA, gidB), pl...)
	recv := func(wc verbs.WorkCompletion, pkt []byte) {
		b.mu.Lock()
		b.authLocked()
		b.out = b.out[:0]
		b.receive(&wc, pkt, 10, time.Now(), nil)
		b.mu.Unlock()
	}
	wc := verbs.WorkCompletion{WRID: wrRecv, ByteLen: grhSize + PayloadSize, SrcQP: qpnA, Flags: verbs.WCGRH}
	noGRH := wc
	noGRH.Flags = 0
	recv(noGRH, good)
	short := wc
	short.ByteLen--
	recv(short, good)
	garbage := bytes.Clone(good)
	clear(garbage[:grhSize])
	recv(wc, garbage)
	zero := append(grhFor(verbs.GID{}, gidB), pl...)
	recv(wc, zero)
	if st := eb.Stats(); st.Malformed != 4 || queued(b) != 0 {
		t.Errorf("stats %+v, %d answers: want 4 malformed, none answered", st, queued(b))
	}
	recv(wc, good)
	if queued(b) != 1 {
		t.Error("the well-formed probe was not answered")
	}
}

// TestGRHSource decodes the source GID of the header layouts adapters
// write, including an IPv4 header behind undefined bytes that happen to
// look like IPv6, and an IPv6 GRH whose second half looks like IPv4 but
// has a wrong checksum.
func TestGRHSource(t *testing.T) {
	v4 := grhFor(gidA, gidB)
	v4junk := bytes.Clone(v4)
	for i := range 20 {
		v4junk[i] = 0x6f // version nibble 6
	}
	v6 := grhFor(gid6, gidB)
	v6like4 := bytes.Clone(v6)
	v6like4[20] = 0x45 // sgid byte 12 on: looks like the start of an IPv4 header
	gid6like4 := verbs.GID(v6like4[8:24])
	tests := []struct {
		name string
		grh  []byte
		want verbs.GID
		ok   bool
	}{
		{"RoCE v2 IPv4 (rxe)", v4, gidA, true},
		{"RoCE v2 IPv4, undefined half reads as IPv6", v4junk, gidA, true},
		{"IPv6 / GRH", v6, gid6, true},
		{"GRH with an IPv4-looking tail, bad checksum", v6like4, gid6like4, true},
		{"zeros", make([]byte, grhSize), verbs.GID{}, false},
		{"short", v4[:39], verbs.GID{}, false},
	}
	for _, tt := range tests {
		got, ok := grhSource(tt.grh)
		if ok != tt.ok || (ok && got != tt.want) {
			t.Errorf("%s: grhSource = %v, %v; want %v, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}

// TestPayloadTagLayout recomputes a tag with crypto/hmac over the layout
// docs/PROBES.md documents, so a change of the input is a visible change
// of the wire format.
func TestPayloadTagLayout(t *testing.T) {
	b := make([]byte, PayloadSize)
	(&Payload{Version: PayloadV2, Kind: KindReply, Seq: 42, SentAt: 1, RecvAt: 2, ReplyAt: 3}).Encode(b)
	m := hmac.New(sha256.New, key)
	m.Write([]byte("rdmad peer probe v2\x00"))
	m.Write(gidB[:])
	m.Write(gidA[:])
	m.Write(b[:48])
	want := m.Sum(nil)[:TagSize]
	if got := PayloadTag(key, b, gidB, gidA); !bytes.Equal(got[:], want) {
		t.Fatalf("PayloadTag = %x, want %x", got, want)
	}
	SealPayload(key, b, gidB, gidA)
	if !bytes.Equal(b[48:], want) || !VerifyPayload(key, b, gidB, gidA) {
		t.Fatalf("SealPayload wrote %x, want %x, or VerifyPayload rejects it", b[48:], want)
	}
	if VerifyPayload(key, b, gidA, gidB) {
		t.Error("the tag of B->A verifies as A->B: a payload could be reflected")
	}
}

// TestHotPathAllocs: a probe, its answer and the reply, tagged or not,
// allocate nothing in steady state (1,000 probes/s per node).
func TestHotPathAllocs(t *testing.T) {
	for _, auth := range []bool{false, true} {
		_, a, _, b := pair(t, key, false)
		pkt := make([]byte, grhSize+PayloadSize)
		replies := make([]ud.Reply, 0, 4)
		wc := verbs.WorkCompletion{WRID: wrRecv, ByteLen: grhSize + PayloadSize, Flags: verbs.WCGRH}
		grhA, grhB := grhFor(gidA, gidB), grhFor(gidB, gidA)
		seq := uint64(0)
		tg := ud.Target{Dst: toB, Auth: auth}
		allocs := testing.AllocsPerRun(200, func() {
			seq++
			tg.Seq = seq
			copy(pkt, grhA)
			a.mu.Lock()
			o, _ := a.probeOutgoing(&tg, a.authLocked())
			a.encodeOut(&o, pkt[grhSize:], 100)
			a.sent(&o, 100)
			a.mu.Unlock()
			b.mu.Lock()
			b.authLocked()
			b.out = b.out[:0]
			wc.SrcQP = qpnA
			b.receive(&wc, pkt, 200, time.Time{}, nil)
			copy(pkt, grhB)
			b.encodeOut(&b.out[0], pkt[grhSize:], 300)
			b.mu.Unlock()
			a.mu.Lock()
			wc.SrcQP = qpnB
			replies = a.receive(&wc, pkt, 400, time.Time{}, replies[:0])
			a.mu.Unlock()
			if len(replies) != 1 {
				panic(fmt.Sprintf("auth %v: no reply", auth))
			}
		})
		if allocs != 0 {
			t.Errorf("auth %v: %.1f allocations per round trip, want 0", auth, allocs)
		}
	}
}
