package probe

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/probe/ud"
	"github.com/rdmad/rdmad/probe/wire"
)

// TestRise: a down peer that answers again (a partition's end) is probed
// again in the pass that took the answer, and the pass after comes at the
// next tick, so that its up_after answers take two batch windows, not two
// intervals (2 s at the defaults: the partition drill, docs/TESTING.md).
// A loss in between puts its turns back to the interval.
func TestRise(t *testing.T) {
	m := flowsManager(t, 1, 1, 10)
	m.cfg.Rotate, m.cfg.Resolve = time.Hour, time.Hour
	ctx := context.Background()
	p := m.peers.inOrder()[0]
	all := func(*mpeer, uint8) bool { return false }
	none := func(*mpeer, uint8) bool { return true }
	now := alignUp(time.Now(), batchWindow(m.cfg.Interval)).Add(time.Millisecond)
	m.peers.epoch = uint64(now.UnixNano()) / uint64(m.cfg.Rotate) // no reselection: no endpoint here
	flowsRound(m, []*mpeer{p}, all, now)
	for range 3 {
		now = now.Add(time.Second)
		flowsRound(m, []*mpeer{p}, none, now)
	}
	if p.state != apitype.PeerDown {
		t.Fatalf("after 3 rounds lost the peer is %s, want down", p.state)
	}
	// Its turn is an interval away; the queries of a down path were
	// just sent (no control endpoint here to send more).
	now = now.Add(time.Second)
	p.setDue(now.Add(m.cfg.Interval))
	m.sched.due.fix(p)
	for _, pa := range p.paths {
		pa.asked = monoNs(now)
	}
	// answer replies to every probe in flight, as the link is back.
	answer := func(at time.Time) int {
		n := 0
		for seq := m.sched.flights.frontSeq(); seq <= m.sched.seq; seq++ {
			if f := m.sched.flights.get(seq); f != nil && f.p == p {
				m.OnReply(ud.Reply{Local: f.pa.local, Flow: f.flow, From: f.pa.remote, Seq: seq, RTT: 30 * time.Microsecond, At: at})
				n++
			}
		}
		return n
	}
	// A probe of the down path went out with its last turn (one per
	// path); the link returns and it is answered.
	for _, pa := range p.paths {
		m.send(p, pa, now)
	}
	m.sched.flush(m.opts.Transport, m.log)
	w := batchWindow(m.cfg.Interval)
	for i := 1; i <= 3; i++ {
		if n := answer(now); n == 0 {
			t.Fatalf("answer %d: no probe of the peer in flight (sent %d so far)", i, m.sched.seq)
		}
		seq := m.sched.seq
		next := m.tick(ctx, now.Add(time.Millisecond))
		if i == 3 {
			if p.state != apitype.PeerUp {
				t.Fatalf("after 3 answers in a row the peer is %s, want up", p.state)
			}
			break
		}
		if p.state != apitype.PeerDown {
			t.Fatalf("after %d answers the peer is %s, want down still (up_after 3)", i, p.state)
		}
		if m.sched.seq == seq {
			t.Fatalf("answer %d of a down peer: no probe sent in the pass that took it", i)
		}
		if next.After(now.Add(w + time.Millisecond)) {
			t.Fatalf("answer %d of a down peer: the next pass at +%v, want the next tick (+%v at most)", i, next.Sub(now), w)
		}
		if !m.in.urgent.Load() {
			t.Fatalf("answer %d of a down peer: its next answer does not wake the manager at once", i)
		}
		now = next
	}

	// Up: a pass without a rising path's answer ends the urgency.
	m.tick(ctx, now.Add(2*time.Millisecond))
	if m.in.urgent.Load() {
		t.Errorf("the peer is up and nothing rises, but replies still wake the manager at once")
	}

	// Down again, then an answer and a loss: the turns go back to the
	// interval.
	for range 3 {
		now = now.Add(time.Second)
		flowsRound(m, []*mpeer{p}, none, now)
	}
	now = now.Add(time.Second)
	for _, pa := range p.paths {
		pa.asked = monoNs(now)
		m.send(p, pa, now)
	}
	m.sched.flush(m.opts.Transport, m.log)
	p.setDue(now.Add(m.cfg.Interval))
	m.sched.due.fix(p)
	answer(now)
	m.tick(ctx, now.Add(time.Millisecond))
	// The probes this pass sent are lost.
	m.expire(now.Add(time.Second))
	if p.state != apitype.PeerDown {
		t.Fatalf("a lost probe after one answer: the peer is %s, want down", p.state)
	}
	if d := p.dueAt().Sub(now); d < m.cfg.Interval/2 {
		t.Errorf("after a loss the down peer's next turn is %v away, want about an interval", d)
	}
}

