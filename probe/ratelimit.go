package probe

import (
	"net/netip"
	"time"
)

// Admission rate limits per source address. A querier asks once per
// resolve interval per path, and once per probe interval per path while a
// path is down: a burst of 64 and 16 a second covers a node with many
// ports probing at a short interval, and keeps one source (or a spoofer
// using its address) from churning the responder's admission table at the
// rate of a flood.
const (
	admitBurst   = 64
	admitPerSec  = 16
	maxRateSrcs  = 4096            // sources with a bucket of their own
	rateSweepGap = 1 * time.Second // how often a full table may be swept
	// rateCompactEvery is how often the table is made again with only
	// the buckets that are not full (compact).
	rateCompactEvery = 10 * time.Second
	// rateCompactMin is the least table that is compacted.
	rateCompactMin = 64
)

// A bucket is one source's tokens at the time it was last looked at
// (monoNs). 16 bytes, and a table entry 32 with its key: the table holds
// a bucket for each peer that queries this node.
type bucket struct {
	tokens float32
	at     int64
}

// A rateLimiter is a token bucket per source address, in a bounded table.
// When the table is full, sources that have been quiet long enough to be
// full again are dropped from it (they lose nothing: a new bucket starts
// full); if none is, new sources share one overflow bucket, so that a
// flood from many addresses cannot evict the buckets of the sources
// already known, nor grow the table. Used by Serve's goroutine only.
type rateLimiter struct {
	burst, perSec float64
	max           int
	// srcs is by the address's 16 bytes (an IPv4 address mapped; a zone
	// is no other source), a bucket by value: no allocation per source.
	srcs      map[[16]byte]bucket
	overflow  bucket
	swept     time.Time
	compacted time.Time
}

func newRateLimiter(burst, perSec float64, max int) *rateLimiter {
	return &rateLimiter{burst: burst, perSec: perSec, max: max, srcs: map[[16]byte]bucket{}, overflow: bucket{tokens: float32(burst)}}
}

// allow reports whether src may have one more admission at now, and takes
// the token if so.
func (r *rateLimiter) allow(src netip.Addr, now time.Time) bool {
	if now.Sub(r.compacted) >= rateCompactEvery {
		r.compact(now)
	}
	key := src.As16()
	b, ok := r.srcs[key]
	if !ok {
		if len(r.srcs) >= r.max {
			r.sweep(now)
		}
		if len(r.srcs) >= r.max {
			return r.take(&r.overflow, now)
		}
		b = bucket{tokens: float32(r.burst), at: monoNs(now)}
	}
	allowed := r.take(&b, now)
	r.srcs[key] = b
	return allowed
}

func (r *rateLimiter) take(b *bucket, now time.Time) bool {
	if t := monoNs(now); t > b.at {
		b.tokens = float32(min(r.burst, float64(b.tokens)+time.Duration(t-b.at).Seconds()*r.perSec))
		b.at = t
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// compact makes the table again with only the buckets that would not be
// full by now: a full bucket is what a new source gets, so dropping it
// loses nothing, and a table of every peer that ever queried (each asks
// once a minute or so, and its bucket is full again 4 s later) held a
// bucket for each, in a map that never shrinks: at a thousand peers
// 80 bytes a peer, for the some 70 whose buckets are not full (issue #29,
// docs/PROBES.md "Memory per peer").
func (r *rateLimiter) compact(now time.Time) {
	r.compacted = now
	if len(r.srcs) < rateCompactMin {
		return
	}
	full := r.fullAfter()
	t := monoNs(now)
	live := 0
	for _, b := range r.srcs {
		if time.Duration(t-b.at) < full {
			live++
		}
	}
	srcs := make(map[[16]byte]bucket, live)
	for src, b := range r.srcs {
		if time.Duration(t-b.at) < full {
			srcs[src] = b
		}
	}
	r.srcs = srcs
}

// fullAfter is how long a bucket takes to fill up from empty.
func (r *rateLimiter) fullAfter() time.Duration {
	return time.Duration(r.burst / r.perSec * float64(time.Second))
}

// sweep drops the buckets that would be full by now, at most once per
// rateSweepGap: a full table under a flood is not swept per packet.
func (r *rateLimiter) sweep(now time.Time) {
	if now.Sub(r.swept) < rateSweepGap {
		return
	}
	r.swept = now
	full := r.fullAfter()
	for src, b := range r.srcs {
		if time.Duration(monoNs(now)-b.at) >= full {
			delete(r.srcs, src)
		}
	}
}
