//go:build linux && verbsfake

package peer

import (
	"context"
	"fmt"
	"github.com/rdmad/rdmad/probe/ud"
	"maps"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdmad/rdmad/verbs"
)

// These tests run two engines against the fake NIC (-tags verbsfake), each
// on its own device: the scan opens their UD QPs, probes go out through
// address handles, land behind the GRH region of a posted receive, are
// answered and matched, all through the verbs API and its completion
// channels.

type fakeNode struct {
	e       *Engine
	mu      sync.Mutex
	replies []ud.Reply
}

func (n *fakeNode) onReply(r ud.Reply) {
	n.mu.Lock()
	n.replies = append(n.replies, r)
	n.mu.Unlock()
}

func (n *fakeNode) nReplies() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.replies)
}

// fakeNodes adds fake0 and fake1 and runs an engine on each; at the end
// both stop and nothing they made may be left open.
func fakeNodes(t *testing.T) (a, b *fakeNode) {
	t.Helper()
	return fakeNodesFlows(t, 1)
}

// fakeNodesFlows is fakeNodes with flows probe QPs per port.
func fakeNodesFlows(t *testing.T, flows int) (a, b *fakeNode) {
	t.Helper()
	// Cleanups run last first: this one runs after both engines stopped.
	t.Cleanup(func() {
		verbs.FakeReset()
		if live := verbs.FakeLive(); len(live) != 0 {
			t.Errorf("the engines left verbs objects open: %v", live)
		}
	})
	var nodes [2]*fakeNode
	for i, dev := range []string{"fake0", "fake1"} {
		if err := verbs.FakeAddDevice(verbs.FakeDevice{Name: dev}); err != nil {
			t.Fatal(err)
		}
		n := &fakeNode{}
		e, err := New(Config{Devices: []string{dev}, Rescan: 20 * time.Millisecond, RecvSlots: 16, SendSlots: 16, Flows: flows, OnReply: n.onReply})
		if err != nil {
			t.Fatal(err)
		}
		n.e = e
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- e.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			<-done
		})
		nodes[i] = n
	}
	return nodes[0], nodes[1]
}

// port waits for the engine's one probing port.
func (n *fakeNode) port(t *testing.T) ud.LocalPort {
	t.Helper()
	return waitFor(t, "a probing port", func() (ud.LocalPort, bool) {
		ps, _ := n.e.Ports()
		if len(ps) != 1 {
			return ud.LocalPort{}, false
		}
		return ps[0], true
	})
}

