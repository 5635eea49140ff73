package probe

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/probe/ud"
	"github.com/rdmad/rdmad/probe/wire"
)

// sinkTransport takes every probe and answers none; the test answers.
type sinkTransport struct{ ports []ud.LocalPort }

func (s *sinkTransport) Ports() ([]ud.LocalPort, error) { return s.ports, nil }
func (s *sinkTransport) ProbeBatch(local string, ts []ud.Target) int {
	for i := range ts {
		ts[i].Err = nil
	}
	return len(ts)
}
func (s *sinkTransport) Admit(string, ud.Endpoint, netip.Addr, bool, time.Time) error { return nil }

// resolvedManager returns a manager with n selected peers whose every path
// is resolved and up, as after discovery, and each peer holding the same
// fingerprint (a homogeneous fleet).
func resolvedManager(t testing.TB, n int) *Manager {
	tr := &sinkTransport{ports: []ud.LocalPort{{Key: "rxe0/1", Endpoint: ud.Endpoint{QPN: 7}}, {Key: "rxe1/1", Endpoint: ud.Endpoint{QPN: 8}}}}
	m, err := New(Options{Transport: tr, Logger: slog.New(slog.DiscardHandler)}, Settings{Interval: time.Second, Timeout: 500 * time.Millisecond,
		Window: 100, Threshold: Thresholds{DownAfter: 3, UpAfter: 3, LossPct: 1, MinLosses: 2}})
	if err != nil {
		t.Fatal(err)
	}
	m.local = tr.ports
	fp := scaleFingerprint(tr.ports)
	m.fps.own = &fp // this node's: the peers' agree with it
	msg := wire.Message{Ext: []wire.Ext{{Type: wire.ExtFingerprint, Value: fp.Marshal()}}}
	now := time.Now()
	for i := range n {
		p := m.add(Spec{Name: fmt.Sprintf("192.0.%d.%d", i/250, i%250+1), Group: fmt.Sprintf("tor-%d", i/40)}, now, false)
		m.refreshPaths(p)
		for k, pa := range p.paths {
			pa.remote, pa.resolved = ud.Endpoint{QPN: uint32(0x1000 + 2*i + k), GID: [16]byte{15: byte(i)}}, true
		}
		p.nodeID = uint64(0xf000 + i)
		sfp, err := m.fps.decode(msg)
		if err != nil || sfp == nil {
			t.Fatalf("fingerprint: %v", err)
		}
		m.setPeerFingerprint(p, sfp)
	}
	return m
}

// probeRound sends one probe on every path and answers all but the one of
// peer lose (-1: none), which then times out, as the manager's passes do.
func probeRound(m *Manager, peers []*mpeer, lose int, now time.Time) {
	first := m.sched.seq + 1
	for _, p := range peers {
		for _, pa := range p.paths {
			m.send(p, pa, now)
		}
	}
	m.sched.flush(m.opts.Transport, m.log)
	at := now.Add(100 * time.Microsecond)
	for seq := first; seq <= m.sched.seq; seq++ {
		f := m.sched.flights.get(seq)
		if f == nil || f.p == peers[max(lose, 0)] && lose >= 0 {
			continue
		}
		m.onReply(ud.Reply{Local: f.pa.local, Flow: f.flow, From: f.pa.remote, Seq: seq, RTT: 30 * time.Microsecond, ResponderDelay: 5 * time.Microsecond, At: at})
	}
	m.expire(now.Add(time.Second))
}

// TestProbeRoundAllocs checks that probing allocates nothing once warm:
// sending (the ring of flights, the batch per port), answers, the state
// machine and the windows, losses and timeouts included. A loss comes
// every round, on another peer each time, so no path degrades (that would
// log and write a reason, which may allocate).
func TestProbeRoundAllocs(t *testing.T) {
	t.Run("1 flow", func(t *testing.T) { testProbeRoundAllocs(t, resolvedManager(t, 100), 1) })
	t.Run("4 flows", func(t *testing.T) { testProbeRoundAllocs(t, flowsManager(t, 100, 4, 100), 4) })
}

