package probe

import (
	"math"
	"math/bits"
	"time"
	"unsafe"
)

// A sample is one probe's outcome.
type sample struct {
	lost bool
	rtt  time.Duration // round trip as this node measured it
	host time.Duration // the responder's claimed host delay
}

// A window keeps a sample in 3 bytes instead of 24, since a window of 100
// is held for every path of every peer: its round trip and its host delay
// each as a 12-bit floating point number of nanoseconds (toF12), packed
// side by side (window.set). lostCode as the round trip marks a lost probe.
// The codes are exact below 128 ns and within 1/256 (0.4%) above, up to
// 4.5 minutes: at 2 µs, an RDMA NIC's round trip, they step by 8-16 ns,
// finer than perftest's figures.
const (
	f12Mant  = 7     // the mantissa's width: 7 bits, and a 5-bit exponent
	lostCode = 0xfff // a lost probe's round trip
	maxCode  = 0xffe // the largest time, 272 s
	slotSize = 3     // bytes a sample takes in a window
)

// toF12 encodes d (nanoseconds, negative as 0) as a 12-bit float: below
// 2^7 the value itself; above, exponent e >= 1 and mantissa m stand for
// (2^7 + m) << (e-1), rounded to the nearest. Longer times than maxCode
// stands for are kept as that. Codes order as the times they stand for.
func toF12(d time.Duration) uint16 {
	v := uint64(max(d, 0))
	if v < 1<<f12Mant {
		return uint16(v)
	}
	e := uint(bits.Len64(v) - f12Mant) // v >> (e-1) has f12Mant+1 bits
	m := (v + 1<<(e-1)>>1) >> (e - 1)  // rounded
	if m >= 1<<(f12Mant+1) {           // rounding carried into a new bit
		m >>= 1
		e++
	}
	code := uint64(e)<<f12Mant | (m - 1<<f12Mant)
	return uint16(min(code, maxCode))
}

// fromF12 decodes toF12's code.
func fromF12(c uint16) time.Duration {
	e, m := uint64(c)>>f12Mant, uint64(c)&(1<<f12Mant-1)
	if e == 0 {
		return time.Duration(m)
	}
	return time.Duration((1<<f12Mant + m) << (e - 1))
}

// A window holds the last n samples of a path; statistics cover it. It
// counts its losses as samples come and go, so the state machine, which
// looks at the loss rate after every probe, needs no pass over it; the
// percentiles are computed only when asked for, in scratch space that the
// caller gives (the manager's windows share one: they are used by its
// goroutine only). n is at most [probe] window's 10,000: next and lost
// fit 16 bits, and the window's header 24 bytes in its path's 352.
type window struct {
	// s is the first of n samples of slotSize bytes each (set, rtt,
	// host); nil for a window of none. A pointer and a count rather than
	// a slice: 24 bytes a window instead of 40, and a path on four flows
	// holds five (TestPeerSizeClass). The flows of a path share one
	// array (newSamples).
	s    *byte
	n    int16
	next int16
	lost int16
	full bool
	pcts
}

// pcts are the percentiles published last computed, as codes, and how
// many samples were added since (fresh).
type pcts struct {
	fresh          uint16
	p50, p99, hp99 uint16
}

// added counts n samples more since the percentiles were computed.
func (c *pcts) added(n int) { c.fresh = uint16(min(int(c.fresh)+n, math.MaxUint16)) }

// publish returns st (current counts) with the percentiles as computed
// when at least a tenth of the samples (one while there are fewer than
// 20) was new, else computed again by stats and kept; see
// window.published.
func (c *pcts) publish(st winStats, stats func() winStats) winStats {
	if int(c.fresh) < max(1, st.Samples/10) {
		st.P50, st.P99, st.HostP99 = fromF12(c.p50), fromF12(c.p99), fromF12(c.hp99)
		return st
	}
	st = stats()
	c.p50, c.p99, c.hp99, c.fresh = toF12(st.P50), toF12(st.P99), toF12(st.HostP99), 0
	return st
}

