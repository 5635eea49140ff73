//go:build linux && verbsfake

package loopback

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rdmad/rdmad/verbs"
)

// These tests run the prober against the fake NIC (-tags verbsfake): real
// QPs, memory regions and completion channels of the verbs API, bytes
// moved and completions polled and waited for as on a device.

// fakeRun adds fake0, starts a Runner with cfg on it and returns it with a
// function that stops it. At the end of the test the Runner is stopped and
// nothing it made may be left open.
func fakeRun(t *testing.T, cfg Config) (*results, *events) {
	t.Helper()
	if err := verbs.FakeAddDevice(verbs.FakeDevice{Name: "fake0"}); err != nil {
		t.Fatal(err)
	}
	ev := &events{}
	cfg.OnAsyncEvent = ev.add
	res := &results{}
	cfg.OnResult = res.add
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		verbs.FakeReset()
		if live := verbs.FakeLive(); len(live) != 0 {
			t.Errorf("the prober left verbs objects open: %v", live)
		}
	})
	res.r = r
	return res, ev
}

// results records every result the Runner hands to OnResult: a test looks
// for the one it expects among them, which a later round may already have
// replaced in the Snapshot.
type results struct {
	r    *Runner
	mu   sync.Mutex
	list []PortResult
}

func (rs *results) add(p PortResult) {
	rs.mu.Lock()
	rs.list = append(rs.list, p)
	rs.mu.Unlock()
}

type events struct {
	mu  sync.Mutex
	evs []verbs.AsyncEvent
}

func (e *events) add(ev verbs.AsyncEvent) {
	e.mu.Lock()
	e.evs = append(e.evs, ev)
	e.mu.Unlock()
}

// waitPort waits for a result of fake0 port 1 that satisfies ok, among
// those that came after the one it returned last, and returns it.
func waitPort(t *testing.T, rs *results, what string, ok func(PortResult) bool) PortResult {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var last PortResult
	for next := 0; time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		rs.mu.Lock()
		list := rs.list[next:]
		rs.mu.Unlock()
		for i, p := range list {
			if p.Device != "fake0" || p.Port != 1 {
				continue
			}
			last = p
			if ok(p) {
				rs.mu.Lock()
				rs.list = rs.list[next+i+1:]
				rs.mu.Unlock()
				return p
			}
		}
		next += len(list)
	}
	t.Fatalf("fake0 port 1 never became %s; last result %+v", what, last)
	return last
}

func probeGID(t *testing.T) verbs.GID {
	t.Helper()
	c, err := verbs.Open("fake0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	table, err := c.GIDTable(1)
	if err != nil {
		t.Fatal(err)
	}
	g, _ := verbs.PickGID(table, verbs.LinkLayerEthernet)
	return g.GID
}

func healthy(rounds uint64) func(PortResult) bool {
	return func(p PortResult) bool {
		return p.State == StateOK && p.Write.Count >= rounds && p.Read.Count >= rounds && p.Send.Count >= rounds && p.Warmup.Count >= rounds
	}
}

func TestFakeRounds(t *testing.T) {
	r, _ := fakeRun(t, Config{Interval: 10 * time.Millisecond})
	p := waitPort(t, r, "ok after 3 rounds", healthy(3))
	if p.Failures != 0 || p.PortState != "ACTIVE" || p.GIDType != "RoCE v2" || p.Write.LastRTT <= 0 || p.Send.P99 <= 0 {
		t.Errorf("result %+v", p)
	}
	// Every successful operation is in its histogram, and nothing else.
	for name, op := range map[string]OpStats{"write": p.Write, "read": p.Read, "send": p.Send, "warmup": p.Warmup} {
		var inBuckets uint64
		for _, n := range op.RTTHist.Buckets {
			inBuckets += n
		}
		if op.RTTHist.Count != op.Count || inBuckets > op.Count || op.RTTHist.Sum <= 0 {
			t.Errorf("%s: histogram counts %d (%d in finite buckets, sum %v), the operation %d", name, op.RTTHist.Count, inBuckets, op.RTTHist.Sum, op.Count)
		}
	}
}

// TestFakeTimeout: the port's packets are lost, so the WRITE is retried
// past the round's timeout (ACK timeout 14: 67 ms, 8 tries); the round
// fails as a timeout, the QPs are rebuilt, and when packets flow again
// the port is ok.
func TestFakeTimeout(t *testing.T) {
	r, _ := fakeRun(t, Config{Interval: 100 * time.Millisecond, Timeout: 50 * time.Millisecond})
	waitPort(t, r, "ok", healthy(1))
	g := probeGID(t)
	verbs.FakeDrop(g, true)
	p := waitPort(t, r, "failed with a timeout", func(p PortResult) bool { return p.ErrorKind == KindTimeout })
	if p.State != StateFailed || p.Failures == 0 {
		t.Errorf("result %+v", p)
	}
	verbs.FakeDrop(g, false)
	p = waitPort(t, r, "ok again", func(p PortResult) bool { return p.State == StateOK && p.QPRecreated > 0 })
	t.Logf("after the loss: %d rounds, %d failures, QPs rebuilt %d times", p.Rounds, p.Failures, p.QPRecreated)
}

// TestFakeQPErrors: a QP moved to ERR (the prober's own injection) and a
// work completion in error both fail the round as qp_error, and the QPs
// are rebuilt.
func TestFakeQPErrors(t *testing.T) {
	r, _ := fakeRun(t, Config{Interval: 10 * time.Millisecond})
	waitPort(t, r, "ok", healthy(1))
	for i, inject := range []func(){
		func() { r.r.InjectQPError("fake0", 1) },
		func() { verbs.FakeFailWork("fake0", 1, verbs.WCStatus(12)) }, // transport retry counter exceeded
	} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			before := waitPort(t, r, "ok", healthy(1))
			inject()
			p := waitPort(t, r, "failed with a QP error", func(p PortResult) bool { return p.Failures > before.Failures })
			if p.ErrorKind != KindQPError {
				t.Errorf("failure %q (%s), want qp_error", p.ErrorKind, p.LastError)
			}
			waitPort(t, r, "ok with the QPs rebuilt", func(p PortResult) bool { return p.State == StateOK && p.QPRecreated > before.QPRecreated })
		})
	}
}

