package probe

// The peer engine at scale on the host (docs/BENCHMARKS.md, "Peer probes at
// scale (host)"): the production Manager (selection, schedule, state
// machine, windows, publishing, the real control endpoint over UDP) probes
// 100, 1,000 or 10,000 peers at 1 Hz on the wall clock, through
// probetest.MemTransport, which answers every probe in memory after a
// delay and with a loss rate.
// The peers' control endpoints are a probetest.FakeFleet: one UDP socket
// per peer on its own loopback address, served by another process (the
// other nodes' work is not the node's).
//
//	go test -run '^$' -bench 'Peers(100|1000)At1Hz' -benchtime 10x ./probe
//	go test -run '^$' -bench 'Peers10000At1Hz' -benchtime 10x ./probe
//
// Each b.N iteration is one second of probing; nothing reads the figures
// unless -scale.reader says how often a reader asks (a scrape every 15 s:
// -scale.reader 15s). Metrics: publishes/s (the states built), core-% (the
// process's user+system CPU time per wall second while probing, in percent
// of one core), allocs/probe (mallocs
// during the measured seconds per probe sent), bytes/peer (live heap after
// GC, with the manager running and its last published state held, minus the
// heap before it started, per probed peer: at most max_peers of the list). The consumers of each
// publish (D-Bus view, metrics) are measured in daemon/bus
// (BenchmarkPeersPublish*).

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"reflect"
	"runtime"
	"runtime/pprof"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/internal/rusage"
	"github.com/rdmad/rdmad/probe/probetest"
)

var (
	scaleDelay      = flag.Duration("scale.delay", 100*time.Microsecond, "BenchmarkPeers*At1Hz: time from a probe to its reply")
	scaleLoss       = flag.Float64("scale.loss", 0.001, "BenchmarkPeers*At1Hz: share of probes without a reply")
	scalePorts      = flag.Int("scale.ports", 1, "BenchmarkPeers*At1Hz: local probe ports (every peer is probed from each)")
	scaleFlows      = flag.Int("scale.flows", 1, "BenchmarkPeers*At1Hz (not the *Defaults ones): probe flows per path ([probe] flows)")
	scaleProfile    = flag.String("scale.cpuprofile", "", "BenchmarkPeers*At1Hz: write a CPU profile of the measured seconds only (go test's -cpuprofile covers the warm-up too)")
	scaleMemProfile = flag.String("scale.memprofile", "", "BenchmarkPeers*At1Hz: write a heap profile when bytes/peer is measured, with the manager running, and one as the measured seconds begin (the file with .start added): go tool pprof -sample_index=alloc_objects -diff_base FILE.start FILE shows what the measured seconds allocated (allocs/probe); run with -test.memprofilerate 1 to see every allocation")
	scaleWarmup     = flag.Duration("scale.warmup", 100*time.Second, "BenchmarkPeers*At1Hz: probing before the measurement, after every peer is up (100s fills the default window of 100 probes)")
	scaleReader     = flag.Duration("scale.reader", 0, "BenchmarkPeers*At1Hz: a reader asks for the figures (Manager.Fresh, as a scrape does) this often while measuring; 0: none")
)

// The benchmarks' in-memory transport is a Transport.
var _ Transport = (*probetest.MemTransport)(nil)

// TestMain is the fake fleet's process too (probetest.StartFleet).
func TestMain(m *testing.M) {
	probetest.RunFleetChild() // the fake fleet's process, when this is it
	code := m.Run()
	// mpeer.r hands every peer without a rare part the one noRare to
	// read: a write through it would show in every such peer. Every test
	// of the package has run; none may have written it.
	if !reflect.ValueOf(noRare).IsZero() {
		fmt.Fprintf(os.Stderr, "noRare was written through mpeer.r (use mpeer.w to write): %+v\n", noRare)
		code = 1
	}
	os.Exit(code)
}

// scaleFingerprint is the node's fingerprint, and every fake peer's: a
// homogeneous fleet, no mismatches.
var scaleFingerprint = probetest.Fingerprint

// scaleMaxBatch is the bound the runs' transport puts on a batch (0:
// none, so the manager's own maxBatch applies); TestBatchBoundedByTransport
// sets it.
var scaleMaxBatch int

