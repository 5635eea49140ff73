package coalesce

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func next[K comparable, V any](t *testing.T, q *Queue[K, V], within time.Duration) (V, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	return q.Next(ctx)
}

func TestQueueCoalescesPerKeyLatestWins(t *testing.T) {
	q := New[string, int](10*time.Millisecond, 16)
	for i := range 100 {
		q.Add("eth0", i)
		q.Add("eth1", 1000+i)
	}
	got := map[string]int{}
	for range 2 {
		v, err := next(t, q, time.Second)
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		if v >= 1000 {
			got["eth1"] = v
		} else {
			got["eth0"] = v
		}
	}
	if diff := cmp.Diff(map[string]int{"eth0": 99, "eth1": 1099}, got); diff != "" {
		t.Errorf("delivered values (-want +got):\n%s", diff)
	}
	if n := q.Len(); n != 0 {
		t.Errorf("Len after draining = %d, want 0", n)
	}
	// Nothing left: Next must block until the context ends, not spin or
	// return a zero value.
	if _, err := next(t, q, 30*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Next on empty queue: err = %v, want %v", err, context.DeadlineExceeded)
	}
}

func TestQueueWaitsForQuietPeriod(t *testing.T) {
	const delay = 50 * time.Millisecond
	q := New[int, int](delay, 4)
	start := time.Now()
	q.Add(1, 1)
	if _, err := next(t, q, time.Second); err != nil {
		t.Fatalf("Next: %v", err)
	}
	if el := time.Since(start); el < delay {
		t.Errorf("delivered after %v, want at least the %v debounce", el, delay)
	}
}

func TestQueueBusyKeyIsNotStarved(t *testing.T) {
	const delay = 20 * time.Millisecond
	q := New[int, int](delay, 4)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(delay / 4)
		defer tick.Stop()
		for i := 0; ; i++ {
			q.Add(7, i)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	defer func() { cancel(); <-done }()
	start := time.Now()
	if _, err := next(t, q, 2*time.Second); err != nil {
		t.Fatalf("Next while key keeps changing: %v", err)
	}
	// maxDelay is 8*delay; allow scheduling slack but the key must come out
	// long before the test timeout although it never went quiet.
	if el := time.Since(start); el > 20*delay {
		t.Errorf("busy key delivered after %v, want about %v", el, 8*delay)
	}
}

func TestQueueOverflowAndDrop(t *testing.T) {
	tests := []struct {
		name string
		fill func(q *Queue[int, int])
	}{
		{"overflow", func(q *Queue[int, int]) {
			for i := range 5 { // limit is 4
				q.Add(i, i)
			}
		}},
		{"drop", func(q *Queue[int, int]) {
			q.Add(1, 1)
			q.Drop()
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := New[int, int](0, 4)
			tt.fill(q)
			if _, err := next(t, q, time.Second); !errors.Is(err, ErrDropped) {
				t.Fatalf("first Next: err = %v, want ErrDropped", err)
			}
			if n := q.Len(); n != 0 {
				t.Errorf("Len after drop = %d, want 0", n)
			}
			// ErrDropped is reported once; afterwards the queue works again.
			q.Add(9, 90)
			v, err := next(t, q, time.Second)
			if err != nil || v != 90 {
				t.Errorf("Next after drop = %d, %v; want 90, nil", v, err)
			}
		})
	}
}

func TestQueueNextHonoursCancel(t *testing.T) {
	q := New[int, int](time.Hour, 4)
	q.Add(1, 1) // due in an hour
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(20 * time.Millisecond); cancel() }()
	if _, err := q.Next(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Next: err = %v, want context.Canceled", err)
	}
}

func TestQueueMerge(t *testing.T) {
	// Keep the maximum seen: the merge function decides, not arrival order.
	q := NewMerging[string, int](0, 4, func(old, new int) int { return max(old, new) })
	for _, v := range []int{3, 9, 1} {
		q.Add("k", v)
	}
	v, err := next(t, q, time.Second)
	if err != nil || v != 9 {
		t.Errorf("Next = %d, %v; want 9, nil", v, err)
	}
}