func waitFor[T any](t *testing.T, what string, f func() (T, bool)) T {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		v, ok := f()
		if ok {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 10s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

var ctlAddr = netip.MustParseAddr("192.0.2.1")

func TestFakeProbeAndAnswer(t *testing.T) {
	a, b := fakeNodes(t)
	pa, pb := a.port(t), b.port(t)
	if pa.GIDIndex != 3 || pa.QPN == 0 || pa.QKey != a.e.qkey {
		t.Errorf("port %+v: want GID index 3 (RoCE v2, IPv4) and the engine's QPN and qkey", pa)
	}

	// Not admitted yet: B drops the probe.
	ts := []ud.Target{{Dst: pb.Endpoint, Seq: 1}}
	if n := a.e.ProbeBatch(pa.Key, ts); n != 1 || ts[0].Err != nil {
		t.Fatalf("ProbeBatch = %d, %v", n, ts[0].Err)
	}
	waitFor(t, "an unadmitted drop", func() (uint64, bool) { s := b.e.Stats(); return s.Unadmitted, s.Unadmitted == 1 })

	// Admitted: answered, and the reply matches the probe, with the GID
	// of the GRH region the fake wrote and the QPN the adapter reports.
	if err := b.e.Admit(pb.Key, pa.Endpoint, ctlAddr, false, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	for seq := uint64(2); seq < 12; seq++ {
		ts := []ud.Target{{Dst: pb.Endpoint, Seq: seq}}
		if n := a.e.ProbeBatch(pa.Key, ts); n != 1 {
			t.Fatalf("ProbeBatch: %v", ts[0].Err)
		}
	}
	waitFor(t, "10 replies", func() (int, bool) { n := a.nReplies(); return n, n == 10 })
	a.mu.Lock()
	r := a.replies[0]
	a.mu.Unlock()
	if r.Local != pa.Key || r.From.GID != pb.GID || r.From.QPN != pb.QPN || r.Seq != 2 || r.RTT <= 0 || r.ResponderDelay > r.RTT {
		t.Errorf("reply %+v", r)
	}
	if s := b.e.Stats(); s.Answered != 10 || s.Malformed != 0 {
		t.Errorf("responder stats %+v", s)
	}

	// Lost on the way: sent, never answered.
	verbs.FakeDrop(pb.GID, true)
	if n := a.e.ProbeBatch(pa.Key, []ud.Target{{Dst: pb.Endpoint, Seq: 100}}); n != 1 {
		t.Fatal("probe not sent")
	}
	time.Sleep(50 * time.Millisecond)
	if n := a.nReplies(); n != 10 {
		t.Errorf("%d replies after a lost probe, want 10", n)
	}
	if s := a.e.Stats(); s.Sent != 12 || s.Replies != 10 {
		t.Errorf("prober stats %+v", s)
	}
	verbs.FakeDrop(pb.GID, false)
}

// TestFakeRebuild: a send completion in error breaks the port; the scan
// rebuilds it with a new QP, which probes again.
func TestFakeRebuild(t *testing.T) {
	a, b := fakeNodes(t)
	pa, pb := a.port(t), b.port(t)
	if err := verbs.FakeFailWork("fake0", 1, verbs.WCStatus(4)); err != nil { // local protection error
		t.Fatal(err)
	}
	// Unsignalled as it is (every 8th probe asks for a completion), the
	// failed send completes: an error always does.
	a.e.ProbeBatch(pa.Key, []ud.Target{{Dst: pb.Endpoint, Seq: 1}})
	waitFor(t, "a rebuild", func() (uint64, bool) { s := a.e.Stats(); return s.Rebuilds, s.Rebuilds == 1 && s.SendErrors == 1 })
	np := waitFor(t, "the rebuilt port", func() (ud.LocalPort, bool) {
		ps, _ := a.e.Ports()
		if len(ps) != 1 || ps[0].QPN == pa.QPN {
			return ud.LocalPort{}, false
		}
		return ps[0], true
	})
	if err := b.e.Admit(pb.Key, np.Endpoint, ctlAddr, false, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	a.e.ProbeBatch(np.Key, []ud.Target{{Dst: pb.Endpoint, Seq: 50}})
	waitFor(t, "a reply from the rebuilt port", func() (int, bool) { n := a.nReplies(); return n, n == 1 })
}

// TestFakeDeviceGone: a removed device's port goes at the next scan and a
// DEVICE_FATAL one's at once (the device's event reader releases it); the
// device's context is closed and its reader joined, with nothing left.
func TestFakeDeviceGone(t *testing.T) {
	for _, c := range []struct {
		name  string
		fault func() error
		// contexts open afterwards: B's, and for a fatal device that is
		// still listed the one A opens again at once (its QueryDevice
		// fails, so it opens no port on it)
		contexts int
	}{
		{"removed", func() error { return verbs.FakeRemoveDevice("fake0") }, 1},
		{"fatal", func() error { return verbs.FakeDeviceFatal("fake0") }, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, b := fakeNodes(t)
			a.port(t)
			b.port(t)
			if err := c.fault(); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the port closed", func() (int, bool) { ps, _ := a.e.Ports(); return len(ps), len(ps) == 0 })
			// B's engine alone holds objects now: one context, PD, MR,
			// channel, CQ and QP (and no AH: it never sent).
			want := map[string]int{"context": c.contexts, "pd": 1, "mr": 1, "channel": 1, "cq": 1, "qp": 1}
			waitFor(t, fmt.Sprintf("fake0's objects freed (live objects %v)", want), func() (bool, bool) {
				return true, maps.Equal(verbs.FakeLive(), want)
			})
		})
	}
}

// TestFakeFlows: a port with 4 flows has 4 QPs on one CQ; each flow's
// probes leave from its own QP, are answered only once the responder
// admitted that QPN, and come back to it: the reply names the flow, and a
// reply is taken only on the flow that sent the probe.
func TestFakeFlows(t *testing.T) {
	a, b := fakeNodesFlows(t, 4)
	pa, pb := a.port(t), b.port(t)
	if len(pa.Flows) != 4 || pa.Flows[0].QPN != pa.QPN {
		t.Fatalf("flows %+v: want 4, the first the port's QPN %d", pa.Flows, pa.QPN)
	}
	seen := map[uint32]bool{}
	for _, f := range pa.Flows {
		seen[f.QPN] = true
	}
	if len(seen) != 4 {
		t.Fatalf("flows %+v: want 4 distinct QPNs", pa.Flows)
	}
	// One CQ and channel per port, whatever the flows.
	if live := verbs.FakeLive(); live["cq"] != 2 || live["channel"] != 2 || live["qp"] != 8 {
		t.Errorf("live objects %v: want 2 CQs, 2 channels and 8 QPs for two ports of 4 flows", live)
	}
	// Flows 0, 1 and 2 admitted, flow 3 not: its probe is dropped.
	for _, f := range pa.Flows[:3] {
		src := pa.Endpoint
		src.QPN = f.QPN
		if err := b.e.Admit(pb.Key, src, ctlAddr, false, time.Now().Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	ts := make([]ud.Target, 0, 8)
	for i := range 8 {
		ts = append(ts, ud.Target{Dst: pb.Endpoint, Seq: uint64(10 + i), Flow: uint8(i % 4)})
	}
	if n := a.e.ProbeBatch(pa.Key, ts); n != 8 {
		t.Fatalf("ProbeBatch = %d: %+v", n, ts)
	}
	waitFor(t, "6 replies", func() (int, bool) { n := a.nReplies(); return n, n == 6 })
	waitFor(t, "2 unadmitted drops", func() (uint64, bool) { s := b.e.Stats(); return s.Unadmitted, s.Unadmitted == 2 })
	a.mu.Lock()
	for _, r := range a.replies {
		if want := uint8((r.Seq - 10) % 4); r.Flow != want || r.From.QPN != pb.QPN {
			t.Errorf("reply %+v: want flow %d from QPN %d", r, want, pb.QPN)
		}
	}
	a.mu.Unlock()
	// A flow the port does not have is refused, not sent.
	bad := []ud.Target{{Dst: pb.Endpoint, Seq: 30, Flow: 4}}
	if n := a.e.ProbeBatch(pa.Key, bad); n != 0 || bad[0].Err == nil {
		t.Errorf("probe on flow 4 of 4: sent %d, err %v", n, bad[0].Err)
	}
}

// TestFakePortEvents: a port that goes down or comes back is scanned at
// its async event, not at the next rescan (an hour here): its probe QP
// closes and opens within the event's latency.
func TestFakePortEvents(t *testing.T) {
	t.Cleanup(func() {
		verbs.FakeReset()
		if live := verbs.FakeLive(); len(live) != 0 {
			t.Errorf("the engine left verbs objects open: %v", live)
		}
	})
	if err := verbs.FakeAddDevice(verbs.FakeDevice{Name: "fake0"}); err != nil {
		t.Fatal(err)
	}
	e, err := New(Config{Devices: []string{"fake0"}, Rescan: time.Hour, RecvSlots: 16, SendSlots: 16})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	ports := func(want int, what string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			ps, _ := e.Ports()
			if len(ps) == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d probe ports after 5s, want %d", what, len(ps), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	ports(1, "at start")
	if err := verbs.FakeSetPortState("fake0", 1, verbs.PortDown); err != nil {
		t.Fatal(err)
	}
	ports(0, "after the port went down")
	if err := verbs.FakeSetPortState("fake0", 1, verbs.PortActive); err != nil {
		t.Fatal(err)
	}
	ports(1, "after the port came back")
}

// TestFakeGIDChange: rxe's port is ACTIVE again before the kernel has put
// its GIDs back (the partition drill, docs/TESTING.md), so the scan at
// PORT_ACTIVE finds no usable GID. The port opens at the GID_CHANGE that
// follows, not at the next rescan (an hour here).
func TestFakeGIDChange(t *testing.T) {
	t.Cleanup(func() {
		verbs.FakeReset()
		if live := verbs.FakeLive(); len(live) != 0 {
			t.Errorf("the engine left verbs objects open: %v", live)
		}
	})
	if err := verbs.FakeAddDevice(verbs.FakeDevice{Name: "fake0"}); err != nil {
		t.Fatal(err)
	}
	gids, err := verbs.FakeGIDs("fake0", 1)
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(Config{Devices: []string{"fake0"}, Rescan: time.Hour, RecvSlots: 16, SendSlots: 16})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	ports := func(want int, what string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			ps, _ := e.Ports()
			if len(ps) == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d probe ports after 5s, want %d", what, len(ps), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	ports(1, "at start")
	// The link goes down: the port goes, and with it its GIDs.
	if err := verbs.FakeSetPortState("fake0", 1, verbs.PortDown); err != nil {
		t.Fatal(err)
	}
	ports(0, "after the port went down")
	if err := verbs.FakeSetGIDs("fake0", 1, nil); err != nil {
		t.Fatal(err)
	}
	// The link is back: ACTIVE, still without a GID. The scan at the
	// event cannot open the port.
	if err := verbs.FakeSetPortState("fake0", 1, verbs.PortActive); err != nil {
		t.Fatal(err)
	}
	waitFor := time.Now().Add(5 * time.Second)
	for {
		_, perr := e.Ports()
		if perr != nil && strings.Contains(perr.Error(), "no usable GID") {
			break
		}
		if time.Now().After(waitFor) {
			t.Fatalf("after PORT_ACTIVE without a GID: Ports error %v, want no usable GID", perr)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if ps, _ := e.Ports(); len(ps) != 0 {
		t.Fatalf("a port without a GID probes: %+v", ps)
	}
	// The GIDs come back: the port opens at their event.
	if err := verbs.FakeSetGIDs("fake0", 1, gids); err != nil {
		t.Fatal(err)
	}
	ports(1, "after the GIDs came back")
}

// TestFakeAdmissionPoisoning is #41 item 3 through the fake adapter (which
// drops a send whose qkey is not the destination QP's): B admitted A from
// A's control address; a third host keeps naming A's GID and QPN with
// other qkeys, from its own address and spoofing A's. Every one of A's
// probes is still answered, and the answers B sends at the poisoner's
// qkeys are the only ones lost. Before the fix one such query made every
// later answer to A go to the wrong qkey.
func TestFakeAdmissionPoisoning(t *testing.T) {
	a, b := fakeNodes(t)
	pa, pb := a.port(t), b.port(t)
	if err := b.e.Admit(pb.Key, pa.Endpoint, ctlAddr, false, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	poisoners := []netip.Addr{netip.MustParseAddr("192.0.2.66"), ctlAddr, netip.MustParseAddr("192.0.2.67")}
	const rounds = 50
	for seq := uint64(1); seq <= rounds; seq++ {
		bad := pa.Endpoint
		bad.QKey = pa.QKey ^ uint32(seq)
		for _, from := range poisoners {
			if err := b.e.Admit(pb.Key, bad, from, false, time.Now().Add(time.Minute)); err != nil {
				t.Fatal(err)
			}
		}
		// A's own refresh, as its control queries do.
		if seq%10 == 0 {
			if err := b.e.Admit(pb.Key, pa.Endpoint, ctlAddr, false, time.Now().Add(time.Minute)); err != nil {
				t.Fatal(err)
			}
		}
		if n := a.e.ProbeBatch(pa.Key, []ud.Target{{Dst: pb.Endpoint, Seq: seq}}); n != 1 {
			t.Fatal("probe not sent")
		}
		waitFor(t, fmt.Sprintf("reply to probe %d", seq), func() (int, bool) { n := a.nReplies(); return n, n == int(seq) })
	}
	if s := a.e.Stats(); s.Sent != rounds || s.Replies != rounds {
		t.Errorf("prober stats %+v; want every probe answered", s)
	}
}
