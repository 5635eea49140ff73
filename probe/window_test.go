package probe

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rdmad/rdmad/client/apitype"
)

// q is d as a window keeps it (12-bit floating point, toF12).
func q(d time.Duration) time.Duration { return fromF12(toF12(d)) }

func TestWindowStats(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name    string
		size    int
		samples []sample
		want    winStats
	}{
		{"empty", 4, nil, winStats{}},
		{"all answered", 4, []sample{{rtt: 1 * ms}, {rtt: 2 * ms}, {rtt: 3 * ms}, {rtt: 4 * ms, host: ms}},
			winStats{Samples: 4, P50: q(2 * ms), P99: q(4 * ms), HostP99: q(ms)}},
		{"one lost of four", 4, []sample{{rtt: ms}, {lost: true}, {rtt: 3 * ms}, {rtt: 2 * ms}},
			winStats{Samples: 4, Lost: 1, LossPct: 25, P50: q(2 * ms), P99: q(3 * ms)}},
		{"wraps: old samples leave", 2, []sample{{lost: true}, {lost: true}, {rtt: 5 * ms}, {rtt: 7 * ms}},
			winStats{Samples: 2, P50: q(5 * ms), P99: q(7 * ms)}},
		{"microseconds", 3, []sample{{rtt: 1500, host: 40}, {rtt: 2047, host: 900}, {rtt: 700, host: 2}},
			winStats{Samples: 3, P50: q(1500), P99: q(2047), HostP99: q(900)}},
		{"under 128 ns exact", 3, []sample{{rtt: 100, host: 40}, {rtt: 127, host: 90}, {rtt: 7, host: 2}},
			winStats{Samples: 3, P50: 100, P99: 127, HostP99: 90}},
		{"host delay beside the round trip", 2, []sample{{rtt: 4095, host: 1}, {rtt: 1, host: 4095}},
			winStats{Samples: 2, P50: 1, P99: q(4095), HostP99: q(4095)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWindow(tt.size)
			for _, s := range tt.samples {
				w.add(s)
			}
			if diff := cmp.Diff(tt.want, w.stats(nil)); diff != "" {
				t.Errorf("stats (-want +got):\n%s", diff)
			}
		})
	}
}

// TestHealth drives the state machine through sequences of outcomes
// ('.' answered fast, 's' answered slow, 'x' lost) and checks the state
// after each step.
func TestHealth(t *testing.T) {
	th := Thresholds{DownAfter: 3, UpAfter: 3, LossPct: 10, MinLosses: 2, RTT: 10 * time.Millisecond}
	tests := []struct {
		name   string
		window int
		steps  string
		want   string // state after each step: u(nknown) U(p) D(egraded) X (down)
	}{
		{"first answer: up", 20, ".", "U"},
		{"unknown until down", 20, "xxx", "uuX"},
		{"one loss is noise", 20, "..x..", "UUUUU"},
		{"two losses in the window: degraded", 10, "..x.x", "UUUUD"},
		{"three in a row: down", 20, "...xxx", "UUUUDX"},
		{"down needs three answers to come back", 20, "xxx..x...", "uuXXXXXXU"},
		{"back from down starts a clean window", 20, "xxx...", "uuXXXU"},
		{"degraded holds while two losses are in the window", 10, "x.x.......x.....", "uUDDDDDDDDDDUUUU"},
		{"degraded clears when losses age out", 4, "x.x.....", "uUDDUUUU"},
		{"slow p99: degraded", 12, "..........ss", "UUUUUUUUUUDD"},
	}
	codes := map[string]byte{apitype.PeerUnknown: 'u', apitype.PeerUp: 'U', apitype.PeerDegraded: 'D', apitype.PeerDown: 'X'}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWindow(tt.window)
			h := newHealth(time.Unix(0, 0))
			var got []byte
			for i, c := range tt.steps {
				s := sample{rtt: time.Millisecond}
				switch c {
				case 'x':
					s = sample{lost: true}
				case 's':
					s = sample{rtt: 50 * time.Millisecond}
				}
				h.observe(s, w, nil, th, time.Unix(int64(i), 0), nil)
				got = append(got, codes[h.state])
			}
			if diff := cmp.Diff(tt.want, string(got)); diff != "" {
				t.Errorf("states (-want +got):\n%s", diff)
			}
		})
	}
}