// TestNewQPWhileDown: a partition's end as node 1 sees it. Its queries
// went unanswered while the link was down, so the path kept the old QP
// (resolved) and probed it; the first answer after the link came back
// names the port's new QP. The probes in flight to the old QP are lost
// now, not at their timeout (where they would break the run of answers
// the new QP gives), the new QP is probed at once, and its answer is taken
// at once (rising), not at the next turn an interval later.
func TestNewQPWhileDown(t *testing.T) {
	m := flowsManager(t, 1, 1, 10)
	m.cfg.Rotate, m.cfg.Resolve = time.Hour, time.Hour
	p := m.peers.inOrder()[0]
	now := time.Now()
	flowsRound(m, []*mpeer{p}, func(*mpeer, uint8) bool { return false }, now)
	for range 3 {
		now = now.Add(time.Second)
		flowsRound(m, []*mpeer{p}, func(*mpeer, uint8) bool { return true }, now)
	}
	pa := p.paths[0]
	if pa.h.state != apitype.PeerDown || !pa.resolved {
		t.Fatalf("after 3 rounds lost the path is %s (resolved %v), want down, resolved", pa.h.state, pa.resolved)
	}
	// The turn that asks again also probes the old QP.
	now = now.Add(time.Second)
	old := pa.remote
	m.send(p, pa, now)
	m.sched.flush(m.opts.Transport, m.log)
	lost, inflight := pa.lost, pa.inflight
	if inflight == 0 {
		t.Fatalf("no probe in flight to the old QP")
	}
	to := netip.AddrPortFrom(p.addr, 18516)
	const nonce = 77
	m.control.nonces[nonce] = p
	m.control.takeQueries(p)
	p.queried.q = append(p.queried.q, pendingQuery{nonce: nonce, query: query{idx: 0, to: to, ver: wire.Version2, sent: now}})
	seq := m.sched.seq
	m.onAnswer(answer{from: to, at: now, m: wire.Message{Version: wire.Version2, Type: wire.TypeAnswer, Nonce: nonce, Index: 0, Count: 2,
		QPN: old.QPN + 0x100, GID: old.GID, QKey: old.QKey}}, now.Add(time.Millisecond))
	if pa.remote.QPN != old.QPN+0x100 {
		t.Fatalf("the path probes QP %#x, want the new %#x", pa.remote.QPN, old.QPN+0x100)
	}
	if pa.lost != lost+uint64(inflight) {
		t.Errorf("lost %d, was %d with %d in flight to the old QP; want those counted lost at once", pa.lost, lost, inflight)
	}
	for s := m.sched.flights.frontSeq(); s <= seq; s++ {
		if f := m.sched.flights.get(s); f != nil && f.pa == pa {
			t.Errorf("probe %d to the old QP still in flight", s)
		}
	}
	if m.sched.seq == seq || pa.inflight == 0 {
		t.Errorf("the new QP was not probed at once (sequence %d, was %d; in flight %d)", m.sched.seq, seq, pa.inflight)
	}
	if !m.sched.rising {
		t.Errorf("the new QP's answer is not taken at once")
	}
}

// TestQueryFromDownPeer: a down peer that queries this node (its link is
// back) has its turn at once, to be asked for its new QP, instead of an
// interval later; an up peer's turn stays, and with a fleet key an
// unauthenticated query (anyone can send one from the peer's address)
// moves nothing.
func TestQueryFromDownPeer(t *testing.T) {
	m := flowsManager(t, 1, 1, 10)
	m.cfg.Rotate, m.cfg.Resolve = time.Hour, time.Hour
	p := m.peers.inOrder()[0]
	now := time.Now()
	flowsRound(m, []*mpeer{p}, func(*mpeer, uint8) bool { return false }, now)
	from := netip.AddrPortFrom(p.addr, 40000)
	query := answer{from: from, at: now, query: true, m: wire.Message{Version: wire.Version2, Type: wire.TypeQuery, Nonce: 5}}

	// Up: a query leaves its turn where it is.
	later := now.Add(m.cfg.Interval)
	p.setDue(later)
	m.sched.due.fix(p)
	m.onAnswer(query, now)
	if !p.dueAt().Equal(later) {
		t.Fatalf("an up peer's query moved its turn from %v to %v", later, p.dueAt())
	}

	for range 3 {
		now = now.Add(time.Second)
		flowsRound(m, []*mpeer{p}, func(*mpeer, uint8) bool { return true }, now)
	}
	if !p.anyPathDown() {
		t.Fatalf("after 3 rounds lost no path is down")
	}
	later = now.Add(m.cfg.Interval)
	p.setDue(later)
	m.sched.due.fix(p)

	// A fleet key: an unauthenticated query does not count.
	m.cfg.Auth.Key = []byte("0123456789abcdef0123456789abcdef")
	m.onAnswer(query, now)
	if !p.dueAt().Equal(later) {
		t.Fatalf("an unauthenticated query with a fleet key moved a down peer's turn to %v", p.dueAt())
	}
	m.cfg.Auth.Key = nil

	m.onAnswer(query, now)
	if p.dueAt().After(now) {
		t.Fatalf("a down peer's query left its turn at %v, %v after the query", p.dueAt(), p.dueAt().Sub(now))
	}
	if m.sched.due.top() != p {
		t.Fatalf("the down peer that queried is not the next turn")
	}
}
