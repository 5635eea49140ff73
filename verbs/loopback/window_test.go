package loopback

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestWindowQuantiles(t *testing.T) {
	us := time.Microsecond
	seq := func(n int) []time.Duration {
		var s []time.Duration
		for i := 1; i <= n; i++ {
			s = append(s, time.Duration(i)*us)
		}
		return s
	}
	tests := []struct {
		name          string
		size          int
		samples       []time.Duration
		p50, p99, max time.Duration
	}{
		{"empty", 10, nil, 0, 0, 0},
		{"one", 10, []time.Duration{7 * us}, 7 * us, 7 * us, 7 * us},
		{"1..100", 100, seq(100), 50 * us, 99 * us, 100 * us},
		{"1..10", 10, seq(10), 5 * us, 10 * us, 10 * us},
		// A window of 100 after 150 samples holds 51..150.
		{"wrapped", 100, seq(150), 100 * us, 149 * us, 150 * us},
		{"outlier", 100, append(seq(99), time.Second), 50 * us, 99 * us, time.Second},
		{"unsorted", 5, []time.Duration{5 * us, 1 * us, 4 * us, 2 * us, 3 * us}, 3 * us, 5 * us, 5 * us},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWindow(tt.size)
			for _, s := range tt.samples {
				w.add(s)
			}
			p50, p99, mx := w.quantiles()
			if p50 != tt.p50 || p99 != tt.p99 || mx != tt.max {
				t.Errorf("quantiles = %v %v %v, want %v %v %v", p50, p99, mx, tt.p50, tt.p99, tt.max)
			}
		})
	}
}

// TestWindowAgainstSort feeds random samples, with repeats, through
// windows of several sizes and checks every quantile against a sort of the
// last n samples; adding and reading allocate nothing.
func TestWindowAgainstSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, size := range []int{1, 2, 7, 100, 300} {
		w := newWindow(size)
		var all []time.Duration
		for i := range 3 * size {
			d := time.Duration(rng.IntN(50)) // many equal samples
			w.add(d)
			all = append(all, d)
			last := slices.Clone(all[max(0, len(all)-size):])
			slices.Sort(last)
			n := len(last)
			p50, p99, mx := w.quantiles()
			if len(w.sorted) != n || p50 != last[rank(n, 0.5)] || p99 != last[rank(n, 0.99)] || mx != last[n-1] {
				t.Fatalf("size %d after %d samples: len %d quantiles %v %v %v, want len %d %v %v %v",
					size, i+1, len(w.sorted), p50, p99, mx, n, last[rank(n, 0.5)], last[rank(n, 0.99)], last[n-1])
			}
		}
	}
	w := newWindow(300)
	for i := range 1000 {
		w.add(time.Duration(i % 37))
	}
	if a := testing.AllocsPerRun(100, func() { w.add(time.Duration(rng.IntN(1000))); w.quantiles() }); a != 0 {
		t.Errorf("add and quantiles allocate %v times", a)
	}
}

// BenchmarkWindowAddQuantiles is one operation's share of a round: add a
// sample to a full window of 300 and read its quantiles.
func BenchmarkWindowAddQuantiles(b *testing.B) {
	w := newWindow(300)
	rng := rand.New(rand.NewPCG(1, 2))
	for range 300 {
		w.add(time.Duration(rng.IntN(1_000_000)))
	}
	for b.Loop() {
		w.add(time.Duration(rng.IntN(1_000_000)))
		w.quantiles()
	}
}
