package probe

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestFlightsRing checks the ring of probes in flight against a map of the
// same probes, over random sends, answers, timeouts (from the front),
// refusals and dropped peers, with growth past the initial size.
func TestFlightsRing(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	peers := []*mpeer{{}, {}, {}}
	var fs flights
	model := map[uint64]*mpeer{}
	var seq, oldest uint64 = 0, 1
	maxSpan := 0
	for step := range 200000 {
		op := r.IntN(10)
		if len(model) > 300 {
			op = 8 // as a timeout bounds what is in flight
		}
		switch {
		case op < 5: // send
			seq++
			p := peers[r.IntN(len(peers))]
			fs.push(seq, flight{p: p, pa: &path{}, sent: int64(seq)})
			model[seq] = p
		case op < 8: // answer or refuse one
			if seq >= oldest {
				s := oldest + uint64(r.IntN(int(seq-oldest+1)))
				if f := fs.get(s); f != nil {
					*f = flight{}
				}
				delete(model, s)
			}
		case op < 9: // the oldest times out
			if f := fs.front(); f != nil {
				s := fs.frontSeq()
				if model[s] != f.p {
					t.Fatalf("step %d: front is seq %d of %p, the model has %p", step, s, f.p, model[s])
				}
				for old := oldest; old < s; old++ {
					if model[old] != nil {
						t.Fatalf("step %d: front skipped seq %d, which is in flight", step, old)
					}
				}
				fs.pop()
				delete(model, s)
				oldest = s + 1
			}
		default: // a peer leaves the selection
			if r.IntN(1000) == 0 {
				p := peers[r.IntN(len(peers))]
				fs.forget(p)
				for s, q := range model {
					if q == p {
						delete(model, s)
					}
				}
			}
		}
		if step%997 == 0 {
			if fs.live() != len(model) {
				t.Fatalf("step %d: %d live, the model has %d", step, fs.live(), len(model))
			}
			for s := oldest; s <= seq; s++ {
				f := fs.get(s)
				if (f == nil) != (model[s] == nil) || (f != nil && f.p != model[s]) {
					t.Fatalf("step %d: get(%d) = %v, the model has %p", step, s, f, model[s])
				}
			}
			if fs.get(seq+1) != nil || (oldest > 1 && fs.get(oldest-1) != nil) {
				t.Fatalf("step %d: a sequence number outside the ring is in flight", step)
			}
		}
		maxSpan = max(maxSpan, fs.n)
		if step%50 == 0 {
			fs.trim() // a pass
		}
	}
	if len(fs.ring) > 2*maxSpan+64 {
		t.Errorf("ring of %d entries for a span of at most %d", len(fs.ring), maxSpan)
	}
}

// TestFlightsTrim checks that a ring a burst grew is sized again to the
// spans of the passes after it, with every probe in flight kept in place.
func TestFlightsTrim(t *testing.T) {
	var fs flights
	p := &mpeer{}
	seq := uint64(0)
	for range 5000 { // the burst
		seq++
		fs.push(seq, flight{p: p, pa: &path{}, sent: int64(seq)})
	}
	for fs.n > 0 {
		fs.pop()
	}
	grown := len(fs.ring)
	// Passes as the manager's: the probes of two passes before time out,
	// 100 are sent, and the ring is trimmed at the pass's end (200 in
	// flight then, the most).
	for pass := range 3 * shrinkAfter {
		for fs.n > 100 {
			fs.pop()
		}
		for range 100 {
			seq++
			fs.push(seq, flight{p: p, pa: &path{}, sent: int64(seq)})
		}
		fs.trim()
		for s := fs.frontSeq(); s <= seq; s++ {
			if f := fs.get(s); f == nil || f.sent != int64(s) {
				t.Fatalf("pass %d: probe %d lost in the ring: %+v", pass, s, f)
			}
		}
	}
	if len(fs.ring) >= grown || len(fs.ring) > 2*200 {
		t.Errorf("a ring of %d entries after a burst and passes of 200 in flight: %d entries; want it sized to the passes", grown, len(fs.ring))
	}
}

// TestDueHeap checks the peers' turns against a model: random turns set,
// moved earlier and later, peers removed and added again; the top is always
// a peer with the earliest turn, never a removed one.
func TestDueHeap(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	var h dueHeap
	t0 := time.Now()
	peers := make([]*mpeer, 200)
	in := map[*mpeer]bool{}
	for i := range peers {
		peers[i] = &mpeer{}
		peers[i].setDue(t0.Add(time.Duration(r.IntN(1000)) * time.Millisecond))
		h.push(peers[i])
		in[peers[i]] = true
	}
	for step := range 20000 {
		p := peers[r.IntN(len(peers))]
		switch r.IntN(4) {
		case 0, 1: // move its turn
			if in[p] {
				p.setDue(t0.Add(time.Duration(r.IntN(5000)) * time.Millisecond))
				h.fix(p)
			}
		case 2: // remove or add it again
			if in[p] {
				h.remove(p)
				delete(in, p)
			} else {
				p.setDue(t0.Add(time.Duration(r.IntN(5000)) * time.Millisecond))
				h.push(p)
				in[p] = true
			}
		case 3: // visit the top: its next turn
			if h.len() == 0 {
				if len(in) != 0 {
					t.Fatalf("step %d: empty heap with %d peers in it", step, len(in))
				}
				continue
			}
			top := h.top()
			if !in[top] {
				t.Fatalf("step %d: the top was removed", step)
			}
			for q := range in {
				if q.due < top.due {
					t.Fatalf("step %d: top due %v, a peer is due earlier: %v", step, top.dueAt().Sub(t0), q.dueAt().Sub(t0))
				}
			}
			top.setDue(top.dueAt().Add(time.Second))
			h.fix(top)
		}
		if len(h.e) > 2*len(peers)+65 {
			t.Fatalf("step %d: %d entries for %d peers: stale entries pile up", step, len(h.e), len(peers))
		}
	}
}