func testProbeRoundAllocs(t *testing.T, m *Manager, flows int) {
	peers := m.peers.inOrder()
	now := time.Now()
	round := 0
	run := func() {
		now = now.Add(time.Second)
		probeRound(m, peers, round%len(peers), now)
		round++
	}
	for range 300 {
		run()
	}
	if got := testing.AllocsPerRun(200, run); got != 0 {
		t.Errorf("%v allocations per round (a probe on each of %d paths, %d flows each, and a loss's burst); want 0", got, 2*len(peers), flows)
	}
	for _, p := range peers {
		if p.state != apitype.PeerUp || p.paths[0].sent == 0 {
			t.Fatalf("peer %s is %s after %d rounds (sent %d); the test probed nothing", p.spec.Name, p.state, round, p.paths[0].sent)
		}
	}
}

// TestStateAllocsPerPeer checks that building the state allocates a fixed
// number of objects, not some per peer: the peers are kept in order, their
// paths share one array, texts and fingerprints are shared.
func TestStateAllocsPerPeer(t *testing.T) {
	allocs := func(n int) float64 {
		m := resolvedManager(t, n)
		peers := m.peers.inOrder()
		now := time.Now()
		for range 3 {
			now = now.Add(time.Second)
			probeRound(m, peers, -1, now)
		}
		m.State()
		return testing.AllocsPerRun(20, func() {
			now = now.Add(time.Second)
			probeRound(m, peers, -1, now) // new numbers: every window computes again
			m.State()
		})
	}
	small, large := allocs(10), allocs(1000)
	if large != small {
		t.Errorf("State allocates %v objects with 10 peers and %v with 1,000; want the same", small, large)
	}
	flowsAllocs := func(n int) float64 {
		m := flowsManager(t, n, 4, 100)
		peers := m.peers.inOrder()
		now := time.Now()
		m.State()
		return testing.AllocsPerRun(20, func() {
			now = now.Add(time.Second)
			probeRound(m, peers, -1, now)
			m.State()
		})
	}
	if small4, large4 := flowsAllocs(10), flowsAllocs(1000); small4 != large4 || small4 > small+1 {
		t.Errorf("with 4 flows State allocates %v objects with 10 peers and %v with 1,000; want the same, at most one more than with one flow (%v)", small4, large4, small)
	}
	m := resolvedManager(t, 3)
	st := m.State()
	if len(st.Peers) != 3 || st.Peers[0].Fingerprint == nil || st.Peers[0].Fingerprint != st.Peers[2].Fingerprint || len(m.fps.held) != 1 {
		t.Errorf("state %+v, %d fingerprints held; want 3 peers sharing one fingerprint", st.Peers, len(m.fps.held))
	}
	if st.Peers[0].Name > st.Peers[1].Name || len(st.Peers[1].Paths) != 2 || st.Peers[1].Paths[1].RemoteGID == "" || st.Peers[1].Address != "192.0.0.2" || st.Peers[1].NodeID != "f001" {
		t.Errorf("state %+v; want peers in name order with two paths each, GIDs, addresses and node IDs", st.Peers)
	}
}

// TestSharedFingerprints checks the fingerprints peers share: one copy per
// encoding, given up when the last peer holding it changes or leaves.
func TestSharedFingerprints(t *testing.T) {
	m := resolvedManager(t, 3)
	if len(m.fps.held) != 1 {
		t.Fatalf("%d fingerprints held by 3 peers sending the same; want 1", len(m.fps.held))
	}
	other := scaleFingerprint(m.local)
	other.Ports[0].NetdevMTU = 1500
	o, err := m.fps.decode(wire.Message{Ext: []wire.Ext{{Type: wire.ExtFingerprint, Value: other.Marshal()}}})
	if err != nil || o == nil {
		t.Fatal(err)
	}
	peers := m.peers.inOrder()
	m.setPeerFingerprint(peers[0], o)
	if len(m.fps.held) != 2 || len(peers[0].r().mm) == 0 || peers[0].r().mm[0].Field != FieldMTU || len(peers[1].r().mm) != 0 {
		t.Fatalf("after one peer changed: %d fingerprints, mismatches %+v and %+v; want 2 held and an MTU mismatch on the first peer only",
			len(m.fps.held), peers[0].r().mm, peers[1].r().mm)
	}
	if st := m.State(); len(st.Peers[0].Mismatches) == 0 || st.Peers[0].Fingerprint.Ports[0].MTU != 1500 {
		t.Errorf("state of the changed peer %+v; want its MTU and the mismatch", st.Peers[0])
	}
	m.drop(peers[1])
	m.drop(peers[2])
	if len(m.fps.held) != 1 {
		t.Errorf("%d fingerprints held after the peers holding the first left; want 1", len(m.fps.held))
	}
	m.setPeerFingerprint(peers[0], nil)
	if len(m.fps.held) != 0 {
		t.Errorf("%d fingerprints held by nobody; want 0", len(m.fps.held))
	}
}