// A scaleRun is a Manager probing n fake peers.
type scaleRun struct {
	m     *Manager
	tr    *probetest.MemTransport
	fleet *probetest.FakeFleet
	n     int
	// s is the manager's settings; selected how many of the n peers it
	// probed when the measurement began (selectedAt).
	s        Settings
	selected int
	last     atomic.Pointer[apitype.Peers]
	pubs     atomic.Uint64 // publishes
	cancel   context.CancelFunc
	done     chan error
	heap0    uint64
}

func startScale(tb testing.TB, n, ports int, delay time.Duration, loss float64) *scaleRun {
	return startScaleSettings(tb, n, ports, scaleSettings(n, 1), delay, loss)
}

// scaleSettings is the engine as the rounds before the defaults' rows
// measured it: flows flows, and max_peers = n (beyond the configuration's
// bound at 10,000).
func scaleSettings(n, flows int) Settings {
	return Settings{Interval: time.Second, Timeout: 500 * time.Millisecond, Window: 100,
		MaxPeers: n, Rotate: time.Minute, Resolve: time.Minute, Flows: flows,
		Threshold: Thresholds{DownAfter: 3, UpAfter: 3, LossPct: 1, MinLosses: 2}}
}

// maxPeersBound is [probe] max_peers' bound (config.MaxProbePeers: probe
// may not import the daemon's configuration, internal/layout).
const maxPeersBound = 4096

// defaultSettings is the [probe] settings a package installs (the
// defaults of daemon/config, turned into the manager's as daemon/peers.go
// does; daemon/config TestProbeDefaultsOfTheBenchmarks fails when they
// part), with max_peers as the operator of n peers sets it: n, at most
// its bound.
func defaultSettings(n int) Settings {
	return Settings{Interval: time.Second, Timeout: 500 * time.Millisecond, Window: 100,
		MaxPeers: min(n, maxPeersBound), Rotate: time.Minute, Resolve: time.Minute, Flows: DefaultFlows,
		Threshold: Thresholds{DownAfter: 3, UpAfter: 3, LossPct: 1, MinLosses: 2}}
}

// startScaleSettings is startScale with the manager's settings s (its
// port, group and peers set here), s.Flows flows per path, which every
// fake peer admits.
func startScaleSettings(tb testing.TB, n, ports int, s Settings, delay time.Duration, loss float64) *scaleRun {
	return startScaleWrapped(tb, n, ports, s, delay, loss, nil)
}

// startScaleWrapped is startScaleSettings with the manager's transport
// wrap(the memory transport) when wrap is set.
func startScaleWrapped(tb testing.TB, n, ports int, s Settings, delay time.Duration, loss float64, wrap func(*probetest.MemTransport) Transport) *scaleRun {
	flows := s.Flows
	l, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	node := l.LocalAddr().(*net.UDPAddr).AddrPort()
	l.Close()
	r := &scaleRun{n: n, tr: probetest.NewMemTransport(ports, delay, loss), done: make(chan error, 1)}
	r.tr.SetFlows(flows)
	r.tr.SetMaxBatch(scaleMaxBatch)
	local, _ := r.tr.Ports()
	fp := scaleFingerprint(local)
	if r.fleet, err = probetest.StartFleetFlows(n, ports, flows, node, fp.Marshal(), time.Minute); err != nil {
		tb.Fatal(err)
	}
	s.Port, s.Group = int(node.Port()), "tor-000"
	for i := range n {
		s.Peers = append(s.Peers, Spec{Name: probetest.FleetAddr(i).String(), Group: fmt.Sprintf("tor-%03d", i/40)})
	}
	r.s = s

	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	r.heap0 = ms.HeapAlloc
	var tr Transport = r.tr
	if wrap != nil {
		tr = wrap(r.tr)
	}
	r.m, err = New(Options{Transport: tr, NodeID: 1, ListenHost: node.Addr().String(), Logger: slog.New(slog.DiscardHandler),
		OnState:     func(ps apitype.Peers) { r.last.Store(&ps); r.pubs.Add(1) },
		Fingerprint: scaleFingerprint}, s)
	if err != nil {
		tb.Fatal(err)
	}
	r.tr.OnReply = r.m.OnReply
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go r.tr.Run(ctx)
	go func() { r.done <- r.m.Run(ctx) }()
	return r
}

func (r *scaleRun) stop(tb testing.TB) {
	r.cancel()
	if err := <-r.done; err != nil {
		tb.Errorf("Run = %v", err)
	}
	r.fleet.Close()
}

