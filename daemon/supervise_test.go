package daemon

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon/state"
)

// TestSupervisorOwnsEveryPart: Wait returns only after every part, those
// started with Go and with Start, returned; stop stops one part alone and
// may be called twice.
func TestSupervisorOwnsEveryPart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	s := newSupervisor(ctx)
	var running atomic.Int32
	part := func(ctx context.Context) {
		running.Add(1)
		<-ctx.Done()
		time.Sleep(20 * time.Millisecond) // a part that takes a moment to stop
		running.Add(-1)
	}
	s.Go(part)
	stop := s.Start(part)
	s.Start(part)
	for running.Load() != 3 {
		time.Sleep(time.Millisecond)
	}
	stop()
	if n := running.Load(); n != 2 {
		t.Fatalf("after stop, %d parts run, want 2", n)
	}
	stop()
	if s.Stopping() {
		t.Fatal("Stopping before the context ended")
	}
	cancel()
	s.Wait()
	if n := running.Load(); n != 0 {
		t.Fatalf("Wait returned with %d parts running", n)
	}
	if !s.Stopping() {
		t.Fatal("not Stopping after the context ended")
	}
}

// TestMailbox: updates from other goroutines reach the store through the
// main loop, the latest per key, in the order keys were first posted, in
// one snapshot; a component error makes the running daemon degraded.
func TestMailbox(t *testing.T) {
	d := &Daemon{mail: newMailbox(), store: state.NewStore(apitype.Snapshot{State: apitype.Running,
		Components: map[string]apitype.Component{apitype.ComponentInventory: {State: apitype.OK}},
		Devices:    []apitype.Device{{Name: "rxe0"}}})}
	var order []string
	d.mail.post("a", func(*apitype.Snapshot) { order = append(order, "a1") })
	d.mail.post("b", func(*apitype.Snapshot) { order = append(order, "b") })
	d.mail.post("a", func(*apitype.Snapshot) { order = append(order, "a2") })
	d.report(apitype.ComponentMetrics, apitype.Error, errors.New("listen tcp: address in use"))
	select {
	case <-d.mail.ready:
	default:
		t.Fatal("no token in ready after posts")
	}
	seq := d.store.Load().Seq
	d.applyMail()
	if got, want := order, []string{"a2", "b"}; len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("applied %q, want %q", got, want)
	}
	s := d.store.Load()
	if s.Seq != seq+1 {
		t.Errorf("the updates took %d snapshots, want 1", s.Seq-seq)
	}
	if c := s.Components[apitype.ComponentMetrics]; c.State != apitype.Error || c.Error != "listen tcp: address in use" {
		t.Errorf("metrics component %+v, want the reported error", c)
	}
	if s.State != apitype.Degraded {
		t.Errorf("state %s after a component error, want degraded", s.State)
	}
	d.applyMail() // nothing pending: no new snapshot
	if d.store.Load().Seq != s.Seq {
		t.Error("an empty mailbox published a snapshot")
	}
}