// BenchmarkProbeRound is the probe path of 1,000 peers with two paths
// each (2,000 probes: send, post, answer, state machine, window) with one
// loss per round; ns/op divided by 2,000 is the cost of one probe.
func BenchmarkProbeRound(b *testing.B) { benchProbeRound(b, 1) }

// BenchmarkProbeRoundFlows4 is the same with 4 flows per path, walked
// round-robin: 2,000 probes a round too, and the loss's burst (4 more).
func BenchmarkProbeRoundFlows4(b *testing.B) { benchProbeRound(b, 4) }

func benchProbeRound(b *testing.B, flows int) {
	m := flowsManager(b, 1000, flows, 100)
	peers := m.peers.inOrder()
	now := time.Now()
	round := 0
	for ; round < 300; round++ {
		now = now.Add(time.Second)
		probeRound(m, peers, round%len(peers), now) // up, full windows
	}
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Second)
		probeRound(m, peers, round%len(peers), now)
		round++
	}
}

// BenchmarkState1000 and BenchmarkState10000 are one publish's state of
// 1,000 and 10,000 peers (two paths each) after a round of probes, so that
// every window computes its percentiles again, as at 1 Hz.
func BenchmarkState1000(b *testing.B)  { benchState(b, 1000) }
func BenchmarkState10000(b *testing.B) { benchState(b, 10000) }

// BenchmarkState1000Flows4 and BenchmarkState10000Flows4 are the same with
// 4 probe flows per path ([probe] flows' default), every flow in the
// state.
func BenchmarkState1000Flows4(b *testing.B)  { benchStateFlows(b, 1000, 4) }
func BenchmarkState10000Flows4(b *testing.B) { benchStateFlows(b, 10000, 4) }

func benchState(b *testing.B, n int) { benchStateFlows(b, n, 1) }

func benchStateFlows(b *testing.B, n, flows int) {
	m := flowsManager(b, n, flows, 100)
	peers := m.peers.inOrder()
	now := time.Now()
	for range 100 {
		now = now.Add(time.Second)
		probeRound(m, peers, -1, now) // full windows
	}
	m.localFaults()
	m.State() // the texts it makes once
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		now = now.Add(time.Second)
		probeRound(m, peers, -1, now)
		b.StartTimer()
		m.localFaults()
		m.State()
	}
}

// TestStateFlipAllocs checks that a path flipping between up and degraded
// allocates nothing while the logger drops the lines: one peer loses a
// probe every 60 rounds, so its window of 100 holds two losses (2%, over
// the 1% threshold: degraded) for 40 rounds and one (up again) for 20.
// The reasons the flips write are the same texts every time (texts.go).
func TestStateFlipAllocs(t *testing.T) {
	t.Run("1 flow", func(t *testing.T) { testStateFlipAllocs(t, resolvedManager(t, 20)) })
	t.Run("4 flows", func(t *testing.T) { testStateFlipAllocs(t, flowsManager(t, 20, 4, 100)) })
}

