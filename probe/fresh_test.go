package probe

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/probe/ud"
)

// publishCounter is a Manager that is not running, whose publish the test
// calls at times of its choosing, counting the states handed to OnState.
type publishCounter struct {
	m    *Manager
	pubs atomic.Int64
}

func newPublishCounter(t *testing.T) *publishCounter {
	t.Helper()
	c := &publishCounter{}
	m, err := New(Options{Transport: &fakeTransport{}, OnState: func(apitype.Peers) { c.pubs.Add(1) }},
		Settings{Interval: time.Second, Timeout: 500 * time.Millisecond, Rotate: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	c.m = m
	return c
}

// TestNoFiguresPublishWithoutRequest: while only figures move (every pass
// finds new answers) and nobody asks, the state is built once at the start
// and then every backgroundPublish, not every publishPeriod as before: a
// minute of passes on the batch window's ticks costs three builds, not 60.
func TestNoFiguresPublishWithoutRequest(t *testing.T) {
	c := newPublishCounter(t)
	start := time.Now()
	w := batchWindow(c.m.cfg.Interval)
	for now := start; now.Sub(start) < time.Minute; now = now.Add(w) {
		c.m.pub.dirty = true // the pass took answers, as onReply marks them
		c.m.publish(now)
	}
	// The first pass, then at 30 s (backgroundPublish); the minute's
	// last pass is just short of 60 s.
	if got, want := c.pubs.Load(), int64(1+int(time.Minute/backgroundPublish)-1); got != want {
		t.Errorf("%d publishes in a minute of figures moving and no reader; want %d (the start, then every %v)", got, want, backgroundPublish)
	}
}

// TestFreshCoalesces: requests that come before the manager's next pass
// share one channel, and that pass builds the state once for all of them;
// a request after it, within maxAge, is answered at once without a pass.
func TestFreshCoalesces(t *testing.T) {
	c := newPublishCounter(t)
	now := time.Now()
	c.m.publish(now) // the first state
	c.pubs.Store(0)
	now = now.Add(5 * time.Second)
	c.m.pub.dirty = true
	var chans []<-chan struct{}
	for range 50 {
		ch, err := c.m.pub.fresh.request(now, time.Second)
		if err != nil || ch == nil {
			t.Fatalf("request with a state 5 s old = %v, %v; want a channel to wait on", ch, err)
		}
		chans = append(chans, ch)
	}
	select {
	case <-c.m.pub.fresh.kick:
	default:
		t.Errorf("the requests did not wake the manager")
	}
	select {
	case <-c.m.pub.fresh.kick:
		t.Errorf("50 requests woke the manager more than once")
	default:
	}
	c.m.publish(now)
	if got := c.pubs.Load(); got != 1 {
		t.Errorf("50 requests cost %d builds; want 1", got)
	}
	for i, ch := range chans {
		select {
		case <-ch:
		default:
			t.Fatalf("request %d not answered by the publish", i)
		}
	}
	if ch, err := c.m.pub.fresh.request(now.Add(500*time.Millisecond), time.Second); ch != nil || err != nil {
		t.Errorf("request 0.5 s after a publish, for figures 1 s old: %v, %v; want answered at once", ch, err)
	}
	// maxAge 0 is the publish period (1 s here).
	if ch, _ := c.m.pub.fresh.request(now.Add(1500*time.Millisecond), 0); ch == nil {
		t.Errorf("request 1.5 s after a publish for the publish period (1 s) answered at once; want a wait for a publish")
	}
}

// TestFreshNothingMoved: a request when no figure moved since the last
// publish is answered by the next pass without building the state.
func TestFreshNothingMoved(t *testing.T) {
	c := newPublishCounter(t)
	now := time.Now()
	c.m.publish(now)
	c.pubs.Store(0)
	now = now.Add(5 * time.Second)
	ch, _ := c.m.pub.fresh.request(now, time.Second)
	if ch == nil {
		t.Fatal("request with a state 5 s old answered at once; want it to wait for the manager's pass")
	}
	c.m.publish(now)
	select {
	case <-ch:
	default:
		t.Fatal("request not answered by the pass")
	}
	if got := c.pubs.Load(); got != 0 {
		t.Errorf("%d builds with nothing moved; want 0 (the state published is current)", got)
	}
	// Counters count without marking the publisher dirty: they are
	// compared.
	c.m.sched.notSent++
	ch, _ = c.m.pub.fresh.request(now.Add(5*time.Second), time.Second)
	c.m.publish(now.Add(5 * time.Second))
	if got := c.pubs.Load(); got != 1 || ch == nil {
		t.Errorf("%d builds after a counter moved; want 1", got)
	}
}

// TestStateChangePublishesAtOnce: a state change is published by the next
// pass without a request, at most every minPublishGap.
func TestStateChangePublishesAtOnce(t *testing.T) {
	c := newPublishCounter(t)
	now := time.Now()
	c.m.publish(now)
	c.pubs.Store(0)
	now = now.Add(time.Second + minPublishGap)
	c.m.pub.changed = true
	c.m.publish(now)
	if got := c.pubs.Load(); got != 1 {
		t.Fatalf("%d publishes after a state change; want 1 at once", got)
	}
	c.m.pub.changed = true
	if next := c.m.publish(now.Add(minPublishGap / 2)); c.pubs.Load() != 1 || !next.Equal(now.Add(minPublishGap)) {
		t.Errorf("a second change within %v: %d publishes, next at +%v; want it held to +%v", minPublishGap, c.pubs.Load(), next.Sub(now), minPublishGap)
	}
	c.m.publish(now.Add(minPublishGap))
	if got := c.pubs.Load(); got != 2 {
		t.Errorf("%d publishes after the gap; want 2", got)
	}
}

// TestFreshCancelled: a request whose context ends returns its error at
// once and leaves nothing that blocks the manager: its next pass answers
// the abandoned channel and goes on. After Run returns, requests fail at
// once.
func TestFreshCancelled(t *testing.T) {
	c := newPublishCounter(t)
	c.m.publish(time.Now().Add(-time.Hour)) // a state an hour old
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := c.m.Fresh(ctx, time.Second); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Fresh of a manager that does not run = %v; want the context's deadline", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Fresh took %v past its 20 ms context", took)
	}
	done := make(chan struct{})
	go func() {
		c.m.pub.dirty = true
		c.m.publish(time.Now())
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the pass after an abandoned request did not return")
	}
	if c.m.pub.fresh.asked() {
		t.Errorf("the abandoned request still waits after the publish")
	}
	c.m.pub.fresh.stop()
	if err := c.m.Fresh(context.Background(), time.Nanosecond); !errors.Is(err, ErrStopped) {
		t.Errorf("Fresh after Run returned = %v; want ErrStopped", err)
	}
}

// TestFreshRunning: two managers probing each other over the real control
// endpoint. Once they are up and stable, nothing is published without a
// reader (figures move with every probe, 10 a second); a request gets a
// state with every answer the manager was handed before it; and many
// requests at once cost one build.
func TestFreshRunning(t *testing.T) {
	port, f := loopbackFabric(t)
	var pubs, replies atomic.Int64
	a := &node{pr: f.newTransport(1), done: make(chan error, 1)}
	s := Settings{Peers: []Spec{{Name: "127.0.0.3"}}, Port: port, Interval: 100 * time.Millisecond, Timeout: 50 * time.Millisecond,
		Window: 20, MaxPeers: 8, Rotate: time.Hour, Resolve: time.Minute,
		Threshold: Thresholds{DownAfter: 3, UpAfter: 3, LossPct: 5, MinLosses: 2}}
	var err error
	a.m, err = New(Options{Transport: a.pr, NodeID: 1, ListenHost: "127.0.0.2",
		OnState: func(ps apitype.Peers) { a.mu.Lock(); a.last = ps; a.mu.Unlock(); pubs.Add(1) }}, s)
	if err != nil {
		t.Fatal(err)
	}
	a.pr.onReply = func(r ud.Reply) { replies.Add(1); a.m.OnReply(r) }
	ctx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	go func() { a.done <- a.m.Run(ctx) }()
	defer a.stop(t)
	b := startNode(t, f, "127.0.0.3", "127.0.0.2", port, 2)
	defer b.stop(t)
	waitState(t, a, "127.0.0.3", apitype.PeerUp, 5*time.Second)
	time.Sleep(300 * time.Millisecond) // the last changes of coming up

	p0, r0 := pubs.Load(), replies.Load()
	time.Sleep(2 * time.Second)
	if got, answered := pubs.Load()-p0, replies.Load()-r0; got != 0 || answered < 10 {
		t.Errorf("%d publishes in 2 s of %d answers and no reader; want 0 (and answers coming)", got, answered)
	}

	// Every answer handed to the manager before the request is in the
	// state the request gets.
	before := replies.Load()
	rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer rcancel()
	if err := a.m.Fresh(rctx, time.Millisecond); err != nil {
		t.Fatalf("Fresh = %v", err)
	}
	a.mu.Lock()
	hist := a.last.RTTHist.Count
	a.mu.Unlock()
	if hist < uint64(before) {
		t.Errorf("the state after Fresh counts %d answers; %d were handed to the manager before the request", hist, before)
	}

	// Many readers at once: one build (two if a state change lands in
	// between).
	time.Sleep(200 * time.Millisecond)
	p1 := pubs.Load()
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for range 20 {
		wg.Go(func() { errs <- a.m.Fresh(rctx, 100*time.Millisecond) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("Fresh = %v", err)
		}
	}
	if got := pubs.Load() - p1; got < 1 || got > 2 {
		t.Errorf("20 concurrent requests cost %d builds; want 1", got)
	}
}
