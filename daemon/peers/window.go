package peers

import (
	"slices"
	"time"
)

// A sample is one probe's outcome.
type sample struct {
	lost bool
	rtt  time.Duration // network share: round trip minus responder delay
	host time.Duration // responder's host delay
}

// A window holds the last n samples of a path; statistics cover it.
type window struct {
	s    []sample
	next int
	full bool
}

func newWindow(n int) *window { return &window{s: make([]sample, n)} }

func (w *window) add(s sample) {
	w.s[w.next] = s
	w.next++
	if w.next == len(w.s) {
		w.next, w.full = 0, true
	}
}

func (w *window) reset() { w.next, w.full = 0, false }

// winStats summarise a window.
type winStats struct {
	Samples, Lost int
	LossPct       float64
	P50, P99      time.Duration
	HostP99       time.Duration
}

func (w *window) stats() winStats {
	n := w.next
	if w.full {
		n = len(w.s)
	}
	var st winStats
	st.Samples = n
	rtts := make([]time.Duration, 0, n)
	hosts := make([]time.Duration, 0, n)
	for _, s := range w.s[:n] {
		if s.lost {
			st.Lost++
			continue
		}
		rtts = append(rtts, s.rtt)
		hosts = append(hosts, s.host)
	}
	if n > 0 {
		st.LossPct = 100 * float64(st.Lost) / float64(n)
	}
	st.P50 = percentile(rtts, 50)
	st.P99 = percentile(rtts, 99)
	st.HostP99 = percentile(hosts, 99)
	return st
}

// percentile returns the nearest-rank p-th percentile of v (sorting v).
func percentile(v []time.Duration, p int) time.Duration {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	i := (p*len(v) + 99) / 100
	return v[max(i, 1)-1]
}
