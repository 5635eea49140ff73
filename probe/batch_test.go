package probe

import (
	"math"
	"net/netip"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/probe/wire"
)

// TestBatchBoundedByTransport: a transport that bounds its batches
// (verbs/peer's Engine, by its slots) never gets a larger one, and the
// peers are still probed at their rate: a window's probes go in several
// passes instead. Without a bound a pass takes up to maxBatch.
func TestBatchBoundedByTransport(t *testing.T) {
	if testing.Short() {
		t.Skip("probes 300 fake peers for some seconds")
	}
	for _, limit := range []int{16, 0} {
		scaleMaxBatch = limit
		r := startScale(t, 300, 1, 100*time.Microsecond, 0)
		scaleMaxBatch = 0
		if want := batchLimit(r.tr); r.m.sched.limit != want || (limit > 0 && want != limit) || (limit == 0 && want != maxBatch) {
			t.Errorf("transport bound %d: the manager's pass limit is %d (batchLimit %d)", limit, r.m.sched.limit, want)
		}
		r.waitUp(t, 30*time.Second)
		sent0, start := r.tr.Sent(), time.Now()
		time.Sleep(3 * time.Second)
		rate := float64(r.tr.Sent()-sent0) / time.Since(start).Seconds()
		largest := r.tr.LargestBatch()
		r.stop(t)
		if rate < 0.8*300 || rate > 1.25*300 {
			t.Errorf("transport bound %d: %.0f probes/s, want about 300 (300 peers at 1 Hz)", limit, rate)
		}
		switch {
		case limit > 0 && largest > limit:
			t.Errorf("transport bound %d: a batch of %d probes", limit, largest)
		case limit > 0 && largest < limit/2:
			t.Errorf("transport bound %d: the largest batch was %d: the bound was not reached, the test shows nothing", limit, largest)
		case limit == 0 && largest <= 16:
			t.Errorf("no transport bound: the largest batch was %d; a window of 300 peers at 1 Hz holds about 75", largest)
		}
	}
}

// TestShrinker checks how the inbox sizes a buffer: one of at most
// shrinkKeep bytes is kept whatever it held; a larger one is kept for a
// whole period of shrinkAfter takes, whatever it held, then sized to a
// quarter more than the most a take held in this period and the one
// before once that is under half of it; a burst within the two periods
// keeps it.
func TestShrinker(t *testing.T) {
	const size = 152
	var s shrinker
	for range 10 * shrinkAfter {
		if c := s.size(0, shrinkKeep/size, size); c != shrinkKeep/size {
			t.Fatalf("a buffer of %d bytes was sized to %d entries", shrinkKeep/size*size, c)
		}
	}

	// A burst of 256 (38 KiB) at the start, then takes of 3.
	s = shrinker{}
	c := 256
	if got := s.size(c, c, size); got != c {
		t.Fatalf("the burst's take: sized to %d, want %d", got, c)
	}
	for i := 1; i < 2*shrinkAfter-1; i++ {
		if got := s.size(3, c, size); got != c {
			t.Fatalf("take %d after the burst (within two periods): sized to %d, want %d kept", i, got, c)
		}
	}
	if got := s.size(40, c, size); got != 50 {
		t.Fatalf("after two periods of takes of 3 and one of 40: sized to %d, want 50", got)
	}
	// Takes of 40 in a buffer of 50: kept.
	for i := range 3 * shrinkAfter {
		if got := s.size(40, 50, size); got != 50 {
			t.Fatalf("take %d: a buffer of 50 holding 40 sized to %d", i, got)
		}
	}

	// A buffer held at half or more is kept.
	s = shrinker{}
	for i := range 3 * shrinkAfter {
		if got := s.size(c/2, c, size); got != c {
			t.Fatalf("take %d: a buffer of %d holding %d sized to %d", i, c, c/2, got)
		}
	}

	// Nothing held for two periods: given up (0).
	s = shrinker{}
	for range 2 * shrinkAfter {
		s.size(0, c, size)
	}
	if got := s.size(0, c, size); got != 0 {
		t.Errorf("a buffer of %d that held nothing for two periods sized to %d, want 0", c, got)
	}
}

// TestResize checks that resize empties the buffer it keeps, and makes a
// new one, of the capacity asked, to shrink.
func TestResize(t *testing.T) {
	b := append(make([]*int, 0, 64), new(int), new(int))
	k := resize(b, 64)
	if len(k) != 0 || cap(k) != 64 || &k[:1][0] != &b[0] || b[0] != nil || b[1] != nil {
		t.Errorf("resize to its capacity: len %d cap %d, same array %v, old entries %v %v; want it emptied and cleared", len(k), cap(k), &k[:1][0] == &b[0], b[0], b[1])
	}
	if s := resize(b, 8); len(s) != 0 || cap(s) != 8 {
		t.Errorf("resize to 8: len %d cap %d", len(s), cap(s))
	}
	if s := resize(b, 0); s != nil {
		t.Errorf("resize to 0: %v, want nil", s)
	}
}