// TestWindowLossCount checks the running loss count against a recount over
// long random sequences with wraps and resets.
func TestWindowLossCount(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, size := range []int{1, 7, 100} {
		w := newWindow(size)
		for i := range 5000 {
			if r.IntN(500) == 0 {
				w.reset()
			}
			w.add(sample{lost: r.IntN(3) == 0, rtt: time.Duration(r.IntN(1000))})
			n := int(w.next)
			if w.full {
				n = w.size()
			}
			want := 0
			for j := range n {
				if w.rtt(j) == lostCode {
					want++
				}
			}
			if got := w.loss(); got.Lost != want || got.Samples != n {
				t.Fatalf("size %d, step %d: loss() = %+v, recount %d lost of %d", size, i, got, want, n)
			}
		}
	}
}

// TestWindowPercentiles checks the selected percentiles against a sort of
// the same samples (as the window keeps them), over random windows of
// every fill, with ties and sequences that are sorted already, and windows
// large enough (2,000) that the 99th percentile is selected, not kept.
func TestWindowPercentiles(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	sorted := func(v []time.Duration, p int) time.Duration {
		if len(v) == 0 {
			return 0
		}
		v = slices.Clone(v)
		slices.Sort(v)
		return v[max((p*len(v)+99)/100, 1)-1]
	}
	for _, size := range []int{1, 2, 13, 14, 100, 1000, 2000} {
		for trial := range 200 {
			w := newWindow(size)
			n := r.IntN(2*size) + 1
			var all []sample
			for i := range n {
				s := sample{lost: r.IntN(10) == 0, rtt: time.Duration(r.IntN(5e6)), host: time.Duration(r.IntN(3000))}
				switch trial % 4 {
				case 1:
					s.rtt, s.host = time.Duration(r.IntN(3)), time.Duration(r.IntN(2)) // many ties
				case 2:
					s.rtt, s.host = time.Duration(i), time.Duration(n-i) // sorted, reversed
				}
				w.add(s)
				all = append(all, s)
			}
			var rtts, hosts []time.Duration
			for _, s := range all[max(len(all)-size, 0):] {
				if !s.lost {
					rtts, hosts = append(rtts, q(s.rtt)), append(hosts, q(s.host))
				}
			}
			got := w.stats(nil)
			if got.P50 != sorted(rtts, 50) || got.P99 != sorted(rtts, 99) || got.HostP99 != sorted(hosts, 99) {
				t.Fatalf("size %d, %d samples (trial %d): p50 %v p99 %v host p99 %v; sorting gives %v %v %v",
					size, n, trial, got.P50, got.P99, got.HostP99, sorted(rtts, 50), sorted(rtts, 99), sorted(hosts, 99))
			}
		}
	}
}

