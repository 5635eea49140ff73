//go:build e2e

package e2e

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/rdmad/rdmad/probe/ud"
	"github.com/rdmad/rdmad/verbs"
	"github.com/rdmad/rdmad/verbs/peer"
)

// Issue #13 items 7-9 on real verbs (rxe0, one node): two peer engines in
// this process probe each other, and a raw UD QP of the test forges
// payloads at them. On one node every QP shares rxe0's GID, so these
// tests prove the GRH is parsed (replies are accepted at all, and to the
// right GID) and that the QPN, the local send time, the tags and the
// admission bounds hold; forged source GIDs are covered by the unit tests
// in verbs/peer (trust_test.go).

var peerTrustKey = []byte("e2e fleet key for probe payload tags")

// peerEngine starts an engine on rxe0 and returns it with its port and a
// channel of its replies.
func peerEngine(t *testing.T) (*peer.Engine, ud.LocalPort, chan ud.Reply) {
	t.Helper()
	replies := make(chan ud.Reply, 64)
	e, err := peer.New(peer.Config{Devices: []string{verbsDev}, OnReply: func(r ud.Reply) {
		select {
		case replies <- r:
		default:
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if ports, _ := e.Ports(); len(ports) > 0 {
			return e, ports[0], replies
		}
		time.Sleep(50 * time.Millisecond)
	}
	_, perr := e.Ports()
	t.Fatalf("no probe port on %s within 20s: %v", verbsDev, perr)
	return nil, ud.LocalPort{}, nil
}

// A rawUD is a bare UD QP on rxe0 the test sends arbitrary payloads from.
type rawUD struct {
	qp   *verbs.QP
	cq   *verbs.CQ
	mr   *verbs.MR
	buf  *verbs.Buffer
	ah   *verbs.AH
	gid  verbs.GID
	qkey uint32
}

func newRawUD(t *testing.T, c *verbs.Context, qkey uint32) *rawUD {
	t.Helper()
	pd, err := c.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	buf, err := verbs.AllocBuffer(4096)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { buf.Close() })
	mr, err := pd.RegMR(buf, verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	cq, err := c.NewCQ(16, nil)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.NewQP(verbs.QPConfig{Type: verbs.QPTypeUD, SendCQ: cq, RecvCQ: cq, MaxSendWR: 8, MaxRecvWR: 8, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := qp.Init(1, 0, qkey); err != nil {
		t.Fatal(err)
	}
	if err := qp.ReadyToReceive(verbs.Path{}, verbs.Remote{}); err != nil {
		t.Fatal(err)
	}
	if err := qp.ReadyToSend(0, 0, 0); err != nil {
		t.Fatal(err)
	}
	pa, _ := c.QueryPort(1)
	table, _ := c.GIDTable(1)
	g, ok := verbs.PickGID(table, pa.LinkLayer)
	if !ok {
		t.Fatal("rxe0 has no usable GID")
	}
	ah, err := pd.NewAH(verbs.Path{Port: 1, GIDIndex: g.Index, Global: true, RemoteGID: g.GID})
	if err != nil {
		t.Fatal(err)
	}
	r := &rawUD{qp: qp, cq: cq, mr: mr, buf: buf, ah: ah, gid: g.GID, qkey: qkey}
	// Receives at 1024 + i*128 (GRH + payload).
	for i := range 8 {
		if err := qp.PostRecv(uint64(100+i), verbs.SGE{Addr: mr.Addr() + uint64(1024+i*128), Length: 40 + peer.PayloadSize, LKey: mr.LKey()}); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

func (r *rawUD) ep() ud.Endpoint { return ud.Endpoint{GID: r.gid, QPN: r.qp.Num(), QKey: r.qkey} }

// send posts payload b to dst and waits for the send to complete.
func (r *rawUD) send(t *testing.T, b []byte, dst ud.Endpoint) {
	t.Helper()
	copy(r.buf.Bytes(), b)
	if err := r.qp.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.OpSend, Signaled: true, AH: r.ah, RemoteQPN: dst.QPN, RemoteQKey: dst.QKey,
		SGE: verbs.SGE{Addr: r.mr.Addr(), Length: uint32(len(b)), LKey: r.mr.LKey()}}); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.poll(t, func(wc verbs.WorkCompletion) bool { return wc.WRID == 1 }, 5*time.Second); !ok {
		t.Fatal("raw send did not complete within 5s")
	}
}

// recv returns the next payload received, or false after timeout.
func (r *rawUD) recv(t *testing.T, timeout time.Duration) ([]byte, verbs.WorkCompletion, bool) {
	t.Helper()
	wc, ok := r.poll(t, func(wc verbs.WorkCompletion) bool { return wc.WRID >= 100 }, timeout)
	if !ok {
		return nil, wc, false
	}
	i := int(wc.WRID - 100)
	off := 1024 + i*128
	b := append([]byte(nil), r.buf.Bytes()[off+40:off+40+peer.PayloadSize]...)
	if err := r.qp.PostRecv(wc.WRID, verbs.SGE{Addr: r.mr.Addr() + uint64(off), Length: 40 + peer.PayloadSize, LKey: r.mr.LKey()}); err != nil {
		t.Fatal(err)
	}
	return b, wc, true
}

func (r *rawUD) poll(t *testing.T, want func(verbs.WorkCompletion) bool, timeout time.Duration) (verbs.WorkCompletion, bool) {
	t.Helper()
	wcs := make([]verbs.WorkCompletion, 8)
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		n, err := r.cq.Poll(wcs[:1])
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			if err := wcs[0].Err(); err != nil {
				t.Fatalf("raw completion %+v: %v", wcs[0], err)
			}
			if want(wcs[0]) {
				return wcs[0], true
			}
			continue
		}
		time.Sleep(time.Millisecond)
	}
	return verbs.WorkCompletion{}, false
}

func payloadBytes(p peer.Payload) []byte {
	b := make([]byte, peer.PayloadSize)
	p.Encode(b)
	return b
}

func waitReply(t *testing.T, ch chan ud.Reply, seq uint64, timeout time.Duration) (ud.Reply, bool) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case r := <-ch:
			if r.Seq == seq {
				return r, true
			}
		case <-deadline:
			return ud.Reply{}, false
		}
	}
}

