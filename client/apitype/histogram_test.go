package apitype

import (
	"sync"
	"testing"
	"time"
)

// TestSharedRTTHistogram counts into a shared histogram while readers
// load it (run with -race): every load is a valid histogram (no bucket
// ahead of the total, so the +Inf bucket holds every finite one), the
// loads never go back, and the end holds exactly what was observed, as
// RTTHistogram counts it.
func TestSharedRTTHistogram(t *testing.T) {
	var s SharedRTTHistogram
	var want RTTHistogram
	rtts := []time.Duration{500 * time.Nanosecond, 30 * time.Microsecond, 2 * time.Millisecond, time.Second}
	const n = 20000
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var last uint64
			for {
				h := s.Load()
				cum := h.Cumulative()
				if cum[NumRTTBuckets-1] > h.Count {
					t.Errorf("a load's finite buckets hold %d, its total %d", cum[NumRTTBuckets-1], h.Count)
					return
				}
				if h.Count < last {
					t.Errorf("the total went back from %d to %d", last, h.Count)
					return
				}
				last = h.Count
				select {
				case <-stop:
					return
				default:
				}
			}
		}()
	}
	for i := range n {
		d := rtts[i%len(rtts)]
		s.Observe(d)
		want.Observe(d)
	}
	close(stop)
	wg.Wait()
	if got := s.Load(); got != want {
		t.Errorf("shared histogram %+v, want %+v", got, want)
	}
	if h := (*SharedRTTHistogram)(nil).Load(); h != (RTTHistogram{}) {
		t.Errorf("a nil histogram loads %+v", h)
	}
	if got := NewSharedRTTHistogram(want).Load(); got != want {
		t.Errorf("NewSharedRTTHistogram(h).Load() = %+v, want h", got)
	}
}
