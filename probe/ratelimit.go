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
)

// A bucket is one source's tokens at the time it was last looked at.
type bucket struct {
	tokens float64
	at     time.Time
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
	srcs          map[netip.Addr]bucket // by value: no allocation per source
	overflow      bucket
	swept         time.Time
}

func newRateLimiter(burst, perSec float64, max int) *rateLimiter {
	return &rateLimiter{burst: burst, perSec: perSec, max: max, srcs: map[netip.Addr]bucket{}, overflow: bucket{tokens: burst}}
}

// allow reports whether src may have one more admission at now, and takes
// the token if so.
func (r *rateLimiter) allow(src netip.Addr, now time.Time) bool {
	b, ok := r.srcs[src]
	if !ok {
		if len(r.srcs) >= r.max {
			r.sweep(now)
		}
		if len(r.srcs) >= r.max {
			return r.take(&r.overflow, now)
		}
		b = bucket{tokens: r.burst, at: now}
	}
	allowed := r.take(&b, now)
	r.srcs[src] = b
	return allowed
}

func (r *rateLimiter) take(b *bucket, now time.Time) bool {
	if d := now.Sub(b.at); d > 0 {
		b.tokens = min(r.burst, b.tokens+d.Seconds()*r.perSec)
		b.at = now
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// sweep drops the buckets that would be full by now, at most once per
// rateSweepGap: a full table under a flood is not swept per packet.
func (r *rateLimiter) sweep(now time.Time) {
	if now.Sub(r.swept) < rateSweepGap {
		return
	}
	r.swept = now
	full := time.Duration(r.burst / r.perSec * float64(time.Second))
	for src, b := range r.srcs {
		if now.Sub(b.at) >= full {
			delete(r.srcs, src)
		}
	}
}
