package probe

import (
	"context"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/probe/ud"
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
	p.due = now.Add(m.cfg.Interval)
	m.sched.due.fix(p)
	for _, pa := range p.paths {
		pa.asked = now
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
		pa.asked = now
		m.send(p, pa, now)
	}
	m.sched.flush(m.opts.Transport, m.log)
	p.due = now.Add(m.cfg.Interval)
	m.sched.due.fix(p)
	answer(now)
	m.tick(ctx, now.Add(time.Millisecond))
	// The probes this pass sent are lost.
	m.expire(now.Add(time.Second))
	if p.state != apitype.PeerDown {
		t.Fatalf("a lost probe after one answer: the peer is %s, want down", p.state)
	}
	if d := p.due.Sub(now); d < m.cfg.Interval/2 {
		t.Errorf("after a loss the down peer's next turn is %v away, want about an interval", d)
	}
}
