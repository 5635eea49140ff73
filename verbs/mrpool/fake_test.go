//go:build linux && verbsfake

package mrpool

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdmad/rdmad/verbs"
)

// These tests register the pool on the fake NIC (-tags verbsfake): real
// memory regions over the classes' memory, whose keys an RC QP then uses.

func unlimited() (verbs.MemlockStatus, error) { return verbs.MemlockStatus{Unlimited: true}, nil }

type goneLog struct {
	mu   sync.Mutex
	why  []string
	seen chan struct{}
}

func (g *goneLog) add(dev, why string) {
	g.mu.Lock()
	g.why = append(g.why, dev+": "+why)
	g.mu.Unlock()
	g.seen <- struct{}{}
}

func fakePool(t *testing.T) (*Pool, *goneLog) {
	t.Helper()
	t.Cleanup(func() {
		verbs.FakeReset()
		if live := verbs.FakeLive(); len(live) != 0 {
			t.Errorf("the pool left verbs objects open: %v", live)
		}
	})
	if err := verbs.FakeAddDevice(verbs.FakeDevice{Name: "fake0"}); err != nil {
		t.Fatal(err)
	}
	g := &goneLog{seen: make(chan struct{}, 4)}
	p, err := New(Config{Classes: []Class{{Size: 4096, Count: 4}, {Size: 65536, Count: 2}}, memlock: unlimited, OnDeviceGone: g.add})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	if err := p.AddDevice("fake0"); err != nil {
		t.Fatal(err)
	}
	return p, g
}