// newWindow returns a window of n samples (at most math.MaxInt16).
func newWindow(n int) *window {
	w := windowAt(newSamples(n, 1), n, 0)
	return &w
}

// newSamples returns the samples of k windows of n samples each (n at
// most math.MaxInt16), in one array: a path's flows allocate once rather
// than per flow (windowAt).
func newSamples(n, k int) []byte {
	return make([]byte, slotSize*min(max(n, 0), math.MaxInt16)*k)
}

// windowAt returns the i-th window of n samples in buf (newSamples).
func windowAt(buf []byte, n, i int) window {
	n = min(max(n, 0), math.MaxInt16)
	if n == 0 {
		return window{}
	}
	return window{s: &buf[slotSize*n*i], n: int16(n)}
}

// size is how many samples the window holds when full.
func (w *window) size() int { return int(w.n) }

// slot returns the bytes of sample i.
func (w *window) slot(i int) []byte {
	if uint(i) >= uint(w.n) {
		panic("probe: window sample out of range")
	}
	return unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(w.s), slotSize*i)), slotSize)
}

// set stores sample i as its codes: the round trip's 12 bits in the first
// byte and the low half of the second, the host delay's in the high half
// of the second and the third.
func (w *window) set(i int, rtt, host uint16) {
	b := w.slot(i)
	b[0], b[1], b[2] = byte(rtt), byte(rtt>>8)|byte(host<<4), byte(host>>4)
}

// rtt returns sample i's round trip code (lostCode: lost).
func (w *window) rtt(i int) uint16 {
	b := w.slot(i)
	return uint16(b[0]) | uint16(b[1]&0xf)<<8
}

// host returns sample i's host delay code.
func (w *window) host(i int) uint16 {
	b := w.slot(i)
	return uint16(b[1]>>4) | uint16(b[2])<<4
}

func (w *window) add(s sample) {
	if w.full && w.rtt(int(w.next)) == lostCode {
		w.lost--
	}
	if s.lost {
		w.lost++
		w.set(int(w.next), lostCode, 0)
	} else {
		w.set(int(w.next), toF12(s.rtt), toF12(s.host))
	}
	w.next++
	if int(w.next) == w.size() {
		w.next, w.full = 0, true
	}
	w.added(1)
}

// restart leaves s the only sample: after an outage.
func (w *window) restart(s sample) {
	w.reset()
	w.add(s)
}

// count returns how many samples the window holds.
func (w *window) count() int {
	if w.full {
		return w.size()
	}
	return int(w.next)
}

func (w *window) reset() { w.next, w.full, w.lost, w.fresh = 0, false, 0, math.MaxUint16 }

// winStats summarise a window.
type winStats struct {
	Samples, Lost int
	LossPct       float64
	P50, P99      time.Duration
	HostP99       time.Duration
}

// loss returns the window's counts and loss rate, without percentiles.
func (w *window) loss() winStats {
	n := w.count()
	st := winStats{Samples: n, Lost: int(w.lost)}
	if n > 0 {
		st.LossPct = 100 * float64(w.lost) / float64(n)
	}
	return st
}

// stats returns the counts, the loss rate and the percentiles. The
// percentiles are selected, not sorted (a publish computes them for every
// path, ten thousand at a time): the 99th percentiles from the few largest
// values, kept in the one pass over the samples, the median by
// quickselect. They work on the codes, which order as the times do.
// buf is the scratch they are computed in (nil: one of its own, made).
func (w *window) stats(buf *[]uint16) winStats {
	return slotStats(w.loss(), buf, w.size(), 1, func(int) *window { return w })
}

