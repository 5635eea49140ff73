// Package probetest holds the stand-ins the peer engine is measured
// with on a host without RDMA: MemTransport, a probe.Transport that
// answers probes in memory, and FakeFleet, the peers' control endpoints in
// a process of their own. The benchmarks of probe (BenchmarkPeers*At1Hz)
// and the soak (test/soak) use them; production code never does.
//
// The package does not import probe, so that probe's own tests can use
// it.
package probetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmad/rdmad/probe/ud"
	"github.com/rdmad/rdmad/probe/wire"
)

// A MemTransport is a probe.Transport in memory: every probe is
// answered after a delay, except a share of them (the loss), by one
// goroutine (Run) that delivers the replies due together, as verbs/peer's
// completion loop takes a batch, woken once per batch by a timer that
// ProbeBatch arms. Every reply claims ResponderDelay of host delay.
type MemTransport struct {
	// OnReply receives every reply, from Run's goroutine; set it before
	// Run starts. It must not block.
	OnReply func(ud.Reply)

	ports []ud.LocalPort
	delay time.Duration
	loss  uint64 // probes without reply per 2^32

	mu      sync.Mutex
	q       []pendingReply // ring
	head, n int
	rng     rand.PCG
	timer   *time.Timer    // fires when the first reply falls due
	armed   bool           // timer is set for the first reply
	batch   []pendingReply // Run's; made with the transport, so not counted as the node's memory

	sent, lost, admits atomic.Uint64
	maxBatch, largest  atomic.Int64
}

type pendingReply struct {
	r    ud.Reply
	sent time.Time
}

// ResponderDelay is the host delay every MemTransport reply claims.
const ResponderDelay = 5 * time.Microsecond

// NewMemTransport returns a transport with ports local probe ports
// ("mem0/1", "mem1/1", ...) that answers each probe after delay and loses
// the share loss (0 to 1) of them.
func NewMemTransport(ports int, delay time.Duration, loss float64) *MemTransport {
	t := &MemTransport{delay: delay, loss: uint64(loss * (1 << 32)), q: make([]pendingReply, 1024), batch: make([]pendingReply, 0, 1024), timer: time.NewTimer(time.Hour)}
	t.timer.Stop()
	t.rng.Seed(1, 2)
	for i := range ports {
		t.ports = append(t.ports, ud.LocalPort{Key: fmt.Sprintf("mem%d/1", i), Device: fmt.Sprintf("mem%d", i), Port: 1, LinkLayer: "Ethernet",
			Endpoint: ud.Endpoint{GID: [16]byte{10: 0xff, 11: 0xff, 12: 10, 13: 0, 14: 0, 15: byte(i + 1)}, QPN: uint32(0x10 + i), QKey: 0x1234}})
	}
	return t
}

// SetFlows gives every port k probe flows ([probe] flows; flow 0 is the
// port's QPN): the replies name the flow their probe went on. Call it
// before the transport is used.
func (t *MemTransport) SetFlows(k int) {
	for i := range t.ports {
		p := &t.ports[i]
		p.Flows = nil
		for f := range k {
			qpn := p.QPN
			if f > 0 {
				qpn = uint32(0x100*(i+1) + f)
			}
			p.Flows = append(p.Flows, ud.Flow{QPN: qpn, SourcePort: uint16(0xc000 + 0x100*i + f)})
		}
	}
}

// Ports returns the local probe ports; never an error.
func (t *MemTransport) Ports() ([]ud.LocalPort, error) { return t.ports, nil }

// Admit counts the admission; the memory transport answers nobody else's
// probes.
func (t *MemTransport) Admit(local string, src ud.Endpoint, from netip.Addr, authenticated bool, until time.Time) error {
	t.admits.Add(1)
	return nil
}

// SetMaxBatch makes MaxBatch return n (0: no bound), as verbs/peer's
// Engine bounds a batch by its slots; set it before the manager is made.
func (t *MemTransport) SetMaxBatch(n int) { t.maxBatch.Store(int64(n)) }

