// Package coalesce merges bursts of "look again at X" notifications into one
// notification per object.
//
// Kernel event sources (rtnetlink, uevents) report every intermediate step:
// 200 MTU changes in a row produce 200 messages. The reconciler is
// level-triggered and re-observes the object anyway, so only the fact that X
// changed matters, not how often. A Queue keeps at most one pending value per
// key, delivers it once the key has been quiet for a short delay (or has been
// pending for too long), and is bounded: when it is full it discards
// everything and tells the consumer to resync instead of growing.
package coalesce

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrDropped is returned by Next when pending values were discarded, either
// because the queue was full or because the producer called Drop after its
// source lost events. The consumer must resynchronise its whole view.
var ErrDropped = errors.New("coalesce: events dropped, resync required")

// A Queue coalesces values per key. Add may be called from any goroutine;
// Next must be called from a single consumer goroutine.
type Queue[K comparable, V any] struct {
	delay    time.Duration // quiet time before a key is delivered
	maxDelay time.Duration // upper bound on how long a busy key is held back
	limit    int
	merge    func(old, new V) V

	mu      sync.Mutex
	items   map[K]*item[V]
	dropped bool
	wake    chan struct{} // capacity 1: "state changed, re-evaluate"
}

type item[V any] struct {
	v     V
	first time.Time // first Add since the last delivery
	last  time.Time // most recent Add
}

// New returns a Queue that delivers a key after it has been quiet for delay,
// and at the latest 8*delay after its first pending Add, so that a key that
// keeps changing is still reported. At most limit keys are pending at once.
// A delay of zero delivers values as soon as Next runs.
func New[K comparable, V any](delay time.Duration, limit int) *Queue[K, V] {
	return NewMerging[K, V](delay, limit, nil)
}

// NewMerging is like New, but a repeated Add for a pending key stores
// merge(old, new) instead of the new value. Sources use it when some
// notifications carry more information than later ones for the same object.
// A nil merge keeps the latest value.
func NewMerging[K comparable, V any](delay time.Duration, limit int, merge func(old, new V) V) *Queue[K, V] {
	if limit < 1 {
		limit = 1
	}
	if delay < 0 {
		delay = 0
	}
	return &Queue[K, V]{
		delay:    delay,
		maxDelay: 8 * delay,
		limit:    limit,
		merge:    merge,
		items:    make(map[K]*item[V]),
		wake:     make(chan struct{}, 1),
	}
}

// Add records v as the latest value for k. A later Add for the same key
// replaces (or merges into) the value and postpones its delivery. If the queue already holds
// limit other keys, all pending values are discarded and the next call to
// Next returns ErrDropped.
func (q *Queue[K, V]) Add(k K, v V) {
	now := time.Now()
	q.mu.Lock()
	if it, ok := q.items[k]; ok {
		if q.merge != nil {
			v = q.merge(it.v, v)
		}
		it.v = v
		it.last = now
	} else if len(q.items) >= q.limit {
		q.dropLocked()
	} else {
		q.items[k] = &item[V]{v: v, first: now, last: now}
	}
	q.mu.Unlock()
	q.signal()
}

// Drop discards all pending values and makes the next call to Next return
// ErrDropped. Producers call it when their source reports lost events (for
// example ENOBUFS on a netlink socket).
func (q *Queue[K, V]) Drop() {
	q.mu.Lock()
	q.dropLocked()
	q.mu.Unlock()
	q.signal()
}

func (q *Queue[K, V]) dropLocked() {
	clear(q.items)
	q.dropped = true
}

func (q *Queue[K, V]) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// Len returns the number of pending keys.
func (q *Queue[K, V]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

// Next blocks until a key is due and returns its latest value. It returns
// ErrDropped once after values were discarded, and ctx.Err() when ctx is
// done. Keys are delivered in the order they become due.
func (q *Queue[K, V]) Next(ctx context.Context) (V, error) {
	var zero V
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if err := ctx.Err(); err != nil {
			return zero, err
		}
		v, wait, ok, err := q.take(time.Now())
		if err != nil || ok {
			return v, err
		}
		var timeC <-chan time.Time
		if wait > 0 {
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			timeC = timer.C
		}
		select {
		case <-ctx.Done():
			return zero, ctx.Err()
		case <-q.wake:
		case <-timeC:
		}
	}
}

// take removes and returns the due item with the earliest deadline. If none
// is due it reports how long to wait for the earliest one (0: nothing pending).
func (q *Queue[K, V]) take(now time.Time) (v V, wait time.Duration, ok bool, err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.dropped {
		q.dropped = false
		return v, 0, false, ErrDropped
	}
	var (
		bestKey K
		bestDue time.Time
		found   bool
	)
	for k, it := range q.items {
		due := it.last.Add(q.delay)
		if limit := it.first.Add(q.maxDelay); limit.Before(due) {
			due = limit
		}
		if !found || due.Before(bestDue) {
			bestKey, bestDue, found = k, due, true
		}
	}
	if !found {
		return v, 0, false, nil
	}
	if bestDue.After(now) {
		return v, bestDue.Sub(now), false, nil
	}
	it := q.items[bestKey]
	delete(q.items, bestKey)
	return it.v, 0, true, nil
}
