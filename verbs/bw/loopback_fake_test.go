//go:build linux && verbsfake

package bw

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/probe/wire"
	"github.com/rdmad/rdmad/verbs"
)

// fakeLoopback adds the fake RoCE device and checks at the end that
// nothing was left open.
func fakeLoopback(t *testing.T) {
	t.Helper()
	if err := verbs.FakeAddDevice(loopbackDevice()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		verbs.FakeReset()
		if live := verbs.FakeLive(); len(live) != 0 {
			t.Errorf("the test left verbs objects open: %v", live)
		}
	})
}

// TestFakeLoopbackBandwidth runs loopback tests of the fake port with one
// and several queue pairs: every operation moves exactly the bytes the
// result reports, everything is freed after each test, and the node keeps each port's last result.
func TestFakeLoopbackBandwidth(t *testing.T) {
	fakeLoopback(t)
	n := New(Config{NodeID: 1})
	defer n.Close()
	changes := 0
	n.cfg.OnChange = func() { changes++ }
	for _, op := range []wire.BWOp{wire.BWWrite, wire.BWRead, wire.BWSend} {
		for _, qps := range []int{1, 4} {
			before := verbs.FakeBytesMoved()
			res, err := n.RunLoopback(context.Background(), LoopbackRequest{Device: "fake0", Port: 1, Op: op, Size: 4096, Duration: wire.MinBWDuration, QPs: qps})
			if err != nil {
				t.Fatalf("%s, %d QPs: %v", op, qps, err)
			}
			moved := verbs.FakeBytesMoved() - before
			if !res.Loopback || res.QPs != qps || res.Op != op.String() || res.Messages == 0 || res.Bytes != res.Messages*4096 ||
				res.Bytes != moved || res.Gbps <= 0 || res.Local != "fake0/1" || res.Time.IsZero() {
				t.Errorf("%s, %d QPs: result %+v; the fake moved %d bytes", op, qps, res, moved)
			}
			if b := n.busyWith(); b != "" {
				t.Errorf("%s, %d QPs: the slot is still held by %q after the test", op, qps, b)
			}
			if live := verbs.FakeLive(); len(live) != 0 {
				t.Errorf("%s, %d QPs: verbs objects left open after the test: %v", op, qps, live)
			}
		}
	}
	last := n.LoopbackResults()
	if len(last) != 1 || last["fake0/1"].Op != "send" || last["fake0/1"].QPs != 4 {
		t.Errorf("LoopbackResults = %+v; want the last test (send, 4 QPs) of fake0/1", last)
	}
	if st := n.Status(); len(st.Loopback) != 1 || st.Loopback[0].Local != "fake0/1" {
		t.Errorf("Status().Loopback = %+v; want fake0/1's last test", st.Loopback)
	}
	if changes != 6 {
		t.Errorf("OnChange called %d times for 6 tests", changes)
	}
	// Any device: the first with an ACTIVE port.
	if res, err := n.RunLoopback(context.Background(), LoopbackRequest{Op: wire.BWWrite, Size: 65536, Duration: wire.MinBWDuration}); err != nil || res.Local != "fake0/1" || res.QPs != 1 {
		t.Errorf("RunLoopback on any device = %+v, %v; want fake0/1 with 1 QP", res, err)
	}
}

// TestFakeLoopbackRefusals: parameters out of bounds, a device or port
// that is not there or not ACTIVE are refused with an error naming them,
// before the test slot is taken or anything is left allocated.
func TestFakeLoopbackRefusals(t *testing.T) {
	fakeLoopback(t)
	n := New(Config{NodeID: 1})
	defer n.Close()
	ok := LoopbackRequest{Device: "fake0", Op: wire.BWWrite, Size: 4096, Duration: wire.MinBWDuration}
	with := func(f func(r *LoopbackRequest)) LoopbackRequest {
		r := ok
		f(&r)
		return r
	}
	if err := verbs.FakeAddDevice(verbs.FakeDevice{Name: "fake1"}); err != nil {
		t.Fatal(err)
	}
	if err := verbs.FakeSetPortState("fake1", 1, verbs.PortDown); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		r    LoopbackRequest
		want string
	}{
		{with(func(r *LoopbackRequest) { r.QPs = MaxQPs + 1 }), "17 queue pairs is out of range; use 1 to 16"},
		{with(func(r *LoopbackRequest) { r.QPs = -1 }), "-1 queue pairs is out of range"},
		{with(func(r *LoopbackRequest) { r.Size = wire.MaxBWSize + 1 }), "size 1048577 bytes is out of range"},
		{with(func(r *LoopbackRequest) { r.Duration = time.Hour }), "duration 1h0m0s is out of range"},
		{with(func(r *LoopbackRequest) { r.Op = 9 }), "operation 9"},
		{with(func(r *LoopbackRequest) { r.Device, r.Port = "", 1 }), "name a device and its port"},
		{with(func(r *LoopbackRequest) { r.Device = "nosuch0" }), "nosuch0"},
		{with(func(r *LoopbackRequest) { r.Port = 2 }), "fake0 has no port 2"},
		{with(func(r *LoopbackRequest) { r.Device, r.Port = "fake1", 1 }), "fake1/1 is DOWN, not ACTIVE"},
	} {
		_, err := n.RunLoopback(context.Background(), c.r)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("RunLoopback(%+v) = %v; want an error containing %q", c.r, err, c.want)
		}
		if b := n.busyWith(); b != "" {
			t.Errorf("RunLoopback(%+v) left the slot held by %q", c.r, b)
		}
	}
	if len(n.LoopbackResults()) != 0 {
		t.Errorf("refused tests left results: %+v", n.LoopbackResults())
	}
}