// MaxBatch returns the bound SetMaxBatch set, or a very large one.
func (t *MemTransport) MaxBatch() int {
	if n := t.maxBatch.Load(); n > 0 {
		return int(n)
	}
	return 1 << 30
}

// LargestBatch returns the most probes one ProbeBatch carried.
func (t *MemTransport) LargestBatch() int { return int(t.largest.Load()) }

// ProbeBatch takes every probe of ts and queues its reply, unless it is
// lost.
func (t *MemTransport) ProbeBatch(local string, ts []ud.Target) int {
	for n, l := int64(len(ts)), t.largest.Load(); n > l && !t.largest.CompareAndSwap(l, n); l = t.largest.Load() {
		// The ports' posters call this concurrently.
	}
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range ts {
		ts[i].Err = nil
		t.sent.Add(1)
		if t.rng.Uint64()&(1<<32-1) < t.loss {
			t.lost.Add(1)
			continue
		}
		if t.n == len(t.q) {
			q := make([]pendingReply, 2*len(t.q))
			for k := range t.n {
				q[k] = t.q[(t.head+k)%len(t.q)]
			}
			t.q, t.head = q, 0
		}
		t.q[(t.head+t.n)%len(t.q)] = pendingReply{r: ud.Reply{Local: local, Flow: ts[i].Flow, From: ud.Endpoint{GID: ts[i].Dst.GID, QPN: ts[i].Dst.QPN},
			Seq: ts[i].Seq, ResponderDelay: ResponderDelay, Authenticated: ts[i].Auth}, sent: now}
		t.n++
	}
	if t.n > 0 && !t.armed {
		t.timer.Reset(t.delay)
		t.armed = true
	}
	return len(ts)
}

// Run delivers the replies to OnReply as they fall due, until ctx is done;
// it returns nil then. Run it once.
func (t *MemTransport) Run(ctx context.Context) error {
	defer t.timer.Stop()
	batch := t.batch
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.timer.C:
		}
		now := time.Now()
		t.mu.Lock()
		t.armed = false
		for t.n > 0 {
			p := &t.q[t.head]
			if d := p.sent.Add(t.delay).Sub(now); d > 0 {
				t.timer.Reset(d)
				t.armed = true
				break
			}
			batch = append(batch, *p)
			*p = pendingReply{}
			t.head = (t.head + 1) % len(t.q)
			t.n--
		}
		t.mu.Unlock()
		for i := range batch {
			r := batch[i].r
			r.At, r.RTT = now, max(now.Sub(batch[i].sent), ResponderDelay)
			t.OnReply(r)
			batch[i] = pendingReply{}
		}
		batch = batch[:0]
	}
}

// Sent returns how many probes the transport took.
func (t *MemTransport) Sent() uint64 { return t.sent.Load() }

// Lost returns how many of the probes taken were left unanswered on
// purpose (the loss rate).
func (t *MemTransport) Lost() uint64 { return t.lost.Load() }

// Admits returns how many admissions were asked for.
func (t *MemTransport) Admits() uint64 { return t.admits.Load() }

// Fingerprint is the fingerprint of a node with the given probe ports in
// a homogeneous fleet (every fake peer sends it): the benchmarks give it
// to the node as well, so that no peer differs.
func Fingerprint(ports []ud.LocalPort) wire.Fingerprint {
	f := wire.Fingerprint{Version: "0.0.0-bench", Kernel: "6.1.0-bench-amd64"}
	for i, lp := range ports {
		f.Ports = append(f.Ports, wire.FingerprintPort{Index: uint8(i), Key: lp.Key, Netdev: fmt.Sprintf("eth%d", i), NetdevMTU: 4200, ActiveMTU: 4096,
			LinkLayer: "Ethernet", FWVer: "22.39.1002", Driver: "mlx5_core", HasToS: true, ToS: 106, RoCEMode: "v2", Trust: "dscp", PFC: "3"})
	}
	return f
}
