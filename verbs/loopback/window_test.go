package loopback

import (
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
			p50, p99, mx := w.quantiles(nil)
			if p50 != tt.p50 || p99 != tt.p99 || mx != tt.max {
				t.Errorf("quantiles = %v %v %v, want %v %v %v", p50, p99, mx, tt.p50, tt.p99, tt.max)
			}
		})
	}
}

func TestWindowNoAllocsWithScratch(t *testing.T) {
	w := newWindow(300)
	for i := range 1000 {
		w.add(time.Duration(i))
	}
	scratch := make([]time.Duration, 0, 300)
	if a := testing.AllocsPerRun(100, func() { w.quantiles(scratch) }); a != 0 {
		t.Errorf("quantiles allocates %v times with scratch", a)
	}
}
