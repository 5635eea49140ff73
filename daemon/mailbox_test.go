package daemon

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
)

// TestMailboxFlushed: flushed waits for the updates posted before it to be
// applied (take, then done after the store's update), not for later ones,
// and gives up when its context ends.
func TestMailboxFlushed(t *testing.T) {
	m := newMailbox()
	if err := m.flushed(context.Background()); err != nil {
		t.Fatalf("flushed with nothing posted: %v", err)
	}
	stuck := newMailbox()
	stuck.post("peers", func(*apitype.Snapshot) {})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := stuck.flushed(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("flushed with an update not applied: %v; want the context's deadline", err)
	}
	m.post("peers", func(*apitype.Snapshot) {})
	fs, seq := m.take()
	if len(fs) != 1 {
		t.Fatalf("take: %d updates, want 1", len(fs))
	}
	done := make(chan error, 1)
	go func() { done <- m.flushed(context.Background()) }()
	for waiting := false; !waiting; time.Sleep(time.Millisecond) {
		m.mu.Lock()
		waiting = m.appliedC != nil
		m.mu.Unlock()
	}
	m.post("peers", func(*apitype.Snapshot) {}) // after the waiter's call: not waited for
	select {
	case err := <-done:
		t.Fatalf("flushed returned (%v) before the update was applied", err)
	case <-time.After(20 * time.Millisecond):
	}
	m.done(seq)
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("flushed after the apply: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("flushed did not return after the update it waited for was applied")
	}
}
