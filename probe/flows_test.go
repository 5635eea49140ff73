package probe

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/probe/ud"
	"github.com/rdmad/rdmad/probe/wire"
)

// flowPorts returns two local ports of k flows each, with made-up QPNs and
// source ports.
func flowPorts(k int) []ud.LocalPort {
	ports := []ud.LocalPort{{Key: "rxe0/1", Endpoint: ud.Endpoint{QPN: 7}}, {Key: "rxe1/1", Endpoint: ud.Endpoint{QPN: 8}}}
	for i := range ports {
		for f := range k {
			qpn := ports[i].QPN
			if f > 0 {
				qpn = uint32(0x100*(i+1) + f)
			}
			ports[i].Flows = append(ports[i].Flows, ud.Flow{QPN: qpn, SourcePort: uint16(0xc000 + 0x100*i + f)})
		}
	}
	return ports
}

// flowsManager is resolvedManager with k flows per path, every peer having
// admitted them all (its answer said so).
func flowsManager(t testing.TB, n, k, window int) *Manager {
	tr := &sinkTransport{ports: flowPorts(k)}
	m, err := New(Options{Transport: tr, Logger: slog.New(slog.DiscardHandler)}, Settings{Interval: time.Second, Timeout: 500 * time.Millisecond,
		Window: window, Flows: k, Threshold: Thresholds{DownAfter: 3, UpAfter: 3, LossPct: 1, MinLosses: 2}})
	if err != nil {
		t.Fatal(err)
	}
	m.local = tr.ports
	fp := scaleFingerprint(tr.ports)
	m.fps.own = &fp
	msg := wire.Message{Ext: []wire.Ext{{Type: wire.ExtFingerprint, Value: fp.Marshal()}}}
	ans := wire.Message{Type: wire.TypeAnswer, Ext: []wire.Ext{wire.FlowsAcceptedExt(k - 1)}}
	now := time.Now()
	for i := range n {
		p := m.add(Spec{Name: fmt.Sprintf("192.0.%d.%d", i/250, i%250+1), Group: fmt.Sprintf("tor-%d", i/40)}, now, false)
		m.refreshPaths(p)
		for j, pa := range p.paths {
			pa.remote, pa.resolved = ud.Endpoint{QPN: uint32(0x1000 + 2*i + j), GID: [16]byte{15: byte(i)}}, true
			m.acceptFlows(pa, m.local[j], ans)
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

// flowsRound sends a turn to every path of peers and answers every probe
// but those lose says to lose, then times out the rest.
func flowsRound(m *Manager, peers []*mpeer, lose func(p *mpeer, flow uint8) bool, now time.Time) {
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
		if f == nil || lose(f.p, f.flow) {
			continue
		}
		m.onReply(ud.Reply{Local: f.pa.local, Flow: f.flow, From: f.pa.remote, Seq: seq, RTT: 30 * time.Microsecond, ResponderDelay: 5 * time.Microsecond, At: at})
	}
	m.expire(now.Add(time.Second))
}

// TestFlowsOneLossy: a path's turns walk its flows round-robin, one
// probe a turn; a path whose flow 2 of 4 drops everything stays up on
// that flow's first loss (noise), which makes its next turn a burst on
// every flow, and is degraded (not up, not down) at the burst's second
// loss, with "1 of 4 flows" in its reason; the state shows the flows with
// the lossy one marked, and the path is up again once the flow's window
// is clean. The other peers cost one probe a turn throughout.
func TestFlowsOneLossy(t *testing.T) {
	m := flowsManager(t, 3, 4, 10)
	peers := m.peers.inOrder()
	now := time.Now()
	bad := peers[1]
	dropFlow2 := func(p *mpeer, f uint8) bool { return p == bad && f == 2 }
	for r := range 4 {
		if r == 3 && bad.state != apitype.PeerUp {
			t.Fatalf("after 3 turns (flow 2 lost once) the peer is %s (%s), want up", bad.state, bad.reason)
		}
		now = now.Add(time.Second)
		flowsRound(m, peers, dropFlow2, now)
	}
	for _, p := range peers {
		want := apitype.PeerUp
		if p == bad {
			want = apitype.PeerDegraded
		}
		if p.state != want {
			t.Fatalf("peer %s is %s (%s), want %s", p.spec.Name, p.state, p.reason, want)
		}
	}
	if !strings.Contains(bad.reason, "loss on 1 of 4 flows") || !strings.Contains(bad.reason, "flow 2") || !strings.Contains(bad.reason, "UDP source port") {
		t.Errorf("reason %q: want it to say 1 of 4 flows, which, and its source port", bad.reason)
	}
	st := m.State()
	var pp apitype.PeerPath
	for _, sp := range st.Peers {
		var sent uint64
		for _, f := range sp.Paths[0].Flows {
			sent += f.Sent
		}
		if sp.Name == bad.spec.Name {
			pp = sp.Paths[0]
		} else if sent != 4 || sp.Paths[0].Sent != 4 {
			t.Errorf("peer %s: %d probes in 4 turns (path says %d), want 4: one a turn", sp.Name, sent, sp.Paths[0].Sent)
		}
	}
	if pp.State != apitype.PeerDegraded || pp.LossyFlows != 1 || len(pp.Flows) != 4 {
		t.Fatalf("path %+v: want degraded with 4 flows, 1 lossy", pp)
	}
	// Turns 1 to 3 on flows 0 to 2, turn 4 the burst on all four.
	wantSent := []uint64{2, 2, 2, 1}
	for i, f := range pp.Flows {
		lossy := i == 2
		if f.Flow != i || f.Lossy != lossy || f.SourcePort != uint16(0xc000+i) || f.Sent != wantSent[i] || (f.Lost == f.Sent) != lossy || (f.LossPct == 100) != lossy {
			t.Errorf("flow %d: %+v; want sent %d, lost all only on flow 2, source port %#x", i, f, wantSent[i], 0xc000+i)
		}
		if !lossy && (f.RTTP50 != q(30*time.Microsecond) || f.RTTP99 != q(30*time.Microsecond)) {
			t.Errorf("flow %d: RTT p50 %v p99 %v, want 30µs as a window keeps it", i, f.RTTP50, f.RTTP99)
		}
	}
	// A lossy flow's further losses, the others answering, bring no
	// burst: the turns stay one probe each.
	sent0 := bad.paths[0].sent
	for range 8 {
		now = now.Add(time.Second)
		flowsRound(m, peers, dropFlow2, now)
	}
	if d := bad.paths[0].sent - sent0; d != 8 {
		t.Errorf("8 turns of the degraded path sent %d probes, want 8", d)
	}
	// Healed: once the flow's window (10/4 turns, at least 5) has at most
	// 1 loss it clears: 4 answers on flow 2, 16 turns.
	for range 16 {
		now = now.Add(time.Second)
		flowsRound(m, peers, func(*mpeer, uint8) bool { return false }, now)
	}
	if bad.state != apitype.PeerUp || bad.paths[0].fl.lossy != 0 {
		t.Errorf("after the flow healed: %s (%s), %d lossy flows; want up", bad.state, bad.reason, bad.paths[0].fl.lossy)
	}
}

// TestFlowsDown: a path is down only when its last down_after probes
// and every flow's last one were lost: a turn's loss brings a burst on
// every flow, and a path that loses it is down after two turns; one with
// a flow of four still answering is degraded ("3 of 4"). Back, it is up
// after up_after answers, its flows afresh.
func TestFlowsDown(t *testing.T) {
	m := flowsManager(t, 2, 4, 10)
	peers := m.peers.inOrder()
	now := time.Now()
	a, b := peers[0], peers[1]
	lose := func(p *mpeer, f uint8) bool { return p == a || (p == b && f != 0) }
	for range 2 {
		now = now.Add(time.Second)
		flowsRound(m, peers, lose, now)
	}
	if a.state != apitype.PeerDown {
		t.Errorf("peer losing every flow is %s (%s) after a turn and a burst, want down", a.state, a.reason)
	}
	for range 8 {
		now = now.Add(time.Second)
		flowsRound(m, peers, lose, now)
	}
	if b.state != apitype.PeerDegraded || !strings.Contains(b.reason, "3 of 4 flows") {
		t.Errorf("peer answering on one flow of four is %s (%s), want degraded, 3 of 4 flows", b.state, b.reason)
	}
	// Back: up after up_after answers, its flows afresh.
	for range 3 {
		now = now.Add(time.Second)
		flowsRound(m, peers, func(*mpeer, uint8) bool { return false }, now)
	}
	if a.state != apitype.PeerUp || a.paths[0].fl.lossy != 0 {
		t.Errorf("peer back is %s (%s), %d lossy flows; want up", a.state, a.reason, a.paths[0].fl.lossy)
	}
}

// TestFlowsUpOnTheAnsweringFlows: a down path whose flows come back but
// two of four is up after up_after answers on the two, although no
// up_after of its probes in a row were answered.
func TestFlowsUpOnTheAnsweringFlows(t *testing.T) {
	m := flowsManager(t, 1, 4, 10)
	p := m.peers.inOrder()[0]
	now := time.Now()
	for range 2 {
		now = now.Add(time.Second)
		flowsRound(m, []*mpeer{p}, func(*mpeer, uint8) bool { return true }, now)
	}
	if p.state != apitype.PeerDown {
		t.Fatalf("peer is %s (%s), want down", p.state, p.reason)
	}
	halfDead := func(_ *mpeer, f uint8) bool { return f == 1 || f == 2 }
	for r := range 12 {
		now = now.Add(time.Second)
		flowsRound(m, []*mpeer{p}, halfDead, now)
		if p.state != apitype.PeerDown {
			t.Logf("up after %d turns", r+1)
			break
		}
	}
	if p.state == apitype.PeerDown {
		t.Errorf("a path answering on 2 of 4 flows stays %s (%s) after 12 turns", p.state, p.reason)
	}
}

// TestFlowsOldPeer: a peer whose answer does not say it admitted the
// flows (an rdmad that predates them) is probed on flow 0 only, and its
// path reports one flow; one that admitted 2 of 3 gets 3 flows.
func TestFlowsOldPeer(t *testing.T) {
	m := flowsManager(t, 1, 4, 10)
	p := m.peers.inOrder()[0]
	pa := p.paths[0]
	m.acceptFlows(pa, m.local[0], wire.Message{Type: wire.TypeAnswer}) // no extension
	if pa.pathFlows() != 1 || pa.fl != nil {
		t.Fatalf("after an answer without flows the path has %d flows", pa.pathFlows())
	}
	var targets []ud.Target
	m.opts.Transport = &recordTransport{sinkTransport: sinkTransport{ports: m.local}, got: &targets}
	now := time.Now()
	m.send(p, pa, now)
	m.sched.flush(m.opts.Transport, m.log)
	if len(targets) != 1 || targets[0].Flow != 0 {
		t.Fatalf("probes to an old peer: %+v, want one on flow 0", targets)
	}
	st := m.peerState(p)
	if len(st.Paths[0].Flows) != 1 || st.Paths[0].Flows[0].SourcePort != 0xc000 || st.Paths[0].Flows[0].QPN != 7 {
		t.Errorf("flows of the path %+v: want one, flow 0 of rxe0/1", st.Paths[0].Flows)
	}
	m.acceptFlows(pa, m.local[0], wire.Message{Type: wire.TypeAnswer, Ext: []wire.Ext{wire.FlowsAcceptedExt(2)}})
	targets = targets[:0]
	for range 4 {
		m.send(p, pa, now)
		m.sched.flush(m.opts.Transport, m.log)
	}
	if len(targets) != 4 || targets[0].Flow != 0 || targets[1].Flow != 1 || targets[2].Flow != 2 || targets[3].Flow != 0 {
		t.Errorf("4 turns after 2 more flows were admitted: %+v, want one probe each, on flows 0, 1, 2, 0", targets)
	}
	// More than were offered is not believed.
	m.acceptFlows(pa, m.local[0], wire.Message{Type: wire.TypeAnswer, Ext: []wire.Ext{wire.FlowsAcceptedExt(9)}})
	if pa.pathFlows() != 4 {
		t.Errorf("an answer admitting 9 of 3 offered flows gives %d flows, want 4", pa.pathFlows())
	}
}

type recordTransport struct {
	sinkTransport
	got *[]ud.Target
}

func (r *recordTransport) ProbeBatch(local string, ts []ud.Target) int {
	*r.got = append(*r.got, ts...)
	return r.sinkTransport.ProbeBatch(local, ts)
}

// TestFlowsAdmission: the control endpoint admits the further flows an
// allowed query names, each as the querier's endpoint with that QPN, and
// says how many in its answer; a query naming more than 15, zero, its own
// QPN or duplicates admits nothing and gets no answer; flows past a refused
// admission are not admitted; a version-1 query and one without flows get
// no flows extension. Nothing is answered or admitted beyond the bound.
func TestFlowsAdmission(t *testing.T) {
	local := ud.LocalPort{Key: "rxe0/1", Endpoint: ud.Endpoint{QPN: 0x11, QKey: 0x1234, GID: [16]byte{15: 1}}}
	var mu sync.Mutex
	var admitted []uint32
	refuseAfter := 100
	c, err := ListenControl("127.0.0.1:0", ControlOptions{NodeID: 7, AdmitFor: time.Minute,
		Ports: func() []ud.LocalPort { return []ud.LocalPort{local} },
		Admit: func(_ string, src ud.Endpoint, _ netip.Addr, _ bool, _ time.Time) error {
			mu.Lock()
			defer mu.Unlock()
			if len(admitted) >= refuseAfter {
				return fmt.Errorf("full")
			}
			if src.GID != ([16]byte{15: 2}) || src.QKey != 0x55 {
				return fmt.Errorf("flow admitted as %+v, not as the querier's endpoint", src)
			}
			admitted = append(admitted, src.QPN)
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	c.SetAllow(nil, []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Serve(ctx) }()
	defer func() {
		cancel()
		<-done
		c.Close()
	}()
	cl, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	nonce := uint64(0)
	ask := func(ver uint8, ext []wire.Ext) (wire.Message, bool) {
		t.Helper()
		nonce++
		q := wire.Message{Version: ver, Type: wire.TypeQuery, Nonce: nonce, Count: 1, QPN: 0x22, QKey: 0x55, GID: [16]byte{15: 2}, Ext: ext}
		b, err := q.Append(nil, nil)
		if err != nil {
			// More than the extension area holds cannot even be sent.
			return wire.Message{}, false
		}
		got := exchange(t, cl, c.Addr(), b)
		if got == nil {
			return wire.Message{}, false
		}
		m, err := wire.Decode(got, nil)
		if err != nil {
			t.Fatalf("answer does not decode: %v", err)
		}
		if len(got) > len(b) {
			t.Errorf("answer of %d bytes to a query of %d", len(got), len(b))
		}
		return m, true
	}
	reset := func() []uint32 {
		mu.Lock()
		defer mu.Unlock()
		out := admitted
		admitted = nil
		return out
	}
	qpns := func(n, from int) []uint32 {
		out := make([]uint32, n)
		for i := range out {
			out[i] = uint32(from + i)
		}
		return out
	}

	a, ok := ask(wire.Version2, []wire.Ext{wire.FlowsExt(qpns(3, 0x30))})
	if n, said := wire.FlowsAccepted(a); !ok || !said || n != 3 {
		t.Fatalf("answer to 3 flows: %v, accepted %d (%v)", ok, n, said)
	}
	if got := reset(); len(got) != 4 || got[0] != 0x22 || got[1] != 0x30 || got[3] != 0x32 {
		t.Errorf("admitted %#x, want the header's QPN and the 3 flows", got)
	}
	// The attacks: 1,000 QPNs (cannot be encoded: 3,000 bytes), 300 (the
	// most that fit), 16, a zero, the header's own QPN, a duplicate.
	for name, ext := range map[string]wire.Ext{
		"1000 QPNs":   wire.FlowsExt(qpns(1000, 0x1000)),
		"300 QPNs":    wire.FlowsExt(qpns(300, 0x1000)),
		"16 QPNs":     wire.FlowsExt(qpns(16, 0x1000)),
		"zero QPN":    wire.FlowsExt([]uint32{0x30, 0}),
		"header QPN":  wire.FlowsExt([]uint32{0x30, 0x22}),
		"duplicate":   wire.FlowsExt([]uint32{0x30, 0x31, 0x30}),
		"stray bytes": {Type: wire.ExtFlows, Value: []byte{0, 0, 0x30, 0, 0}},
	} {
		if _, ok := ask(wire.Version2, []wire.Ext{ext}); ok {
			t.Errorf("%s: answered", name)
		}
		if got := reset(); len(got) != 0 {
			t.Errorf("%s: admitted %#x", name, got)
		}
	}
	// 15, the bound, all admitted.
	a, _ = ask(wire.Version2, []wire.Ext{wire.FlowsExt(qpns(15, 0x40))})
	if n, _ := wire.FlowsAccepted(a); n != 15 || len(reset()) != 16 {
		t.Errorf("15 flows: accepted %d", n)
	}
	// The engine refuses after the header's QPN and two flows: the answer
	// says 2, the rest are not tried.
	mu.Lock()
	refuseAfter = 3
	mu.Unlock()
	a, _ = ask(wire.Version2, []wire.Ext{wire.FlowsExt(qpns(5, 0x50))})
	if n, said := wire.FlowsAccepted(a); n != 2 || !said {
		t.Errorf("flows admitted until a refusal: answer says %d (%v), want 2", n, said)
	}
	if got := reset(); len(got) != 3 {
		t.Errorf("admitted %#x, want 3", got)
	}
	mu.Lock()
	refuseAfter = 100
	mu.Unlock()
	// No flows named: the answer says nothing of flows (as an old
	// responder's), and a version-1 query has none.
	for _, ver := range []uint8{wire.Version1, wire.Version2} {
		a, ok := ask(ver, nil)
		if _, said := wire.FlowsAccepted(a); !ok || said {
			t.Errorf("version %d query without flows: answered %v, flows said %v", ver, ok, said)
		}
		if got := reset(); len(got) != 1 {
			t.Errorf("version %d query without flows admitted %#x", ver, got)
		}
	}
}

// TestFlowsNoHurryOnOneFlow: a lost probe of a flow not known lossy
// brings the path's next turn forward and makes it a burst on every flow
// (to tell noise, a bad flow and an outage apart within a timeout); one
// of a lossy flow while the others answer does not (that would probe the
// path ten times a second while a flow is dead); losses on every flow do.
func TestFlowsNoHurryOnOneFlow(t *testing.T) {
	m := flowsManager(t, 1, 4, 10)
	p := m.peers.inOrder()[0]
	var targets []ud.Target
	m.opts.Transport = &recordTransport{sinkTransport: sinkTransport{ports: m.local}, got: &targets}
	now := time.Now()
	// turn gives the peer a turn (on each of its 2 paths) that loses what
	// lose says, and returns when the next is due and how many probes
	// went on each path.
	turn := func(lose func(*mpeer, uint8) bool) (time.Duration, int) {
		t.Helper()
		// The round times its losses out a second after now.
		p.setDue(now.Add(5 * time.Second))
		m.sched.due.fix(p)
		targets = targets[:0]
		flowsRound(m, []*mpeer{p}, lose, now)
		return p.dueAt().Sub(now), len(targets) / len(p.paths)
	}
	bursts := func() (n int) {
		for _, pa := range p.paths {
			if pa.fl.burst {
				n++
			}
		}
		return n
	}
	// A turn lost (flow 0 of each path): soon, and bursts.
	if d, n := turn(func(*mpeer, uint8) bool { return true }); d >= 2*time.Second || n != 1 || bursts() != 2 {
		t.Errorf("flow 0's first loss: next turn in %v after %d probes a path, %d bursts; want soon, after 1, 2", d, n, bursts())
	}
	if _, n := turn(func(*mpeer, uint8) bool { return false }); n != 4 || bursts() != 0 {
		t.Errorf("the burst sent %d probes a path, %d bursts left; want 4, 0", n, bursts())
	}
	// Flow 2 lossy (two losses in its window), its turn lost, the
	// others answering: no hurry.
	for _, pa := range p.paths {
		pa.fl.flows[2].win.add(sample{lost: true})
		pa.fl.flows[2].win.add(sample{lost: true})
		pa.fl.flows[2].lossy, pa.fl.lossy, pa.fl.next = true, 1, 2
	}
	if d, n := turn(func(_ *mpeer, f uint8) bool { return f == 2 }); d != 5*time.Second || n != 1 || bursts() != 0 {
		t.Errorf("a lossy flow lost: next turn moved to %v after %d probes a path, %d bursts; want it kept at 5s, 1, none", d, n, bursts())
	}
	// Every flow losing: a burst lost whole is soon again.
	for _, pa := range p.paths {
		pa.fl.burst = true
	}
	if d, n := turn(func(*mpeer, uint8) bool { return true }); d >= 2*time.Second || n != 4 {
		t.Errorf("every flow lost: next turn in %v after %d probes a path, want within 100ms of the timeouts, after 4", d, n)
	}
}

// TestFlowsBudget: at flows = 4 a path's turns cost what they cost on
// one flow, one probe each, and the flows share them evenly.
func TestFlowsBudget(t *testing.T) {
	m := flowsManager(t, 10, 4, 100)
	peers := m.peers.inOrder()
	now := time.Now()
	for range 100 {
		now = now.Add(time.Second)
		flowsRound(m, peers, func(*mpeer, uint8) bool { return false }, now)
	}
	for _, p := range peers {
		for _, pa := range p.paths {
			if pa.sent != 100 {
				t.Errorf("%s %s: %d probes in 100 turns, want 100", p.spec.Name, pa.local, pa.sent)
			}
			for i, f := range pa.fl.flows {
				if f.sent != 25 || f.win.size() != 25 {
					t.Errorf("%s %s flow %d: %d probes, window of %d; want 25 and 25", p.spec.Name, pa.local, i, f.sent, f.win.size())
				}
			}
		}
	}
}

// TestFlowsPathFigures: a path's figures are those of the union of its
// flows' windows (window/K each, at least 5): the loss over all of them,
// the percentiles of every flow's answers together; and back from down
// the path counts only the samples since.
func TestFlowsPathFigures(t *testing.T) {
	m := flowsManager(t, 1, 4, 10)
	p := m.peers.inOrder()[0]
	pa := p.paths[0]
	now := time.Now()
	for r := range 6 { // 6 rounds: the windows of 5 are full
		now = now.Add(time.Second)
		for f := range 4 {
			// Flow f answers in (f+1) × 10 µs; flow 0 lost the last
			// round but one.
			m.observeFlow(p, pa, f, sample{lost: f == 0 && r == 4, rtt: time.Duration(f+1) * 10 * time.Microsecond}, now)
		}
	}
	pp := m.State().Peers[0].Paths[0]
	// 19 answers: 4 of 10 µs, then 5 each of 20, 30 and 40 µs.
	if pp.State != apitype.PeerUp || pp.Samples != 20 || pp.LossPct != 5 || pp.RTTP50 != q(30*time.Microsecond) || pp.RTTP99 != q(40*time.Microsecond) {
		t.Errorf("path %s: %d samples, loss %v%%, RTT p50 %v p99 %v; want up, 20, 5%%, 30µs, 40µs", pp.State, pp.Samples, pp.LossPct, pp.RTTP50, pp.RTTP99)
	}
	if f := pp.Flows[0]; f.LossPct != 20 || f.RTTP50 != q(10*time.Microsecond) {
		t.Errorf("flow 0: loss %v%%, RTT p50 %v; want 20%%, 10µs", f.LossPct, f.RTTP50)
	}
	// Down (3 failures of the whole path), then up after 3 answers on
	// flow 1: the path's figures start again from the answer that
	// brought it up.
	for range 3 {
		m.observeFlow(p, pa, -1, sample{lost: true}, now)
	}
	if pa.h.state != apitype.PeerDown {
		t.Fatalf("path after 3 losses on every flow: %s, want down", pa.h.state)
	}
	for range 3 {
		m.observeFlow(p, pa, 1, sample{rtt: 50 * time.Microsecond}, now)
	}
	pp = m.State().Peers[0].Paths[0]
	if pp.State != apitype.PeerUp || pp.Samples != 1 || pp.LossPct != 0 || pp.RTTP50 != q(50*time.Microsecond) || pp.LossyFlows != 0 {
		t.Errorf("path back up: %s, %d samples, loss %v%%, RTT p50 %v, %d lossy flows; want up, 1, 0%%, 50µs, 0", pp.State, pp.Samples, pp.LossPct, pp.RTTP50, pp.LossyFlows)
	}
}