// TestWindowPublished checks the statistics the state shows: counts always
// current, percentiles computed again once a tenth of the window is new
// (every sample while there are fewer than 20), and at once after a reset.
func TestWindowPublished(t *testing.T) {
	w := newWindow(100)
	for i := range 15 {
		w.add(sample{rtt: time.Duration(1000 + i)})
		if got := w.published(nil); got.P99 != q(time.Duration(1000+i)) || got.Samples != i+1 {
			t.Fatalf("after %d samples: %+v; want every sample to count while there are few", i+1, got)
		}
	}
	for range 85 {
		w.add(sample{rtt: 1500})
	}
	before := w.published(nil) // a full window: computed now
	if before.P50 != q(1500) || before.Samples != 100 {
		t.Fatalf("full window: %+v", before)
	}
	for i := range 9 {
		w.add(sample{rtt: 2000})
		if i == 3 {
			w.add(sample{lost: true})
		}
	}
	got := w.published(nil) // 10 new samples: due again
	if got.Lost != 1 || got.Samples != 100 || got.P99 != q(2000) {
		t.Errorf("after 10 new samples: %+v; want the loss and the new p99 2000", got)
	}
	w.add(sample{lost: true})
	w.add(sample{rtt: 9000})
	if st, pub := w.stats(nil), w.published(nil); pub.Lost != 2 || pub.P99 != q(2000) || st.P99 != q(9000) {
		t.Errorf("2 new samples: published %+v, stats %+v; want the counts current, the published p99 kept, stats current", pub, st)
	}
	w.reset()
	w.add(sample{rtt: 700, host: 3})
	if got := w.published(nil); got.Samples != 1 || got.P50 != q(700) || got.HostP99 != 3 {
		t.Errorf("after a reset: %+v; want the one new sample", got)
	}
}

// TestF12 checks the 12-bit times the windows keep: exact below 128 ns,
// within 1/256 above, in order, never the lost mark, and the largest
// (272 s) for anything longer; and that a window keeps a sample's two
// codes apart (set, rtt, host) at every position.
func TestF12(t *testing.T) {
	for d := time.Duration(0); d < 1<<f12Mant; d++ {
		if got := q(d); got != d {
			t.Fatalf("q(%d) = %d; want it exact", d, got)
		}
	}
	r := rand.New(rand.NewPCG(7, 8))
	prev, prevCode := time.Duration(0), uint16(0)
	for d := time.Duration(1 << f12Mant); d < 300*time.Second; d += time.Duration(1 + r.Int64N(int64(d/500)+1)) {
		c := toF12(d)
		if c >= lostCode || c < prevCode {
			t.Fatalf("toF12(%d) = %#x after toF12(%d) = %#x; want ascending codes below %#x", d, c, prev, prevCode, lostCode)
		}
		if diff := (q(d) - d).Abs(); diff*256 > d && c != maxCode {
			t.Fatalf("q(%d) = %d: off by %d, more than 1/256", d, q(d), diff)
		}
		prev, prevCode = d, c
	}
	if c := toF12(100 * time.Hour); c != maxCode || fromF12(c) < 272*time.Second {
		t.Errorf("toF12(100h) = %#x (%v); want the largest time, %#x", c, fromF12(c), maxCode)
	}
	w := newWindow(3)
	w.add(sample{rtt: 100 * time.Hour, host: time.Hour})
	w.add(sample{rtt: -time.Second})
	w.add(sample{lost: true})
	if st := w.stats(nil); st.Lost != 1 || st.Samples != 3 || st.P99 != fromF12(maxCode) || st.P50 != 0 || st.HostP99 != fromF12(maxCode) {
		t.Errorf("stats = %+v; want 1 lost of 3, p99 and host p99 the largest time, p50 0", st)
	}
	w = newWindow(7)
	for i := range 7 {
		w.set(i, 0x5a5, 0x3c3)
	}
	for i := range 7 {
		for _, c := range [][2]uint16{{0, 0}, {0xfff, 0}, {0, 0xfff}, {0xabc, 0x123}, {0x123, 0xabc}} {
			w.set(i, c[0], c[1])
			if w.rtt(i) != c[0] || w.host(i) != c[1] {
				t.Fatalf("sample %d set to %#x, %#x: reads %#x, %#x", i, c[0], c[1], w.rtt(i), w.host(i))
			}
			for j := range 7 {
				if j != i && (w.rtt(j) != 0x5a5 || w.host(j) != 0x3c3) {
					t.Fatalf("set of sample %d wrote sample %d: %#x, %#x", i, j, w.rtt(j), w.host(j))
				}
			}
		}
		w.set(i, 0x5a5, 0x3c3)
	}
}

