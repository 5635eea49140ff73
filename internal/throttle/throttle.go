// Package throttle bounds what a flood of refused requests costs: Log lets
// one line per interval and key through (with the count of the lines it
// held back), Budget gives each key a token bucket. The socket API and the
// D-Bus service both refuse callers that anyone can make them refuse, and
// a log line per refusal would carry the flood on into the journal (whose
// per-service rate limit then drops rdmad's real messages).
package throttle

import (
	"sync"
	"time"
)

// MaxKeys bounds the keys a Log or a Budget tracks. Keys past it share one
// overflow entry, so that a flood of distinct keys costs no memory and
// still no more than one line per interval.
const MaxKeys = 1024

// A Log rate-limits a log line per key. The zero value is not usable; use
// NewLog.
type Log[K comparable] struct {
	every time.Duration
	mu    sync.Mutex
	keys  map[K]*logEntry
	over  logEntry // the keys past MaxKeys
}

type logEntry struct {
	last time.Time
	held int
}

// NewLog returns a Log that lets one line per key through every interval.
func NewLog[K comparable](every time.Duration) *Log[K] {
	return &Log[K]{every: every, keys: map[K]*logEntry{}}
}

// Allow reports whether the line for key may be logged at now, and if so
// how many lines for key it held back since the last one let through.
func (l *Log[K]) Allow(key K, now time.Time) (ok bool, held int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, found := l.keys[key]
	if !found {
		if len(l.keys) >= MaxKeys {
			l.expire(now)
		}
		if len(l.keys) >= MaxKeys {
			e = &l.over
		} else {
			e = &logEntry{}
			l.keys[key] = e
		}
	}
	if !e.last.IsZero() && now.Sub(e.last) < l.every {
		e.held++
		return false, 0
	}
	held = e.held
	e.last, e.held = now, 0
	return true, held
}

// expire forgets the keys whose last line is an interval old and which
// held nothing back since (a later line for them is let through anyway).
func (l *Log[K]) expire(now time.Time) {
	for k, e := range l.keys {
		if now.Sub(e.last) >= l.every && e.held == 0 {
			delete(l.keys, k)
		}
	}
}

// A Budget is a token bucket per key: Burst calls at once, then Rate a
// second. The zero value is not usable; use NewBudget.
type Budget[K comparable] struct {
	rate  float64
	burst float64
	mu    sync.Mutex
	keys  map[K]*bucket
	over  bucket // the keys past MaxKeys
}

type bucket struct {
	tokens float64
	at     time.Time
}

// NewBudget returns a Budget of burst calls per key, refilled at rate a
// second.
func NewBudget[K comparable](rate float64, burst int) *Budget[K] {
	return &Budget[K]{rate: rate, burst: float64(burst), keys: map[K]*bucket{}}
}

// Take reports whether key may make one more call at now, and takes it.
func (b *Budget[K]) Take(key K, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, found := b.keys[key]
	if !found {
		if len(b.keys) >= MaxKeys {
			b.expire(now)
		}
		if len(b.keys) >= MaxKeys {
			e = &b.over
		} else {
			e = &bucket{tokens: b.burst, at: now}
			b.keys[key] = e
		}
		if e.at.IsZero() {
			e.tokens, e.at = b.burst, now
		}
	}
	if d := now.Sub(e.at); d > 0 {
		e.tokens = min(b.burst, e.tokens+d.Seconds()*b.rate)
		e.at = now
	}
	if e.tokens < 1 {
		return false
	}
	e.tokens--
	return true
}

// expire forgets the keys whose bucket has filled up again: a new bucket
// for them starts full, which is the same.
func (b *Budget[K]) expire(now time.Time) {
	for k, e := range b.keys {
		if e.tokens+now.Sub(e.at).Seconds()*b.rate >= b.burst {
			delete(b.keys, k)
		}
	}
}
