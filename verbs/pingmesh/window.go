package pingmesh

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

// A window holds the last n samples of a path; statistics cover it. It
// counts its losses as samples come and go, so the state machine, which
// looks at the loss rate after every probe, needs no pass over it; the
// percentiles are computed only when asked for, in scratch space the
// window keeps.
type window struct {
	s    []sample
	next int
	full bool
	lost int
	buf  []time.Duration // scratch of stats
}

func newWindow(n int) *window { return &window{s: make([]sample, n)} }

func (w *window) add(s sample) {
	if w.full && w.s[w.next].lost {
		w.lost--
	}
	if s.lost {
		w.lost++
	}
	w.s[w.next] = s
	w.next++
	if w.next == len(w.s) {
		w.next, w.full = 0, true
	}
}

func (w *window) reset() { w.next, w.full, w.lost = 0, false, 0 }

// winStats summarise a window.
type winStats struct {
	Samples, Lost int
	LossPct       float64
	P50, P99      time.Duration
	HostP99       time.Duration
}

// loss returns the window's counts and loss rate, without percentiles.
func (w *window) loss() winStats {
	n := w.next
	if w.full {
		n = len(w.s)
	}
	st := winStats{Samples: n, Lost: w.lost}
	if n > 0 {
		st.LossPct = 100 * float64(w.lost) / float64(n)
	}
	return st
}

// stats returns the counts, the loss rate and the percentiles.
func (w *window) stats() winStats {
	st := w.loss()
	if cap(w.buf) < st.Samples {
		w.buf = make([]time.Duration, 0, len(w.s))
	}
	v := w.buf[:0]
	for _, s := range w.s[:st.Samples] {
		if !s.lost {
			v = append(v, s.rtt)
		}
	}
	slices.Sort(v)
	st.P50, st.P99 = percentile(v, 50), percentile(v, 99)
	v = v[:0]
	for _, s := range w.s[:st.Samples] {
		if !s.lost {
			v = append(v, s.host)
		}
	}
	slices.Sort(v)
	st.HostP99 = percentile(v, 99)
	return st
}

// percentile returns the nearest-rank p-th percentile of v, which must be
// sorted.
func percentile(v []time.Duration, p int) time.Duration {
	if len(v) == 0 {
		return 0
	}
	i := (p*len(v) + 99) / 100
	return v[max(i, 1)-1]
}
