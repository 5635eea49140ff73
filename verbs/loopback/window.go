package loopback

import (
	"slices"
	"time"
)

// A window keeps the last n latency samples of one operation and answers
// percentiles over them. At the default 1 Hz and 300 samples it covers five
// minutes. Beside the samples in arrival order (to know which one leaves)
// it keeps them sorted, updated per sample: a binary search and a move of
// at most n durations to drop the oldest and place the newest, instead of
// sorting all n for every round's quantiles (which, at a 10 ms
// loopback_interval under TCG, was 7% of rdmad's CPU). Nothing allocates
// after newWindow.
type window struct {
	buf    []time.Duration // ring, arrival order
	sorted []time.Duration // the same samples, ascending; len is the count
	next   int
}

func newWindow(n int) *window {
	return &window{buf: make([]time.Duration, n), sorted: make([]time.Duration, 0, n)}
}

func (w *window) add(d time.Duration) {
	if len(w.sorted) == len(w.buf) {
		old := w.buf[w.next]
		i, _ := slices.BinarySearch(w.sorted, old)
		w.sorted = slices.Delete(w.sorted, i, i+1)
	}
	w.buf[w.next] = d
	w.next = (w.next + 1) % len(w.buf)
	i, _ := slices.BinarySearch(w.sorted, d)
	w.sorted = slices.Insert(w.sorted, i, d)
}

// quantiles returns the p50, p99 and maximum of the samples (zero when
// empty), using the nearest-rank method: the smallest sample with at least
// q of the samples at or below it.
func (w *window) quantiles() (p50, p99, maxv time.Duration) {
	n := len(w.sorted)
	if n == 0 {
		return 0, 0, 0
	}
	s := w.sorted
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