// slotStats completes st (the counts of the samples of parts, which may
// be the windows of several flows: percentiles of their union) with the
// percentiles, in buf (nil: a new one), grown to room for at least size
// values. part(i) is the i-th of n parts.
func slotStats(st winStats, buf *[]uint16, size, n int, part func(i int) *window) winStats {
	answered := st.Samples - st.Lost
	if answered == 0 {
		return st
	}
	if buf == nil {
		buf = new([]uint16)
	}
	if cap(*buf) < answered {
		*buf = make([]uint16, 0, max(size, answered))
	}
	v := (*buf)[:0]
	i50, i99 := rank(50, answered), rank(99, answered)
	// The 99th percentile is the k-th largest value: 1 or 2 of them up
	// to a window of 200.
	k := answered - i99
	rtt, host := topK{k: k}, topK{k: k}
	few := k <= maxTop
	for i := range n {
		w := part(i)
		for j := range w.count() {
			r := w.rtt(j)
			if r == lostCode {
				continue
			}
			v = append(v, r)
			if few {
				rtt.add(r)
				host.add(w.host(j))
			}
		}
	}
	st.P50 = fromF12(nth(v, i50))
	if few {
		st.P99, st.HostP99 = fromF12(rtt.kth()), fromF12(host.kth())
	} else {
		// nth left everything above i50 at or above it.
		st.P99 = fromF12(nth(v[i50+1:], i99-i50-1))
		v = v[:0]
		for i := range n {
			w := part(i)
			for j := range w.count() {
				if w.rtt(j) != lostCode {
					v = append(v, w.host(j))
				}
			}
		}
		st.HostP99 = fromF12(nth(v, i99))
	}
	*buf = v[:0]
	return st
}

// maxTop bounds the largest values a topK keeps (a window of 1,600).
const maxTop = 16

// A topK keeps the k largest values added, in descending order.
type topK struct {
	v    [maxTop]uint16
	n, k int
}

func (t *topK) add(x uint16) {
	i := t.n
	if t.n < t.k {
		t.n++
	} else if x <= t.v[t.k-1] {
		return
	} else {
		i = t.k - 1
	}
	for ; i > 0 && t.v[i-1] < x; i-- {
		t.v[i] = t.v[i-1]
	}
	t.v[i] = x
}

// kth is the k-th largest value added (at least k were).
func (t *topK) kth() uint16 { return t.v[t.k-1] }

// published returns the statistics the state shows: the counts and the
// loss rate as they are, the percentiles as computed when at least a tenth
// of the window (one sample while there are fewer than 20) was new. At
// 1 Hz and a window of 100 they are at most 10 s old, over 100 s of
// samples, and a publish of ten thousand paths computes a tenth of them.
// The state machine judges with stats, always current.
// buf is stats'.
func (w *window) published(buf *[]uint16) winStats {
	return w.pcts.publish(w.loss(), func() winStats { return w.stats(buf) })
}

// rank returns the index, in sorted order, of the nearest-rank p-th
// percentile of n values.
func rank(p, n int) int { return max((p*n+99)/100, 1) - 1 }

// nth reorders v so that v[k] is the value sorted order puts there, with
// nothing larger before it and nothing smaller after it, and returns it
// (Hoare's selection, median-of-three pivots, insertion sort below 12).
func nth(v []uint16, k int) uint16 {
	lo, hi := 0, len(v)-1
	for hi-lo > 12 {
		mid := lo + (hi-lo)/2
		if v[mid] < v[lo] {
			v[mid], v[lo] = v[lo], v[mid]
		}
		if v[hi] < v[lo] {
			v[hi], v[lo] = v[lo], v[hi]
		}
		if v[hi] < v[mid] {
			v[hi], v[mid] = v[mid], v[hi]
		}
		pivot := v[mid]
		i, j := lo, hi
		for i <= j {
			for v[i] < pivot {
				i++
			}
			for v[j] > pivot {
				j--
			}
			if i <= j {
				v[i], v[j] = v[j], v[i]
				i++
				j--
			}
		}
		switch {
		case k <= j:
			hi = j
		case k >= i:
			lo = i
		default:
			return v[k] // between j and i: equal to the pivot
		}
	}
	for i := lo + 1; i <= hi; i++ {
		for j := i; j > lo && v[j] < v[j-1]; j-- {
			v[j], v[j-1] = v[j-1], v[j]
		}
	}
	return v[k]
}