// counts returns how many peers the last published state has, and how
// many of them answer (up or degraded).
func (r *scaleRun) counts() (peers, answering int) {
	ps := r.last.Load()
	if ps == nil {
		return 0, 0
	}
	for _, p := range ps.Peers {
		if p.State == apitype.PeerUp || p.State == apitype.PeerDegraded {
			answering++
		}
	}
	return len(ps.Peers), answering
}

// selectedAt returns how many peers the manager probes in the epoch of
// now, as it computes them (peerTable.selection: Select with node ID 1):
// every peer up to max_peers; above it Select's shares per group, which
// can come to a few fewer than max_peers (4,024 of 4,096 at 10,000).
func (r *scaleRun) selectedAt(now time.Time) int {
	cands := make([]Candidate, len(r.s.Peers))
	for i, sp := range r.s.Peers {
		cands[i] = Candidate{Name: sp.Name, Group: sp.Group}
	}
	return len(Select(1, r.s.Group, cands, r.s.MaxPeers, uint64(now.UnixNano())/uint64(r.s.Rotate)))
}

// waitUp waits until every selected peer answers, and sets selected.
func (r *scaleRun) waitUp(tb testing.TB, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for {
		r.selected = r.selectedAt(time.Now())
		peers, answering := r.counts()
		if peers == r.selected && answering == r.selected {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("after %v: %d peers published, %d answering; want %d", limit, peers, answering, r.selected)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// fleetStats returns the fake fleet's counters.
func fleetStats(tb testing.TB, f *probetest.FakeFleet) probetest.FleetStats {
	st, err := f.Stats()
	if err != nil {
		tb.Fatal(err)
	}
	return st
}

func BenchmarkPeers100At1Hz(b *testing.B)   { benchPeersAt1Hz(b, 100) }
func BenchmarkPeers1000At1Hz(b *testing.B)  { benchPeersAt1Hz(b, 1000) }
func BenchmarkPeers10000At1Hz(b *testing.B) { benchPeersAt1Hz(b, 10000) }

// The defaults: every [probe] setting as a package installs it
// (defaultSettings: flows 4, window 100, 1 s, 500 ms, rotate 1m), with
// max_peers as the operator of the fleet sets it, at most the
// configuration's bound. At 10,000 listed peers that is 4,096 probed at a
// time, the selection moving on every minute (rotate): the figures
// include the turnover of an epoch when the run spans one (-benchtime
// 60x spans one for sure).
func BenchmarkPeers1000At1HzDefaults(b *testing.B)  { benchScale(b, 1000, defaultSettings(1000)) }
func BenchmarkPeers10000At1HzDefaults(b *testing.B) { benchScale(b, 10000, defaultSettings(10000)) }

// benchPeersAt1Hz measures scaleSettings at -scale.flows (1).
func benchPeersAt1Hz(b *testing.B, n int) { benchScale(b, n, scaleSettings(n, *scaleFlows)) }

// benchScale measures the manager probing n fake peers with settings s.
func benchScale(b *testing.B, n int, s Settings) {
	flows := s.Flows
	r := startScaleSettings(b, n, *scalePorts, s, *scaleDelay, *scaleLoss)
	defer r.stop(b)
	r.waitUp(b, 30*time.Second+time.Duration(n)*time.Millisecond)
	time.Sleep(*scaleWarmup)

	if *scaleProfile != "" {
		f, err := os.Create(*scaleProfile)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			b.Fatal(err)
		}
	}
	if *scaleMemProfile != "" {
		writeHeapProfile(b, *scaleMemProfile+".start")
	}
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	fleet0, cpu0, sleeps0 := fleetStats(b, r.fleet), rusage.CPU(), rusage.Sleeps()
	sent0, lost0, pubs0 := r.tr.Sent(), r.tr.Lost(), r.pubs.Load()
	readerDone := make(chan struct{})
	stopReader := func() {}
	if *scaleReader > 0 {
		// A scraper: the figures no older than the publish period, every
		// -scale.reader.
		ctx, cancel := context.WithCancel(context.Background())
		stopReader = func() { cancel(); <-readerDone }
		go func() {
			defer close(readerDone)
			t := time.NewTicker(*scaleReader)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					r.m.Fresh(ctx, 0)
				}
			}
		}()
	}
	start := time.Now()
	i := 0
	for b.Loop() {
		i++
		time.Sleep(time.Until(start.Add(time.Duration(i) * time.Second)))
	}
	wall := time.Since(start)
	stopReader()
	cpu, sleeps, fleet := rusage.CPU(), rusage.Sleeps(), fleetStats(b, r.fleet)
	sent, lost, pubs := r.tr.Sent()-sent0, r.tr.Lost()-lost0, r.pubs.Load()-pubs0
	runtime.ReadMemStats(&ms1)
	b.StopTimer()
	if *scaleProfile != "" {
		pprof.StopCPUProfile()
	}

	peers, answering := r.counts()
	// The run is only worth its figures if the node probed every
	// selected peer at the configured rate, one probe per path and turn
	// whatever the flows (they are walked round-robin), and saw them
	// answer.
	wantRate := float64(r.selected * *scalePorts)
	if rate := float64(sent) / wall.Seconds(); rate < 0.9*wantRate || rate > 1.2*wantRate {
		b.Errorf("%.0f probes/s, want about %.0f (%d peers x %d ports at 1 Hz, %d flows)", rate, wantRate, r.selected, *scalePorts, flows)
	}
	// The selection of the epoch at the end, or of the one before when
	// the run ended just after a turnover.
	now := time.Now()
	if want, before := r.selectedAt(now), r.selectedAt(now.Add(-r.s.Rotate)); (peers != want && peers != before) || answering < min(want, before)*99/100 {
		b.Errorf("published %d peers, %d answering; want %d (or %d, the epoch before), nearly all answering", peers, answering, want, before)
	}
	runtime.GC()
	runtime.GC()
	var ms2 runtime.MemStats
	runtime.ReadMemStats(&ms2)
	if *scaleMemProfile != "" {
		writeHeapProfile(b, *scaleMemProfile)
	}

	node := cpu - cpu0
	b.ReportMetric(100*node.Seconds()/wall.Seconds(), "core-%")
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/float64(max(sent, 1)), "allocs/probe")
	// Per probed peer: a listed peer that is not selected costs its
	// entry of the list only, and dividing by the list would flatter.
	b.ReportMetric(float64(int64(ms2.HeapAlloc)-int64(r.heap0))/float64(r.selected), "bytes/peer")
	b.ReportMetric(float64(sent)/wall.Seconds(), "probes/s")
	b.ReportMetric(float64(sleeps-sleeps0)/wall.Seconds(), "wakeups/s")
	b.ReportMetric(100*float64(lost)/float64(max(sent, 1)), "lost-%")
	b.ReportMetric(float64(pubs)/wall.Seconds(), "publishes/s")
	b.Logf("%d peers: %d probes in %v (%d lost by the transport), %d publishes, node CPU %v, fake peers' process %v, %d control answers and %d queries from the fake peers, %d GCs",
		n, sent, wall.Round(time.Millisecond), lost, pubs, node, fleet.CPU-fleet0.CPU, fleet.Answered-fleet0.Answered, fleet.Asked-fleet0.Asked, ms1.NumGC-ms0.NumGC)
}

