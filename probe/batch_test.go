package probe

import (
	"testing"
	"time"
)

// TestBatchBoundedByTransport: a transport that bounds its batches
// (verbs/peer's Engine, by its slots) never gets a larger one, and the
// peers are still probed at their rate: a window's probes go in several
// passes instead. Without a bound a pass takes up to maxBatch.
func TestBatchBoundedByTransport(t *testing.T) {
	if testing.Short() {
		t.Skip("probes 300 fake peers for some seconds")
	}
	for _, limit := range []int{16, 0} {
		scaleMaxBatch = limit
		r := startScale(t, 300, 1, 100*time.Microsecond, 0)
		scaleMaxBatch = 0
		if want := batchLimit(r.tr); r.m.sched.limit != want || (limit > 0 && want != limit) || (limit == 0 && want != maxBatch) {
			t.Errorf("transport bound %d: the manager's pass limit is %d (batchLimit %d)", limit, r.m.sched.limit, want)
		}
		r.waitUp(t, 30*time.Second)
		sent0, start := r.tr.Sent(), time.Now()
		time.Sleep(3 * time.Second)
		rate := float64(r.tr.Sent()-sent0) / time.Since(start).Seconds()
		largest := r.tr.LargestBatch()
		r.stop(t)
		if rate < 0.8*300 || rate > 1.25*300 {
			t.Errorf("transport bound %d: %.0f probes/s, want about 300 (300 peers at 1 Hz)", limit, rate)
		}
		switch {
		case limit > 0 && largest > limit:
			t.Errorf("transport bound %d: a batch of %d probes", limit, largest)
		case limit > 0 && largest < limit/2:
			t.Errorf("transport bound %d: the largest batch was %d: the bound was not reached, the test shows nothing", limit, largest)
		case limit == 0 && largest <= 16:
			t.Errorf("no transport bound: the largest batch was %d; a window of 300 peers at 1 Hz holds about 75", largest)
		}
	}
}

// TestShrinker checks when the inbox gives a buffer up: one of at most
// shrinkKeep bytes never, a larger one after shrinkAfter takes in a row
// that held under an eighth of it, and a take that fills it restarts the
// count.
func TestShrinker(t *testing.T) {
	var s shrinker
	for range 10 * shrinkAfter {
		if !s.keep(0, shrinkKeep/152, 152) {
			t.Fatalf("a buffer of %d bytes was given up", shrinkKeep/152*152)
		}
	}
	c := 256 // 256 answers of 152 bytes: 38 KiB
	for i := 1; i < shrinkAfter; i++ {
		if !s.keep(3, c, 152) {
			t.Fatalf("given up after %d oversized takes, want %d", i, shrinkAfter)
		}
	}
	if !s.keep(c/8, c, 152) {
		t.Fatal("a take that held an eighth was not kept")
	}
	for i := 1; i < shrinkAfter; i++ {
		if !s.keep(3, c, 152) {
			t.Fatalf("after a full take: given up after %d oversized takes, want %d", i, shrinkAfter)
		}
	}
	if s.keep(3, c, 152) {
		t.Errorf("a %d-byte buffer holding 3 entries for %d takes is still kept", c*152, shrinkAfter)
	}
}