// TestFakeDeviceGone: a device that vanishes mid-probe (its uverbs node
// gone, as rdma link del of rxe) or reports DEVICE_FATAL is closed, with
// everything the prober made on it, and its ports reported device_gone.
func TestFakeDeviceGone(t *testing.T) {
	for _, c := range []struct {
		name  string
		fault func() error
	}{
		{"removed", func() error { return verbs.FakeRemoveDevice("fake0") }},
		{"fatal", func() error { return verbs.FakeDeviceFatal("fake0") }},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, ev := fakeRun(t, Config{Interval: 10 * time.Millisecond})
			waitPort(t, r, "ok", healthy(1))
			if err := c.fault(); err != nil {
				t.Fatal(err)
			}
			p := waitPort(t, r, "device_gone", func(p PortResult) bool { return p.ErrorKind == KindDeviceGone })
			if p.State != StateUnavailable {
				t.Errorf("result %+v", p)
			}
			deadline := time.Now().Add(5 * time.Second)
			for len(verbs.FakeLive()) != 0 && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			if live := verbs.FakeLive(); len(live) != 0 {
				t.Errorf("the gone device's objects are still open while the prober runs: %v", live)
			}
			if c.name == "fatal" {
				ev.mu.Lock()
				defer ev.mu.Unlock()
				if len(ev.evs) == 0 || ev.evs[len(ev.evs)-1].Type != verbs.EventDeviceFatal {
					t.Errorf("OnAsyncEvent saw %v, want DEVICE_FATAL last", ev.evs)
				}
			}
		})
	}
}

// TestFakeRescan: a device whose probing ended (it went away and came
// back) is started again Config.Rescan after its run ended, without a
// Rescan call and not sooner (a device that fails as it opens is not
// retried in a loop). A device that appears is the daemon's uevents'
// (Rescan); the fake's devices are not in /sys/class/infiniband_verbs,
// which is what a rescan looks at first, so that part is the e2e tests'.
func TestFakeRescan(t *testing.T) {
	const rescan = 300 * time.Millisecond
	r, _ := fakeRun(t, Config{Interval: 10 * time.Millisecond, Rescan: rescan})
	waitPort(t, r, "ok", healthy(1))
	if err := verbs.FakeRemoveDevice("fake0"); err != nil {
		t.Fatal(err)
	}
	waitPort(t, r, "device_gone", func(p PortResult) bool { return p.ErrorKind == KindDeviceGone })
	gone := time.Now()
	if err := verbs.FakeAddDevice(verbs.FakeDevice{Name: "fake0"}); err != nil {
		t.Fatal(err)
	}
	waitPort(t, r, "ok again", healthy(1))
	// The run ended before its device_gone result was seen, so the
	// restart may come a little sooner than rescan after that.
	if d := time.Since(gone); d < rescan/2 {
		t.Errorf("fake0 probed again %v after it went away, want about %v (Config.Rescan)", d, rescan)
	}
}

// TestNewSessionFailsMidBuild: a session whose build fails after its QPs
// exist (here the path's MTU is refused at ReadyToReceive, as a port going
// down between two verbs refuses it) returns the error and releases what
// it had built. It used to close a nil session from its deferred cleanup
// (every "return nil, err" sets the named result first): rdmad crashed in
// the VM's flapping drill.
func TestNewSessionFailsMidBuild(t *testing.T) {
	if err := verbs.FakeAddDevice(verbs.FakeDevice{Name: "fake0"}); err != nil {
		t.Fatal(err)
	}
	defer verbs.FakeReset()
	vctx, err := verbs.Open("fake0")
	if err != nil {
		t.Fatal(err)
	}
	pa, err := vctx.QueryPort(1)
	if err != nil {
		t.Fatal(err)
	}
	pa.ActiveMTU = 0 // no valid path MTU: ReadyToReceive refuses it
	s, err := newSession(vctx, 1, pa, 0, Config{Payload: 64, Timeout: time.Second})
	if err == nil || s != nil {
		t.Fatalf("newSession with MTU 0 = %v, %v; want an error and no session", s, err)
	}
	vctx.Close()
	if live := verbs.FakeLive(); len(live) != 0 {
		t.Errorf("a failed session build left verbs objects open: %v", live)
	}
}