func testStateFlipAllocs(t *testing.T, m *Manager) {
	peers := m.peers.inOrder()
	now := time.Now()
	round, flips, last := 0, 0, ""
	run := func() {
		now = now.Add(time.Second)
		lose := -1
		if round%60 == 0 {
			lose = 0
		}
		probeRound(m, peers, lose, now)
		round++
		if st := peers[0].state; st != last {
			flips++
			last = st
		}
	}
	for range 300 {
		run()
	}
	// A run is a cycle of 60 rounds, with its two flips: AllocsPerRun
	// reports whole allocations per run.
	cycle := func() {
		for range 60 {
			run()
		}
	}
	flips = 0
	if got := testing.AllocsPerRun(4, cycle); got != 0 {
		t.Errorf("%v allocations per 60 rounds (two state changes); want 0", got)
	}
	if flips < 8 || peers[1].state != apitype.PeerUp {
		t.Fatalf("%d state changes of the lossy peer in 300 rounds (other peer %s); want 10, the other up", flips, peers[1].state)
	}
}

// answerMessage returns the encoded answer of p's peer to its query q
// (nonce n): its path's endpoint, the fleet's fingerprint and a clock.
func answerMessage(t testing.TB, m *Manager, p *mpeer, n uint64, idx int, at time.Time) []byte {
	return answerWith(t, m, p, n, idx, at, scaleFingerprint(m.local))
}