// TestFakeLoopbackOneTestAtATime: a loopback test takes the node's one
// test slot (shared by the nodes made with it). While it runs, a peer test from this node and a peer's
// request to this node are refused (busy), and while a peer test runs
// (as requester or responder) a loopback test is refused with an error
// that names what runs.
func TestFakeLoopbackOneTestAtATime(t *testing.T) {
	fakeLoopback(t)
	resp := New(Config{NodeID: 2})
	resp.SetEnabled(true)
	defer resp.Close()
	peer := serveControl(t, resp)
	n := New(Config{NodeID: 1})
	n.SetEnabled(true)
	defer n.Close()

	// A loopback test runs: the rest is refused.
	done := make(chan error, 1)
	go func() {
		_, err := n.RunLoopback(context.Background(), LoopbackRequest{Device: "fake0", Op: wire.BWWrite, Size: 4096, Duration: time.Second, QPs: 2})
		done <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for n.busyWith() == "" && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	_, err := n.Run(context.Background(), Request{Peer: peer, Op: wire.BWWrite, Size: 4096, Duration: wire.MinBWDuration})
	var be *BusyError
	if !errors.As(err, &be) || !strings.Contains(err.Error(), "a loopback bandwidth test of fake0 runs on this node already") {
		t.Errorf("peer test during a loopback test = %v; want a BusyError naming the loopback test", err)
	}
	ans, _ := n.Handle(from, request(wire.BWWrite, 65536, time.Second))
	if status(t, ans) != wire.BWBusy {
		t.Errorf("a peer's request during a loopback test got status %d; want busy", status(t, ans))
	}
	// A node that shares the slot (the daemon's peer runner beside its
	// loopback tests) refuses too.
	runner := New(Config{NodeID: 3, Slot: n.slot})
	runner.SetEnabled(true)
	defer runner.Close()
	if ans, _ := runner.Handle(from, request(wire.BWWrite, 65536, time.Second)); status(t, ans) != wire.BWBusy {
		t.Errorf("a peer's request to a node sharing the slot got status %d; want busy", status(t, ans))
	}
	_, err = n.RunLoopback(context.Background(), LoopbackRequest{Op: wire.BWWrite, Size: 4096, Duration: wire.MinBWDuration})
	if !IsBusy(err) {
		t.Errorf("a second loopback test = %v; want a BusyError", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the loopback test: %v", err)
	}

	// This node serves a peer's test: a loopback test is refused.
	if err := resp.acquire("a bandwidth test for 192.0.2.18"); err != nil {
		t.Fatal(err)
	}
	_, err = resp.RunLoopback(context.Background(), LoopbackRequest{Op: wire.BWWrite, Size: 4096, Duration: wire.MinBWDuration})
	if !IsBusy(err) || !strings.Contains(err.Error(), "a bandwidth test for 192.0.2.18 runs on this node already") {
		t.Errorf("loopback test while serving a peer = %v; want a BusyError naming the peer's test", err)
	}
	resp.release()

	// This node runs a peer test: a loopback test is refused.
	go func() {
		_, err := n.Run(context.Background(), Request{Peer: peer, Op: wire.BWWrite, Size: 4096, Duration: time.Second})
		done <- err
	}()
	for !strings.HasPrefix(n.busyWith(), "a bandwidth test to") && time.Now().Before(deadline.Add(5*time.Second)) {
		time.Sleep(time.Millisecond)
	}
	_, err = n.RunLoopback(context.Background(), LoopbackRequest{Op: wire.BWWrite, Size: 4096, Duration: wire.MinBWDuration})
	if !IsBusy(err) || !strings.Contains(err.Error(), "a bandwidth test to 127.0.0.1 runs on this node already") {
		t.Errorf("loopback test during a peer test = %v; want a BusyError naming the peer test", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the peer test: %v", err)
	}
}

// TestQPSetFailsMidBuild: a queue pair set whose build fails (its buffer
// refused first, or its QP after the buffer, the PD, the MR and the CQ
// exist) returns the error and releases what it built. Its deferred
// cleanup used to close the nil that every "return nil, err" had already
// put in the result, as the loopback prober's session did in the VM's
// flapping drill.
func TestQPSetFailsMidBuild(t *testing.T) {
	fakeLoopback(t)
	p, err := openDevicePort("fake0", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer p.vctx.Close()
	for _, tc := range []struct {
		name         string
		size, sendWR int
	}{{"no buffer", 0, 4}, {"QP refused", 4096, 1 << 20}} {
		s, err := newQPSet(p, tc.size, verbs.AccessLocalWrite, 16, tc.sendWR, 4, true)
		if err == nil || s != nil {
			t.Errorf("%s: newQPSet = %v, %v; want an error and no set", tc.name, s, err)
		}
		// Only the port's own context may remain.
		live := verbs.FakeLive()
		delete(live, "context")
		if len(live) != 0 {
			t.Errorf("%s: a failed build left verbs objects open: %v", tc.name, live)
		}
	}
}
