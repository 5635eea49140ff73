package apitype

import (
	"sync/atomic"
	"time"
)

// RTTBounds are the upper bounds of the RTT histograms' buckets (the peer
// and loopback probes'; docs/METRICS.md, "Latency histograms"): 1-2-5 steps
// from 1 µs, about an RDMA NIC's loopback write, to 100 ms, far beyond a
// healthy fabric's round trip and the probes' timeout range. A fixed set,
// the same on every node and every release, so that the buckets of a fleet
// add up and a fleet p99 is one histogram_quantile over their sum.
var RTTBounds = [NumRTTBuckets]time.Duration{
	1 * time.Microsecond, 2 * time.Microsecond, 5 * time.Microsecond,
	10 * time.Microsecond, 20 * time.Microsecond, 50 * time.Microsecond,
	100 * time.Microsecond, 200 * time.Microsecond, 500 * time.Microsecond,
	1 * time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond,
	10 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond,
}

// NumRTTBuckets is the number of finite buckets of an RTTHistogram.
const NumRTTBuckets = 16

// An RTTHistogram counts round-trip times into the RTTBounds buckets since
// the prober started: Buckets[i] the observations in (RTTBounds[i-1],
// RTTBounds[i]] (not cumulative), Count all of them (those above the last
// bound too), Sum their total. It is a value of fixed size, so that
// observing allocates nothing and a snapshot copies it.
//
// It is not part of the JSON (the status carries percentiles; a histogram
// per path of ten thousand peers would double its size): the metrics read
// it from the snapshot in the daemon.
type RTTHistogram struct {
	Buckets [NumRTTBuckets]uint64
	Count   uint64
	Sum     time.Duration
}

// Observe counts one round trip of d.
func (h *RTTHistogram) Observe(d time.Duration) {
	h.Count++
	h.Sum += d
	// A binary search would take 4 steps; a linear one over 16 sorted
	// bounds is as fast for the short RTTs that dominate and branch-
	// predicts better.
	for i, b := range RTTBounds {
		if d <= b {
			h.Buckets[i]++
			return
		}
	}
}

// Cumulative returns the count of observations at or below each bound
// (Prometheus's le buckets); the +Inf bucket is Count.
func (h *RTTHistogram) Cumulative() [NumRTTBuckets]uint64 {
	var out [NumRTTBuckets]uint64
	var n uint64
	for i, c := range h.Buckets {
		n += c
		out[i] = n
	}
	return out
}

// A SharedRTTHistogram is an RTTHistogram that its prober goes on counting
// into while readers hold it: a published path (PeerPath.RTTHist) points
// at its path's live histogram instead of holding a copy. At one probe a
// second every path's histogram changes between two publishes, so a copy
// in each published state was 144 bytes per path held for nothing, and a
// copy per path per publish. The prober counts with Observe, readers take
// a copy with Load; both are atomic, so neither waits.
type SharedRTTHistogram struct{ h RTTHistogram }

// NewSharedRTTHistogram returns a shared histogram holding h's counts.
func NewSharedRTTHistogram(h RTTHistogram) *SharedRTTHistogram {
	return &SharedRTTHistogram{h: h}
}

// Observe counts one round trip of d, as RTTHistogram.Observe does. The
// total is counted before the bucket, so that a Load, which reads the
// buckets first, never sees a bucket ahead of the total (a histogram's
// +Inf bucket must hold every finite one).
func (s *SharedRTTHistogram) Observe(d time.Duration) {
	atomic.AddUint64(&s.h.Count, 1)
	atomic.AddInt64((*int64)(&s.h.Sum), int64(d))
	for i, b := range RTTBounds {
		if d <= b {
			atomic.AddUint64(&s.h.Buckets[i], 1)
			return
		}
	}
}

// Load returns the counts as of now; a nil s has none. An Observe running
// meanwhile may be in Count (and Sum) and not yet in its bucket, never
// the other way round.
func (s *SharedRTTHistogram) Load() RTTHistogram {
	var h RTTHistogram
	if s == nil {
		return h
	}
	for i := range s.h.Buckets {
		h.Buckets[i] = atomic.LoadUint64(&s.h.Buckets[i])
	}
	h.Count = atomic.LoadUint64(&s.h.Count)
	h.Sum = time.Duration(atomic.LoadInt64((*int64)(&s.h.Sum)))
	return h
}
