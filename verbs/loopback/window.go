package loopback

import (
	"slices"
	"time"
)

// A window keeps the last n latency samples of one operation and answers
// percentiles over them. At the default 1 Hz and 300 samples it covers five
// minutes; sorting 300 durations per result costs microseconds, far less
// than keeping a streaming sketch correct.
type window struct {
	buf  []time.Duration
	next int
	full bool
}

func newWindow(n int) *window { return &window{buf: make([]time.Duration, n)} }

func (w *window) add(d time.Duration) {
	w.buf[w.next] = d
	w.next++
	if w.next == len(w.buf) {
		w.next, w.full = 0, true
	}
}

func (w *window) len() int {
	if w.full {
		return len(w.buf)
	}
	return w.next
}

// quantiles returns the p50, p99 and maximum of the samples (zero when
// empty), using the nearest-rank method: the smallest sample with at least
// q of the samples at or below it.
func (w *window) quantiles(scratch []time.Duration) (p50, p99, maxv time.Duration) {
	n := w.len()
	if n == 0 {
		return 0, 0, 0
	}
	s := append(scratch[:0], w.buf[:n]...)
	slices.Sort(s)
	return s[rank(n, 0.50)], s[rank(n, 0.99)], s[n-1]
}

// rank is the 0-based nearest-rank index of quantile q among n samples.
func rank(n int, q float64) int {
	// ceil(q*n) as a 1-based rank, computed in integers to avoid float
	// rounding turning 0.99*100 into 99.00000000000001.
	r := (int(q*1000)*n + 999) / 1000
	if r < 1 {
		r = 1
	}
	return r - 1
}