// rdmaWrite writes what src holds into dst with an RC QP pair on the
// pool's own PD, using the buffers' keys: the proof that the regions
// cover the buffers.
func rdmaWrite(t *testing.T, d *DevicePool, src, dst Buf, n int) {
	t.Helper()
	vctx := d.Context()
	cq, err := vctx.NewCQ(8, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cq.Close()
	access := verbs.AccessLocalWrite | verbs.AccessRemoteWrite
	var qps [2]*verbs.QP
	for i := range qps {
		if qps[i], err = d.PD().NewQP(verbs.QPConfig{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq, MaxSendWR: 2, MaxRecvWR: 1}); err != nil {
			t.Fatal(err)
		}
		defer qps[i].Close()
	}
	table, _ := vctx.GIDTable(1)
	gid, _ := verbs.PickGID(table, verbs.LinkLayerEthernet)
	for i, q := range qps {
		path := verbs.Path{Port: 1, GIDIndex: gid.Index, Global: true, MTU: 3, RemoteGID: gid.GID}
		if err := q.Init(1, access, 0); err != nil {
			t.Fatal(err)
		}
		if err := q.ReadyToReceive(path, verbs.Remote{QPN: qps[1-i].Num()}); err != nil {
			t.Fatal(err)
		}
		if err := q.ReadyToSend(0, 14, 7); err != nil {
			t.Fatal(err)
		}
	}
	if err := qps[0].PostSend(verbs.SendWR{ID: 1, Opcode: verbs.OpRDMAWrite, SGE: src.SGE(n), RemoteAddr: dst.Addr(), RKey: dst.RKey(), Signaled: true}); err != nil {
		t.Fatal(err)
	}
	wcs := make([]verbs.WorkCompletion, 1)
	if k, err := cq.Poll(wcs); k != 1 || err != nil || wcs[0].Err() != nil {
		t.Fatalf("WRITE between pool buffers: %d completions, %v, %+v", k, err, wcs[0])
	}
}

func TestFakePool(t *testing.T) {
	p, _ := fakePool(t)
	d := p.Device("fake0")
	if live := verbs.FakeLive(); live["mr"] != 2 || live["pd"] != 1 || live["context"] != 1 {
		t.Errorf("live objects %v, want one MR per class, one PD, one context", live)
	}
	var held []Buf
	for range 6 {
		b, ok := d.Get(4096)
		if !ok {
			t.Fatal("Get failed before the pool was exhausted")
		}
		held = append(held, b)
	}
	// Exhausted: the 4 KiB buffers, then the 64 KiB ones they fell back to.
	if _, ok := d.Get(1); ok {
		t.Error("Get succeeded on an exhausted pool")
	}
	if _, ok := d.Get(1 << 20); ok {
		t.Error("Get succeeded for more than the largest class")
	}
	copy(held[0].Bytes(), "pooled bytes")
	rdmaWrite(t, d, held[0], held[5], 12)
	if got := string(held[5].Bytes()[:12]); got != "pooled bytes" {
		t.Errorf("the WRITE moved %q", got)
	}
	for _, b := range held {
		d.Put(b)
	}
	p.Tick() // the canary registers and deregisters once
	st := p.Stats()
	if len(st) != 1 || !st[0].Registered || st[0].RegisteredBytes != 4*4096+2*65536 || st[0].Failures != 2 || st[0].TooLarge != 1 ||
		st[0].Canary.Registrations != 1 || st[0].Canary.LastError != "" {
		t.Errorf("stats %+v", st)
	}
	if live := verbs.FakeLive(); live["mr"] != 2 || live["qp"] != 0 || live["cq"] != 0 {
		t.Errorf("live objects %v after the WRITE and the canary, want the classes' 2 MRs", live)
	}
}

// TestFakePoolDeviceGone: a removed device (seen by Tick) and a fatal one
// (seen by the pool's event reader) are let go at once, reported, and
// registered again when the device is back.
func TestFakePoolDeviceGone(t *testing.T) {
	p, g := fakePool(t)
	b, ok := p.Device("fake0").Get(100)
	if !ok {
		t.Fatal("Get failed")
	}
	if err := verbs.FakeRemoveDevice("fake0"); err != nil {
		t.Fatal(err)
	}
	p.Tick()
	<-g.seen
	if p.Device("fake0") != nil {
		t.Error("the removed device is still registered")
	}
	if live := verbs.FakeLive(); len(live) != 0 {
		t.Errorf("the removed device's objects are open: %v", live)
	}
	// A buffer held across the removal stays mapped until it is Put.
	copy(b.Bytes(), "still mapped")
	b.c.d.Put(b)

	if err := verbs.FakeAddDevice(verbs.FakeDevice{Name: "fake0"}); err != nil {
		t.Fatal(err)
	}
	p.Tick()
	if p.Device("fake0") == nil {
		t.Fatal("the returned device was not registered again")
	}
	if err := verbs.FakeDeviceFatal("fake0"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-g.seen:
	case <-time.After(10 * time.Second):
		t.Fatal("DEVICE_FATAL was not acted on within 10s")
	}
	if p.Device("fake0") != nil {
		t.Error("the fatal device is still registered")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.why) != 2 || !strings.Contains(g.why[0], "uverbs node is gone") || !strings.Contains(g.why[1], "DEVICE_FATAL") {
		t.Errorf("OnDeviceGone saw %q", g.why)
	}
	// After DEVICE_FATAL the device is still listed but every verb fails:
	// the next Tick's AddDevice fails and says so.
	p.Tick()
	if st := p.Stats(); len(st) != 1 || st[0].Registered || st[0].LastError == "" {
		t.Errorf("stats after a failed re-add %+v", st)
	}
}

// TestFakePoolRun: Run's first Tick registers the canary on the device.
func TestFakePoolRun(t *testing.T) {
	p, _ := fakePool(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for p.Stats()[0].Canary.Registrations == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v", err)
	}
	if p.Stats()[0].Canary.Registrations == 0 {
		t.Error("Run registered no canary")
	}
}

// TestFakePoolRunWaitsForDeviceEvents: while the only wanted device has
// no verbs, Run does not retry it every canary interval (only a device
// event, on which the daemon calls Tick, can bring it); once the event's
// Tick registers it, the canary runs every interval again.
func TestFakePoolRunWaitsForDeviceEvents(t *testing.T) {
	t.Cleanup(verbs.FakeReset)
	p, err := New(Config{Classes: []Class{{Size: 4096, Count: 4}}, memlock: unlimited, CanaryInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.AddDevice("fake1"); !errors.Is(err, verbs.ErrNoDevice) && !errors.Is(err, verbs.ErrUnavailable) {
		t.Fatalf("AddDevice of a device the fake NIC lacks = %v; want no device", err)
	}
	defer runPool(t, p)()
	time.Sleep(50 * time.Millisecond) // Run's first round
	// The device comes, but nobody says so: a round every 10 ms would
	// register it at once.
	if err := verbs.FakeAddDevice(verbs.FakeDevice{Name: "fake1"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if p.Device("fake1") != nil {
		t.Fatal("Run retried a device without verbs at the canary's interval; want it to wait for a device event")
	}
	p.Tick() // the daemon's answer to the device's uevent
	if p.Device("fake1") == nil {
		t.Fatal("Tick did not register the device that came")
	}
	deadline := time.Now().Add(10 * time.Second)
	for p.Stats()[0].Canary.Registrations < 5 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := p.Stats()[0].Canary.Registrations; n < 5 {
		t.Errorf("%d canary registrations since the device came; want one every 10 ms again", n)
	}
}

// TestFakePoolRunRetriesAReturningDevice: a device that was registered
// and went away is tried again every canary interval, without a device
// event, and registered when it returns (the VM suite's
// TestProbeDeviceRemoval does so with rxe).
func TestFakePoolRunRetriesAReturningDevice(t *testing.T) {
	t.Cleanup(verbs.FakeReset)
	if err := verbs.FakeAddDevice(verbs.FakeDevice{Name: "fake2"}); err != nil {
		t.Fatal(err)
	}
	p, err := New(Config{Classes: []Class{{Size: 4096, Count: 4}}, memlock: unlimited, CanaryInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.AddDevice("fake2"); err != nil {
		t.Fatal(err)
	}
	defer runPool(t, p)()
	if err := verbs.FakeRemoveDevice("fake2"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for p.Device("fake2") != nil && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if p.Device("fake2") != nil {
		t.Fatal("the removed device is still registered")
	}
	time.Sleep(50 * time.Millisecond) // rounds that find it gone
	if err := verbs.FakeAddDevice(verbs.FakeDevice{Name: "fake2"}); err != nil {
		t.Fatal(err)
	}
	for p.Device("fake2") == nil && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if p.Device("fake2") == nil {
		t.Error("Run did not register the device when it returned")
	}
}

// runPool runs p.Run until the function it returns is called, which
// checks that Run ended for that.
func runPool(t *testing.T, p *Pool) func() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run = %v", err)
		}
	}
}
