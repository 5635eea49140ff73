//go:build linux && verbsfake

package daemon

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/service"
	"github.com/rdmad/rdmad/daemon/state"
	"github.com/rdmad/rdmad/internal/syncbuf"
	"github.com/rdmad/rdmad/verbs"
	"github.com/rdmad/rdmad/verbs/bw"
)

// loopbackDaemon is a bare Daemon with the loopback tests, the health
// verdict and a store that lists the fake rxe0's ACTIVE port at 10 Gb/s.
func loopbackDaemon(t *testing.T, h config.Health) *Daemon {
	t.Helper()
	t.Cleanup(func() {
		verbs.FakeReset()
		if live := verbs.FakeLive(); len(live) != 0 {
			t.Errorf("verbs objects left open: %v", live)
		}
	})
	if err := verbs.FakeAddDevice(verbs.FakeDevice{Name: "rxe0"}); err != nil {
		t.Fatal(err)
	}
	d := &Daemon{log: slog.New(slog.NewTextHandler(&syncbuf.Buffer{}, nil)), mail: newMailbox(),
		store: state.NewStore(apitype.Snapshot{State: apitype.Running, Devices: []apitype.Device{{Name: "rxe0",
			Ports: []apitype.Port{{Port: 1, State: "ACTIVE", RateGbps: 10}}}}})}
	d.health = newHealthPart(d.log)
	d.health.configure(&config.Config{Health: h})
	d.store.SetFinish(func(prev, next *apitype.Snapshot) { d.health.finish(d, prev, next) })
	d.bwSlot = bw.NewSlot()
	d.loopback = newLoopbackTests(d)
	t.Cleanup(d.loopback.node.Close)
	return d
}

// TestFakeLoopbackBackend: POST /v1/bw?loopback= runs the test on the
// port named, says the threshold in force, and its result reaches the
// status and the verdict: below min_loopback_gbps LoopbackBandwidthLow
// is a problem naming the port, and a lower threshold (a reload) clears
// it without a new test.
func TestFakeLoopbackBackend(t *testing.T) {
	d := loopbackDaemon(t, config.Health{MinLoopbackGbps: 1e4})
	req, err := service.ParseLoopbackRequest("rxe0:1", "write", 4096, 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	req.Duration = service.MinBandwidthDuration
	b := backend{d}
	res, err := b.Bandwidth(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Loopback || res.Local != "rxe0/1" || res.QPs != 2 || res.MinGbps != 1e4 || !res.Low || res.Gbps <= 0 {
		t.Errorf("result %+v; want rxe0/1's with 2 QPs, below the threshold 10000", res)
	}
	d.applyMail()
	s := d.store.Load()
	if s.Bandwidth == nil || len(s.Bandwidth.Loopback) != 1 || s.Bandwidth.Loopback[0].Local != "rxe0/1" {
		t.Fatalf("status bandwidth %+v; want rxe0/1's loopback result", s.Bandwidth)
	}
	c, _ := s.Health.Condition(apitype.CondLoopbackBandwidth)
	if c.Status != apitype.ConditionProblem || len(c.Objects) != 1 || c.Objects[0] != "rxe0/1" || !strings.Contains(c.Message, "below its threshold 10000.00 Gb/s") {
		t.Errorf("condition %+v; want a problem about rxe0/1 naming the threshold", c)
	}

	// A share of the port's rate: 0.000001 of 10 Gb/s is reached.
	d.health.configure(&config.Config{Health: config.Health{MinLoopbackShare: 1e-6}})
	d.store.Update(func(*apitype.Snapshot) {})
	if c, _ := d.store.Load().Health.Condition(apitype.CondLoopbackBandwidth); c.Status != apitype.ConditionOK || c.Reason != "AtThreshold" {
		t.Errorf("after a lower threshold: %+v; want ok AtThreshold", c)
	}

	// One test at a time: a second test while one runs is refused with
	// what runs.
	done := make(chan error, 1)
	long := req
	long.Duration = time.Second
	go func() {
		_, err := b.Bandwidth(context.Background(), long)
		done <- err
	}()
	for d.bwSlot.Holder() == "" {
		time.Sleep(time.Millisecond)
	}
	if _, err := b.Bandwidth(context.Background(), req); err == nil || !strings.Contains(err.Error(), "a loopback bandwidth test of rxe0 runs on this node already") {
		t.Errorf("a second test during one: %v; want a refusal naming the running test", err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