// TestTrimSpares checks that the spare lists of outstanding queries that
// a burst left (the first resolves) are sized, two periods of passes
// later, to what the passes hand out.
func TestTrimSpares(t *testing.T) {
	c := newControlEndpoint()
	for range maxSpareQueries {
		c.spare = append(c.spare, &queryList{q: make([]pendingQuery, 0, 1)})
	}
	c.handed = maxSpareQueries
	c.trimSpares()
	for range 2*shrinkAfter - 2 {
		c.handed = 2
		c.trimSpares()
		if len(c.spare) != maxSpareQueries {
			t.Fatalf("within two periods of the burst: %d spares, want %d kept", len(c.spare), maxSpareQueries)
		}
	}
	c.handed = 2
	c.trimSpares()
	if len(c.spare) != 2 || cap(c.spare) > 2*2+16 {
		t.Errorf("after two periods of passes handing out 2 lists: %d spares (capacity %d), want 2", len(c.spare), cap(c.spare))
	}
}

// TestSpreadRefresh checks that the paths' first answers, all within a
// moment, set their next refreshes apart over the whole period (the
// resolve interval; the first path of a version-2 peer, the clock's):
// without it they come together every period ever after. A clamp at the
// process's start (monoNs counted from it) left them together: the test
// runs within seconds of it.
func TestSpreadRefresh(t *testing.T) {
	m := resolvedManager(t, 400)
	m.cfg.Resolve = time.Minute
	now := time.Now()
	for _, resolve := range []bool{true, false} { // other paths; a version-2 peer's first path
		var first, last time.Duration = math.MaxInt64, 0
		buckets := make([]int, 10)
		period := m.cfg.Resolve
		for _, p := range m.peers.byName {
			idx := 1
			p.ver = wire.Version1
			if !resolve {
				idx, p.ver = 0, wire.Version2
				period = m.clockEvery()
			}
			pa := p.paths[idx]
			pa.asked = monoNs(now)
			m.spreadRefresh(p, pa, idx)
			next := period - pa.askedAgo(now) // when it is asked again, from now
			if next <= 0 || next > period {
				t.Fatalf("path %d of %s: next query in %v; want within the period %v", idx, p.spec.Name, next, period)
			}
			first, last = min(first, next), max(last, next)
			buckets[int(next*10/(period+1))]++
		}
		for i, n := range buckets {
			if n < 400/10/3 {
				t.Errorf("period %v: %d of 400 refreshes in its tenth %d (%v first, %v last); want them spread: %v", period, n, i, first, last, buckets)
			}
		}
	}
}

// TestUnplannedQueriesSpread checks which answers spread their path's
// next refresh: those to a query out of the path's schedule (asked again
// at once after this node's fingerprint changed, as refreshFingerprint
// does for every path; a down path's) do, and so a fingerprint change,
// which asks every peer within an interval, leaves the refreshes apart;
// a refresh on schedule does not, and keeps its period.
func TestUnplannedQueriesSpread(t *testing.T) {
	m := controlManager(t, 200)
	m.cfg.Resolve = time.Minute
	peers := m.peers.inOrder()
	for k, p := range peers {
		p.addr = netip.AddrFrom4([4]byte{127, 0, byte(k >> 8), byte(k + 1)})
	}
	now := time.Now()
	ask := func(p *mpeer, idx int) {
		m.query(p, idx, now)
		q := p.queries()[len(p.queries())-1]
		b := answerMessage(t, m, p, q.nonce, idx, now)
		msg, err := wire.Decode(b, nil)
		if err != nil {
			t.Fatal(err)
		}
		m.in.addAnswer(answer{from: q.to, m: msg, at: now})
		m.takeInbox(now)
	}
	for _, c := range []struct {
		name   string
		set    func(pa *path)
		spread bool
	}{
		{"on schedule", func(pa *path) { pa.asked = monoNs(now.Add(-m.cfg.Resolve)) }, false},
		{"after a fingerprint change", func(pa *path) { pa.asked = 0 }, true},
		{"a down path", func(pa *path) { pa.asked, pa.h.state = monoNs(now.Add(-time.Second)), apitype.PeerDown }, true},
	} {
		buckets := make([]int, 10)
		for _, p := range peers {
			pa := p.paths[1] // not the clock's: its period is the resolve interval
			c.set(pa)
			ask(p, 1)
			pa.h.state = apitype.PeerUp
			next := m.cfg.Resolve - pa.askedAgo(now)
			if next <= 0 || next > m.cfg.Resolve {
				t.Fatalf("%s: %s's next refresh in %v; want within %v", c.name, p.spec.Name, next, m.cfg.Resolve)
			}
			buckets[int(next*10/(m.cfg.Resolve+1))]++
		}
		if c.spread {
			for i, n := range buckets {
				if n < 200/10/3 {
					t.Errorf("%s: %d of 200 refreshes in the period's tenth %d; want them spread: %v", c.name, n, i, buckets)
				}
			}
		} else if buckets[9] != 200 {
			t.Errorf("%s: the next refreshes %v (tenths of the period); want every one a period on", c.name, buckets)
		}
	}
}