// writeHeapProfile writes the heap profile to file.
func writeHeapProfile(tb testing.TB, file string) {
	f, err := os.Create(file)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkTimerWakeup50Hz is the yardstick of the figures above: nothing
// but a goroutine woken by a 50 Hz ticker, each iteration a second, in
// the same process. Its core-% (and µs/wakeup) is what the machine charges
// for waking a goroutine: on a VM that is much more than on hardware, and
// it moves with what the host runs meanwhile. A node at 1,000 peers wakes
// some 40 times a second (the manager, the transport's completions, the
// control endpoint).
func BenchmarkTimerWakeup50Hz(b *testing.B) {
	tk := time.NewTicker(20 * time.Millisecond)
	defer tk.Stop()
	<-tk.C
	cpu0, sleeps0, start, n := rusage.CPU(), rusage.Sleeps(), time.Now(), 0
	for b.Loop() {
		for range 50 {
			<-tk.C
			n++
		}
	}
	cpu, sleeps := rusage.CPU()-cpu0, rusage.Sleeps()-sleeps0
	b.ReportMetric(100*cpu.Seconds()/time.Since(start).Seconds(), "core-%")
	b.ReportMetric(float64(cpu.Microseconds())/float64(n), "µs/tick")
	b.ReportMetric(float64(cpu.Microseconds())/float64(max(sleeps, 1)), "µs/wakeup")
	b.ReportMetric(float64(sleeps)/time.Since(start).Seconds(), "wakeups/s")
}