// TestPeerTrustEngines: engine A probes engine B in both payload
// versions; B answers only once admitted, in the probe's version, and A
// reports B's GID (from the GRH) and QPN.
func TestPeerTrustEngines(t *testing.T) {
	verbsRequireVM(t)
	ea, pa, repA := peerEngine(t)
	eb, pb, _ := peerEngine(t)
	ea.SetAuth(peerTrustKey, false)
	eb.SetAuth(peerTrustKey, false)
	ts := []ud.Target{{Dst: pb.Endpoint, Seq: 1}}
	ea.ProbeBatch(pa.Key, ts)
	if _, ok := waitReply(t, repA, 1, time.Second); ok {
		t.Fatal("B answered before admitting A")
	}
	if eb.Stats().Unadmitted == 0 {
		t.Errorf("B did not count the unadmitted probe: %+v", eb.Stats())
	}
	if err := eb.Admit(pb.Key, pa.Endpoint, netip.MustParseAddr("127.0.0.1"), false, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	ts = []ud.Target{{Dst: pb.Endpoint, Seq: 2}, {Dst: pb.Endpoint, Seq: 3, Auth: true}}
	if n := ea.ProbeBatch(pa.Key, ts); n != 2 {
		t.Fatalf("ProbeBatch sent %d: %v, %v", n, ts[0].Err, ts[1].Err)
	}
	for _, c := range []struct {
		seq  uint64
		auth bool
	}{{2, false}, {3, true}} {
		r, ok := waitReply(t, repA, c.seq, 5*time.Second)
		if !ok {
			t.Fatalf("no reply to probe %d; A %+v, B %+v", c.seq, ea.Stats(), eb.Stats())
		}
		if r.Authenticated != c.auth || r.From.GID != pb.GID || r.From.QPN != pb.QPN || r.RTT <= 0 || r.RTT > time.Second || r.ResponderDelay > r.RTT {
			t.Errorf("reply %+v: want from B %v/%#x, authenticated %v, 0 < RTT < 1s", r, pb.GID, pb.QPN, c.auth)
		}
	}
}

// TestPeerTrustForgedReplies: the raw QP F is probed by A and answers
// with lies. An echoed t1 from the past does not inflate the RTT (it is
// measured locally); a reply from another QPN is unsolicited and does not
// use up the probe; a tag under a wrong key is a bad tag; a correct reply
// after all that is accepted once.
func TestPeerTrustForgedReplies(t *testing.T) {
	verbsRequireVM(t)
	ea, pa, repA := peerEngine(t)
	ea.SetAuth(peerTrustKey, false)
	c := verbsOpen(t)
	f := newRawUD(t, c, 0x1234)
	m := newRawUD(t, c, 0x1234)

	// Lie 1: F holds the probe 200ms, then echoes a t1 claiming 1 ns of RTT.
	ea.ProbeBatch(pa.Key, []ud.Target{{Dst: f.ep(), Seq: 10}})
	pb, _, ok := f.recv(t, 5*time.Second)
	if !ok {
		t.Fatal("F got no probe")
	}
	probe, err := peer.DecodePayload(pb)
	if err != nil || probe.Seq != 10 {
		t.Fatalf("probe %+v, %v", probe, err)
	}
	time.Sleep(200 * time.Millisecond)
	f.send(t, payloadBytes(peer.Payload{Version: peer.PayloadV1, Kind: peer.KindReply, Seq: 10, SentAt: 1 << 62, RecvAt: 5, ReplyAt: 6}), pa.Endpoint)
	r, ok := waitReply(t, repA, 10, 5*time.Second)
	if !ok || r.RTT < 200*time.Millisecond {
		t.Fatalf("reply %+v (%v): want the locally measured RTT >= 200ms; stats %+v", r, ok, ea.Stats())
	}

	// Lie 2: M answers F's probe; then F's own tagged answer under a
	// wrong key; then F's real one.
	ea.ProbeBatch(pa.Key, []ud.Target{{Dst: f.ep(), Seq: 11, Auth: true}})
	if _, _, ok := f.recv(t, 5*time.Second); !ok {
		t.Fatal("F got no probe")
	}
	reply := payloadBytes(peer.Payload{Version: peer.PayloadV2, Kind: peer.KindReply, Seq: 11, RecvAt: 5, ReplyAt: 6})
	peer.SealPayload(peerTrustKey, reply, m.gid, pa.GID)
	m.send(t, reply, pa.Endpoint)
	bad := append([]byte(nil), reply...)
	peer.SealPayload([]byte("wrong key"), bad, f.gid, pa.GID)
	f.send(t, bad, pa.Endpoint)
	if r, ok := waitReply(t, repA, 11, 500*time.Millisecond); ok {
		t.Fatalf("forged reply accepted: %+v", r)
	}
	st := ea.Stats()
	if st.Unsolicited < 1 || st.BadTag < 1 {
		t.Errorf("stats %+v: want the reply from M unsolicited and F's bad tag counted", st)
	}
	peer.SealPayload(peerTrustKey, reply, f.gid, pa.GID)
	f.send(t, reply, pa.Endpoint)
	if r, ok := waitReply(t, repA, 11, 5*time.Second); !ok || !r.Authenticated || r.From.QPN != f.qp.Num() {
		t.Fatalf("F's real reply: %+v, %v; want accepted, authenticated, from F's QPN", r, ok)
	}
	// Replayed: dropped.
	f.send(t, reply, pa.Endpoint)
	if r, ok := waitReply(t, repA, 11, 500*time.Millisecond); ok {
		t.Fatalf("replayed reply accepted: %+v", r)
	}
}

// TestPeerTrustResponder: the raw QP F probes engine B. Unadmitted: no
// answer. Admitted: answered in v1 and v2. After 16,384 admissions from
// one address: still answered (confirmed), and a new address is admitted.
// With tags required: untagged probes get no answer.
func TestPeerTrustResponder(t *testing.T) {
	verbsRequireVM(t)
	eb, pb, _ := peerEngine(t)
	eb.SetAuth(peerTrustKey, false)
	c := verbsOpen(t)
	f := newRawUD(t, c, 0x4321)
	v1 := payloadBytes(peer.Payload{Version: peer.PayloadV1, Kind: peer.KindProbe, Seq: 1, SentAt: 5, GID: f.gid})
	v2 := payloadBytes(peer.Payload{Version: peer.PayloadV2, Kind: peer.KindProbe, Seq: 2, SentAt: 5})
	peer.SealPayload(peerTrustKey, v2, f.gid, pb.GID)
	answered := func(b []byte) (peer.Payload, bool) {
		t.Helper()
		f.send(t, b, pb.Endpoint)
		rb, wc, ok := f.recv(t, time.Second)
		if !ok {
			return peer.Payload{}, false
		}
		if wc.SrcQP != pb.QPN {
			t.Errorf("answer from QPN %#x, want B's %#x", wc.SrcQP, pb.QPN)
		}
		p, err := peer.DecodePayload(rb)
		if err != nil {
			t.Fatalf("B's answer: %v", err)
		}
		if p.Version == peer.PayloadV2 && !peer.VerifyPayload(peerTrustKey, rb, pb.GID, f.gid) {
			t.Error("B's v2 answer does not verify")
		}
		return p, true
	}
	if _, ok := answered(v1); ok {
		t.Fatal("unadmitted probe answered")
	}
	flooder := netip.MustParseAddr("10.9.9.9")
	if err := eb.Admit(pb.Key, f.ep(), flooder, false, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		b []byte
		v uint8
	}{{v1, peer.PayloadV1}, {v2, peer.PayloadV2}} {
		if p, ok := answered(c.b); !ok || p.Version != c.v || p.Kind != peer.KindReply {
			t.Fatalf("admitted v%d probe: answer %+v, %v; stats %+v", c.v, p, ok, eb.Stats())
		}
	}
	for i := range 16384 {
		g := verbs.GID{10: 0xff, 11: 0xff, 12: 10, 13: byte(i >> 16), 14: byte(i >> 8), 15: byte(i)}
		if err := eb.Admit(pb.Key, ud.Endpoint{GID: g, QPN: uint32(0x10000 + i), QKey: 1}, flooder, false, time.Now().Add(time.Minute)); err != nil {
			t.Fatalf("flood admission %d: %v", i, err)
		}
	}
	if _, ok := answered(v1); !ok {
		t.Fatalf("confirmed prober not answered after the flood: %+v", eb.Stats())
	}
	if err := eb.Admit(pb.Key, ud.Endpoint{GID: f.gid, QPN: 0xabcd, QKey: 1}, netip.MustParseAddr("10.9.9.10"), false, time.Now().Add(time.Minute)); err != nil {
		t.Fatalf("a new address after the flood: %v", err)
	}
	eb.SetAuth(peerTrustKey, true)
	before := eb.Stats().Untagged
	if _, ok := answered(v1); ok {
		t.Fatal("untagged probe answered with tags required")
	}
	if eb.Stats().Untagged != before+1 {
		t.Errorf("untagged probe not counted: %+v", eb.Stats())
	}
	if _, ok := answered(v2); !ok {
		t.Fatal("tagged probe not answered with tags required")
	}
}