// BenchmarkWindowStats is one path's statistics at publish time (a full
// window of 100). test/bench/peers also runs it on the host and in the
// guest to measure how much slower the emulated CPU runs this code.
func BenchmarkWindowStats(b *testing.B) {
	w := newWindow(100)
	for i := range 100 {
		w.add(sample{lost: i%17 == 0, rtt: time.Duration((i * 7919) % 1000), host: time.Duration(i)})
	}
	var buf []uint16
	b.ReportAllocs()
	for b.Loop() {
		w.stats(&buf)
	}
}

// TestWindowsShareOneArray: the windows of a path's flows are made in one
// array (newSamples, windowAt) and must not write into each other's samples.
func TestWindowsShareOneArray(t *testing.T) {
	buf := newSamples(5, 3)
	a, b, c := windowAt(buf, 5, 0), windowAt(buf, 5, 1), windowAt(buf, 5, 2)
	for i := range 7 {
		a.add(sample{lost: true})
		b.add(sample{rtt: time.Duration(1000 + i)})
		c.add(sample{rtt: 2 * time.Microsecond, host: time.Microsecond})
	}
	if a.size() != 5 || b.size() != 5 || c.size() != 5 {
		t.Fatalf("sizes %d %d %d, want 5 each", a.size(), b.size(), c.size())
	}
	if st := a.stats(nil); st.Samples != 5 || st.Lost != 5 {
		t.Errorf("a: %+v, want 5 samples all lost", st)
	}
	if st := b.stats(nil); st.Samples != 5 || st.Lost != 0 || st.P50 < 1000 || st.P50 > 1010 || st.HostP99 != 0 {
		t.Errorf("b: %+v, want 5 answered of about 1 µs, no host delay", st)
	}
	if st := c.stats(nil); st.Lost != 0 || st.P50 != 2*time.Microsecond || st.HostP99 != time.Microsecond {
		t.Errorf("c: %+v, want 2 µs round trips with 1 µs host delays", st)
	}
	none := windowAt(newSamples(0, 1), 0, 0)
	if none.size() != 0 || none.count() != 0 {
		t.Errorf("a window of 0: size %d, count %d", none.size(), none.count())
	}
}

// TestReloadRewritesDegradedReason: a degraded path's reason gives the
// loss threshold; the figures it was written for (badKey) leave the
// thresholds out, so a reload that changes them must make the next sample
// write it again (Manager.forgetReasons), not keep the old threshold's text.
func TestReloadRewritesDegradedReason(t *testing.T) {
	t1 := Thresholds{DownAfter: 3, UpAfter: 3, LossPct: 5, MinLosses: 2}
	pa := &path{local: "mem0/1", win: *newWindow(20), h: newHealth(time.Now())}
	m := &Manager{texts: newTexts()}
	m.peers.byName = map[string]*mpeer{"a": {paths: []*path{pa}}}
	var buf []uint16
	for i := range 20 {
		pa.h.observe(sample{lost: i%5 == 0, rtt: 10 * time.Microsecond}, &pa.win, &buf, t1, time.Now(), m.texts)
	}
	if pa.h.state != apitype.PeerDegraded || !strings.Contains(pa.h.reason, "threshold 5.0%") {
		t.Fatalf("state %s, reason %q: want degraded at the 5%% threshold", pa.h.state, pa.h.reason)
	}
	t2 := t1
	t2.LossPct = 10
	m.forgetReasons()
	// The same window figures, judged under the new threshold (20 % is
	// still over it).
	pa.h.observe(sample{rtt: 10 * time.Microsecond}, &pa.win, &buf, t2, time.Now(), m.texts)
	pa.h.observe(sample{lost: true}, &pa.win, &buf, t2, time.Now(), m.texts)
	if !strings.Contains(pa.h.reason, "threshold 10.0%") {
		t.Errorf("reason after the reload %q: want the new 10%% threshold", pa.h.reason)
	}
}
