package probe

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/probe/probetest"
	"github.com/rdmad/rdmad/probe/ud"
)

// These tests check issue #13 item 9 at the manager: the responder's
// claimed host delay is a figure the peer chooses, so the path's state is
// judged on the round trip this node measured itself, never on the round
// trip minus the claim.

// A delayRun is a Manager probing one fake peer (a probetest.FakeFleet
// answers its control queries) through the in-memory transport, whose
// replies take delay and pass through claim, which sets the responder
// delay each reply claims, on their way to the manager.
type delayRun struct {
	m      *Manager
	last   atomic.Pointer[apitype.Peers]
	cancel context.CancelFunc
	done   chan error
	fleet  *probetest.FakeFleet
}

func startDelayRun(t *testing.T, delay, rttThreshold time.Duration, claim func(rtt time.Duration) time.Duration) *delayRun {
	t.Helper()
	l, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	node := l.LocalAddr().(*net.UDPAddr).AddrPort()
	l.Close()
	tr := probetest.NewMemTransport(1, delay, 0)
	local, _ := tr.Ports()
	fp := scaleFingerprint(local)
	r := &delayRun{done: make(chan error, 1)}
	if r.fleet, err = probetest.StartFleet(1, 1, node, fp.Marshal(), 0); err != nil {
		t.Fatal(err)
	}
	s := Settings{Peers: []Spec{{Name: probetest.FleetAddr(0).String()}}, Port: int(node.Port()),
		Interval: 20 * time.Millisecond, Timeout: 500 * time.Millisecond, Window: 20, MaxPeers: 1, Rotate: time.Hour, Resolve: time.Minute,
		Threshold: Thresholds{DownAfter: 3, UpAfter: 3, LossPct: 5, MinLosses: 2, RTT: rttThreshold}}
	r.m, err = New(Options{Transport: tr, NodeID: 1, ListenHost: node.Addr().String(), Logger: slog.New(slog.DiscardHandler),
		OnState: func(ps apitype.Peers) { r.last.Store(&ps) }, Fingerprint: scaleFingerprint}, s)
	if err != nil {
		r.fleet.Close()
		t.Fatal(err)
	}
	tr.OnReply = func(rep ud.Reply) {
		rep.ResponderDelay = claim(rep.RTT)
		r.m.OnReply(rep)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go tr.Run(ctx)
	go func() { r.done <- r.m.Run(ctx) }()
	t.Cleanup(func() {
		r.cancel()
		if err := <-r.done; err != nil {
			t.Errorf("Run = %v", err)
		}
		r.fleet.Close()
	})
	return r
}

// waitPath waits until the peer's only path has at least n answered
// samples in its window and returns the peer as last published. It asks
// for the figures (Fresh), as the daemon's readers do: without a reader
// the manager publishes only state changes.
func (r *delayRun) waitPath(t *testing.T, n int, limit time.Duration) apitype.Peer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	deadline := time.Now().Add(limit)
	var p apitype.Peer
	for time.Now().Before(deadline) {
		r.m.Fresh(ctx, time.Millisecond)
		if ps := r.last.Load(); ps != nil && len(ps.Peers) == 1 {
			p = ps.Peers[0]
			if len(p.Paths) == 1 && p.Paths[0].Samples-int(p.Paths[0].LossPct*float64(p.Paths[0].Samples)/100) >= n && p.State != apitype.PeerUnknown {
				return p
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("after %v the peer is %+v; want one path with %d answers", limit, p, n)
	return p
}

// TestResponderDelayClaimCannotHideRTT is a peer whose replies claim a host
// delay just under the round trip (1.999 ms of 2 ms): subtracting the
// claim would leave the path a network share of 1 µs, under any RTT
// threshold. The path is judged on the 2 ms this node measured, over the
// 1 ms threshold: degraded. The claim is still shown apart, as the host
// delay, and the RTT figures are the measured ones.
func TestResponderDelayClaimCannotHideRTT(t *testing.T) {
	const rtt, threshold = 2 * time.Millisecond, time.Millisecond
	r := startDelayRun(t, rtt, threshold, func(measured time.Duration) time.Duration { return measured - time.Microsecond })
	p := r.waitPath(t, 2*minRTTSamples, 10*time.Second)
	pa := p.Paths[0]
	if p.State != apitype.PeerDegraded || !strings.Contains(p.Reason, "RTT p99") {
		t.Errorf("peer claiming 1.999 ms of a 2 ms round trip is %s (%q); want degraded for RTT p99 over %v", p.State, p.Reason, threshold)
	}
	if pa.RTTP99 < rtt || pa.RTTP50 < rtt || pa.LastRTT < rtt {
		t.Errorf("path RTT p50 %v p99 %v last %v; want the measured round trip, at least %v", pa.RTTP50, pa.RTTP99, pa.LastRTT, rtt)
	}
	if pa.HostDelayP99 < rtt-2*time.Microsecond {
		t.Errorf("path host delay p99 %v; want the peer's claim (about %v), shown apart", pa.HostDelayP99, rtt)
	}
}

// TestHonestHostDelayCountsInRTT is the behaviour change that comes with
// it: an honest peer whose host really held each probe 1.5 ms of a 2 ms
// round trip is judged on the 2 ms too. A slow responder host shows as a
// slow path (its share is in host_delay_p99).
func TestHonestHostDelayCountsInRTT(t *testing.T) {
	const rtt, hostDelay, threshold = 2 * time.Millisecond, 1500 * time.Microsecond, time.Millisecond
	r := startDelayRun(t, rtt, threshold, func(time.Duration) time.Duration { return hostDelay })
	p := r.waitPath(t, 2*minRTTSamples, 10*time.Second)
	pa := p.Paths[0]
	if p.State != apitype.PeerDegraded || !strings.Contains(p.Reason, "RTT p99") {
		t.Errorf("peer with a 2 ms round trip (1.5 ms of it its host's) is %s (%q); want degraded for RTT p99 over %v", p.State, p.Reason, threshold)
	}
	if d := pa.HostDelayP99 - hostDelay; pa.RTTP99 < rtt || d < -hostDelay/1000 || d > hostDelay/1000 {
		t.Errorf("path RTT p99 %v, host delay p99 %v; want at least %v and %v", pa.RTTP99, pa.HostDelayP99, rtt, hostDelay)
	}
}

// TestFastPathWithRTTThresholdStaysUp keeps the tests above honest: the
// same peer answering within the threshold, with a host delay claimed, is
// up, so the threshold is what degraded the slow ones.
func TestFastPathWithRTTThresholdStaysUp(t *testing.T) {
	const rtt, threshold = 2 * time.Millisecond, time.Second
	r := startDelayRun(t, rtt, threshold, func(measured time.Duration) time.Duration { return measured / 2 })
	p := r.waitPath(t, 2*minRTTSamples, 10*time.Second)
	if p.State != apitype.PeerUp || p.Paths[0].RTTP99 < rtt {
		t.Errorf("peer answering in 2 ms under a 1 s threshold is %s (%q), RTT p99 %v; want up, RTT at least %v", p.State, p.Reason, p.Paths[0].RTTP99, rtt)
	}
}
