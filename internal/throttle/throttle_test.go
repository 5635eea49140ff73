package throttle

import (
	"testing"
	"time"
)

func TestLog(t *testing.T) {
	l := NewLog[uint32](10 * time.Second)
	t0 := time.Unix(1000, 0)
	if ok, held := l.Allow(1, t0); !ok || held != 0 {
		t.Fatalf("first line: %v %d, want let through with nothing held", ok, held)
	}
	for i := range 5000 {
		if ok, _ := l.Allow(1, t0.Add(time.Duration(i)*time.Millisecond)); ok {
			t.Fatalf("line %d within the interval let through", i)
		}
	}
	if ok, _ := l.Allow(2, t0.Add(time.Second)); !ok {
		t.Fatal("another key's first line held back by key 1's flood")
	}
	if ok, held := l.Allow(1, t0.Add(10*time.Second)); !ok || held != 5000 {
		t.Fatalf("after the interval: %v %d, want let through with 5000 held", ok, held)
	}
}

func TestLogManyKeys(t *testing.T) {
	l := NewLog[int](time.Minute)
	t0 := time.Unix(1000, 0)
	let := 0
	for k := range 10 * MaxKeys {
		if ok, _ := l.Allow(k, t0); ok {
			let++
		}
	}
	// MaxKeys tracked keys, then one line for all the others together.
	if let != MaxKeys+1 {
		t.Errorf("%d lines let through for %d keys, want %d", let, 10*MaxKeys, MaxKeys+1)
	}
	if len(l.keys) > MaxKeys {
		t.Errorf("%d keys tracked, want at most %d", len(l.keys), MaxKeys)
	}
	if ok, _ := l.Allow(-1, t0.Add(time.Minute)); !ok {
		t.Error("a new key an interval later was not let through (old keys not expired)")
	}
}

func TestBudget(t *testing.T) {
	b := NewBudget[uint32](10, 20)
	t0 := time.Unix(1000, 0)
	n := 0
	for range 1000 {
		if b.Take(7, t0) {
			n++
		}
	}
	if n != 20 {
		t.Errorf("%d calls at once, want the burst of 20", n)
	}
	if !b.Take(8, t0) {
		t.Error("another key refused by key 7's use")
	}
	n = 0
	for i := range 1000 {
		if b.Take(7, t0.Add(time.Duration(i)*time.Millisecond)) {
			n++
		}
	}
	// One second at 10 a second (the last token may be just short).
	if n < 9 || n > 10 {
		t.Errorf("%d calls in the next second, want 10 (the rate)", n)
	}
	for k := range 2 * MaxKeys {
		b.Take(uint32(100+k), t0)
	}
	if len(b.keys) > MaxKeys {
		t.Errorf("%d keys tracked, want at most %d", len(b.keys), MaxKeys)
	}
}