// answerWith is answerMessage with the fingerprint fp.
func answerWith(t testing.TB, m *Manager, p *mpeer, n uint64, idx int, at time.Time, fp wire.Fingerprint) []byte {
	pa := p.paths[idx]
	ans := wire.Message{Version: wire.Version2, Type: wire.TypeAnswer, Nonce: n, NodeID: p.nodeID, Index: uint8(idx), Count: uint8(len(p.paths)),
		QPN: pa.remote.QPN, QKey: pa.remote.QKey, LID: pa.remote.LID, GID: pa.remote.GID,
		Ext: []wire.Ext{{Type: wire.ExtFingerprint, Value: fp.Marshal()}, wire.ClockAnswerExt(at, at.Add(time.Microsecond))}}
	b, err := ans.Append(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// controlManager is resolvedManager with a control endpoint that sends
// its queries (to ports nobody serves); the test answers them.
func controlManager(t *testing.T, n int) *Manager {
	m := resolvedManager(t, n)
	ctl, err := ListenControl("127.0.0.1:0", ControlOptions{NodeID: 1, Ports: func() []ud.LocalPort { return m.local }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctl.Close() })
	fp := scaleFingerprint(m.local)
	ctl.SetFingerprint(fp.Marshal())
	m.control.ctl = ctl
	m.cfg.Port = int(ctl.Addr().Port()) // the answers "come from" a port of loopback
	return m
}

// queryAndAnswer returns a function that queries the next of peers in
// turn, a second later each time, and takes the peer's answer (answers,
// with the query's nonce) as the control endpoint hands it over: decoded
// with wire.DecodeAlias in reused buffers, queued in the inbox.
func queryAndAnswer(t *testing.T, m *Manager, peers []*mpeer, answers [][]byte) func() {
	now := time.Now()
	exts := make([]wire.Ext, 0, 8)
	buf := make([]byte, wire.MaxSize+1)
	i := 0
	return func() {
		now = now.Add(time.Second)
		k := i % len(peers)
		p := peers[k]
		i++
		m.query(p, 0, now)
		q := p.queries()[len(p.queries())-1]
		n := copy(buf, answers[k])
		binary.BigEndian.PutUint64(buf[8:], q.nonce)
		msg, err := wire.DecodeAlias(buf[:n], exts)
		if err != nil {
			t.Fatal(err)
		}
		m.in.addAnswer(answer{from: q.to, m: msg, at: q.t1.Add(50 * time.Microsecond)})
		m.takeInbox(now)
	}
}

// TestClockQueryAllocs checks that a control query (the one every peer's
// first path sends every 15 s for the clock) and its answer, decoded as
// the control endpoint does (wire.DecodeAlias, in its reused buffers),
// queued in the inbox and taken (the clock sample, the fingerprint, the
// endpoint, the announced ports), allocate nothing.
func TestClockQueryAllocs(t *testing.T) {
	m := controlManager(t, 10)
	peers := m.peers.inOrder()
	for k, p := range peers {
		p.addr = netip.AddrFrom4([4]byte{127, 0, 0, byte(k + 1)})
	}
	// Each peer's answer, encoded once; the nonce is the query's.
	answers := make([][]byte, len(peers))
	for k, p := range peers {
		answers[k] = answerMessage(t, m, p, 0, 0, time.Now())
	}
	run := queryAndAnswer(t, m, peers, answers)
	for range 50 {
		run()
	}
	for _, p := range peers {
		p.clock = clockFilter{}
	}
	if got := testing.AllocsPerRun(100, run); got != 0 {
		t.Errorf("%v allocations per query and its answer; want 0", got)
	}
	for _, p := range peers {
		if p.clock.n == 0 || len(p.queries()) != 0 || !p.paths[0].resolved {
			t.Fatalf("peer %s: %d clock samples, %d queries outstanding; want the answers taken", p.spec.Name, p.clock.n, len(p.queries()))
		}
	}
	if len(m.control.nonces) != 0 {
		t.Errorf("%d nonces outstanding after every answer came", len(m.control.nonces))
	}
}

// TestMismatchedAnswerAllocs checks that the answers of peers whose
// settings differ from this node's (a kernel, rdmad's version and a port's
// MTU, as in a rolling upgrade) allocate nothing once their mismatches are
// known: the mismatches are checked again only when the answer changes what
// they depend on (it rebuilt and compared the text at every answer, some
// 15 allocations each).
func TestMismatchedAnswerAllocs(t *testing.T) {
	m := controlManager(t, 10)
	peers := m.peers.inOrder()
	other := scaleFingerprint(m.local)
	other.Kernel, other.Version = "6.12.9-other", "9.9.9"
	other.Ports[0].NetdevMTU = 9000
	answers := make([][]byte, len(peers))
	for k, p := range peers {
		p.addr = netip.AddrFrom4([4]byte{127, 0, 0, byte(k + 1)})
		answers[k] = answerWith(t, m, p, 0, 0, time.Now(), other)
	}
	run := queryAndAnswer(t, m, peers, answers)
	for range 50 {
		run()
	}
	for _, p := range peers {
		if p.rare == nil || !strings.Contains(p.rare.mismatch, "kernel 6.1.0-bench-amd64 here") || !strings.Contains(p.rare.mismatch, "vs 9000 on the peer") {
			var got string
			if p.rare != nil {
				got = p.rare.mismatch
			}
			t.Fatalf("peer %s: mismatches %q; want the kernel's and the MTU's", p.spec.Name, got)
		}
	}
	if got := testing.AllocsPerRun(100, run); got != 0 {
		t.Errorf("%v allocations per answer of a mismatched peer; want 0", got)
	}
	// A change the answer brings is still seen: its fingerprint.
	p := peers[0]
	before := p.rare.mismatch
	other.Ports[0].NetdevMTU = 1500
	now := time.Now().Add(time.Hour) // after every query run made
	m.query(p, 0, now)
	q := p.queries()[len(p.queries())-1]
	b := answerWith(t, m, p, q.nonce, 0, now, other)
	msg, err := wire.Decode(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	m.in.addAnswer(answer{from: q.to, m: msg, at: q.t1.Add(50 * time.Microsecond)})
	m.takeInbox(now.Add(time.Second))
	if p.rare.mismatch == before || !strings.Contains(p.rare.mismatch, "vs 1500 on the peer") {
		t.Errorf("after the peer's fingerprint changed: mismatches %q; want its new MTU", p.rare.mismatch)
	}
}

// TestControlAnswerAllocs checks that answering a peer's query (decoded
// as Serve does, admitted, answered with the flows, the fingerprint and
// the clock) allocates nothing.
func TestControlAnswerAllocs(t *testing.T) {
	m := resolvedManager(t, 1)
	ports := m.local
	ports[0].Flows = []ud.Flow{{QPN: 7}, {QPN: 0x21}, {QPN: 0x22}}
	ctl, err := ListenControl("127.0.0.1:0", ControlOptions{NodeID: 1, AdmitFor: time.Minute,
		Ports: func() []ud.LocalPort { return ports },
		Admit: func(string, ud.Endpoint, netip.Addr, bool, time.Time) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	fp := scaleFingerprint(ports)
	ctl.SetFingerprint(fp.Marshal())
	peer, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	from := peer.LocalAddr().(*net.UDPAddr).AddrPort()
	q := wire.Message{Version: wire.Version2, Type: wire.TypeQuery, Nonce: 5, Count: 1, QPN: 0x31, QKey: 1,
		Ext: append(*ctl.qext.Load(), wire.FlowsExt([]uint32{0x32, 0x33}), wire.Ext{Type: wire.ExtClock, Value: wire.AppendClockQuery(nil, time.Now())})}
	b, err := q.Append(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	exts := make([]wire.Ext, 0, 8)
	out := make([]byte, 0, wire.MaxSize)
	a := ctl.auth.Load()
	var ok bool
	run := func() {
		msg, err := wire.DecodeAlias(b, exts)
		if err != nil {
			t.Fatal(err)
		}
		out, ok = ctl.answer(out[:0], from, msg, a, len(b), time.Now())
	}
	run()
	if got := testing.AllocsPerRun(100, run); got != 0 {
		t.Errorf("%v allocations per query answered; want 0", got)
	}
	ans, err := wire.Decode(out, nil)
	if !ok || err != nil || ans.Nonce != 5 || len(ans.Ext) != 3 {
		t.Fatalf("answer %+v, %v; want the nonce and three extensions", ans, err)
	}
	if n, ok := wire.FlowsAccepted(ans); !ok || n != 2 {
		t.Errorf("flows accepted %d, %v; want 2", n, ok)
	}
	if _, _, ok := wire.AnswerClock(&ans); !ok {
		t.Error("the answer carries no clock")
	}
}

// TestInboxOwnsAnswers checks that a control message queued in the inbox
// keeps its extensions when the control endpoint reads the next message
// into the same buffer (wire.DecodeAlias aliases it), over a real
// socket: every answer queued reads as it was sent.
func TestInboxOwnsAnswers(t *testing.T) {
	var in inbox = newInbox()
	ctl, err := ListenControl("127.0.0.1:0", ControlOptions{NodeID: 1,
		OnAnswer: func(from netip.AddrPort, msg wire.Message) { in.addAnswer(answer{from: from, m: msg}) }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ctl.Serve(ctx) }()
	defer func() { cancel(); ctl.Close(); <-done }()
	peer, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(ctl.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	const n = 20
	value := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i)}, 40) }
	for i := range n {
		// The same size every time: each lands where the one before was.
		msg := wire.Message{Version: wire.Version2, Type: wire.TypeAnswer, Nonce: uint64(i + 1),
			Ext: []wire.Ext{{Type: 0x40, Value: value(i)}, {Type: 0x41, Value: value(n - i)}}}
		b, err := msg.Append(nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := peer.Write(b); err != nil {
			t.Fatal(err)
		}
		if i == n/2 {
			// Half of them taken and given back meanwhile: the
			// buffers are used again.
			waitAnswers(t, &in, i+1)
			in.answersDone(in.answersIn())
		}
	}
	waitAnswers(t, &in, n/2-1)
	as := in.answersIn()
	defer in.answersDone(as)
	if len(as) != n/2-1 {
		t.Fatalf("%d answers queued; want %d", len(as), n/2-1)
	}
	for _, a := range as {
		i := int(a.m.Nonce) - 1
		if len(a.m.Ext) != 2 || !bytes.Equal(a.m.Ext[0].Value, value(i)) || !bytes.Equal(a.m.Ext[1].Value, value(n-i)) {
			t.Errorf("answer %d: extensions %+v; want %q and %q", i, a.m.Ext, value(i), value(n-i))
		}
	}
}

// waitAnswers waits until the inbox holds n answers.
func waitAnswers(t *testing.T, in *inbox, n int) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		in.ansMu.Lock()
		got := len(in.answers)
		in.ansMu.Unlock()
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d answers queued after 5 s; want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}
