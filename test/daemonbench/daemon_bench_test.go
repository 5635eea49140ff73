// Package daemonbench measures the whole daemon on the host (issue #29 item
// 1; docs/BENCHMARKS.md, "Wakeups"): daemon.Run, as cmd/rdmad runs it, in
// this process, on the fixture sysfs tree, with the peer probes on
// probetest.MemTransport and the peers' control endpoints a
// probetest.FakeFleet in another process (the other nodes' work is not the
// node's). What the peer engine costs alone is probe's
// BenchmarkPeers*At1Hz; the difference is the rest of rdmad: the main
// loop, the state store, the D-Bus view and the watchers.
//
//	go test -run '^$' -bench 'DaemonPeers' -benchtime 10x ./test/daemonbench
//	go test -run '^$' -bench 'DaemonIdle' -benchtime 1x ./test/daemonbench
//
// Metrics: core-% (the process's user+system CPU time per wall second, in
// percent of one core) and wakeups/s (its threads' voluntary context
// switches per second: internal/rusage.Sleeps says why those are the
// wakeups).
package daemonbench

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client"
	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon"
	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/internal/rusage"
	"github.com/rdmad/rdmad/internal/testenv"
	"github.com/rdmad/rdmad/probe/probetest"
	"github.com/rdmad/rdmad/probe/ud"
	"github.com/rdmad/rdmad/verbs/peer"
)

var memProfile = flag.String("daemon.memprofile", "", "BenchmarkDaemonPeers*: write heap profiles at the start (FILE.base) and at the end (FILE) of the measured seconds: go tool pprof -sample_index=alloc_objects -base FILE.base shows what they allocated")

var cpuProfile = flag.String("daemon.cpuprofile", "", "BenchmarkDaemonPeers*: write a CPU profile (1,000 samples a second) of the measured seconds only")

var warmup = flag.Duration("daemon.warmup", 100*time.Second, "BenchmarkDaemonPeers*: probing before the measurement, after every peer is up (100s fills the default window of 100 probes)")

const fixture = "../../inventory/testdata/roce-ib"

// TestMain is the fake fleet's process too (probetest.StartFleet).
func TestMain(m *testing.M) {
	probetest.RunFleetChild()
	os.Exit(m.Run())
}

// memEngine is the daemon's peer engine over a MemTransport: the device
// methods have no devices to act on.
type memEngine struct{ *probetest.MemTransport }

// postHold, while it holds a channel, makes every memEngine's ProbeBatch
// block until that channel is closed: a provider whose post does not
// return (TestStalledProbesReported).
var postHold atomic.Pointer[chan struct{}]

func (e memEngine) ProbeBatch(local string, ts []ud.Target) int {
	if h := postHold.Load(); h != nil {
		<-*h
	}
	return e.MemTransport.ProbeBatch(local, ts)
}

func (memEngine) SetAuth([]byte, bool) {}
func (memEngine) Rescan()              {}
func (memEngine) ReleaseDevice(string) {}
func (e memEngine) Stats() ud.Stats {
	return ud.Stats{Sent: e.Sent(), Replies: e.Sent() - e.Lost()}
}

// A daemonRun is daemon.Run in this process until stop.
type daemonRun struct {
	c      *client.Client
	tr     chan *probetest.MemTransport
	cancel context.CancelFunc
	done   chan error
}

// startDaemon runs the daemon on configuration body (its socket is set
// here) with the peer engine on a MemTransport.
func startDaemon(tb testing.TB, body string) *daemonRun {
	dir := tb.TempDir()
	sock := filepath.Join(dir, "rdmad.sock")
	cfg := filepath.Join(dir, "rdmad.toml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("[daemon]\nsocket = %q\n\n%s", sock, body)), 0o644); err != nil {
		tb.Fatal(err)
	}
	r := &daemonRun{c: client.New(sock), tr: make(chan *probetest.MemTransport, 1), done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	opts := daemon.Options{ConfigPath: cfg, ConfigRequired: true, SysfsRoot: fixture, Version: "bench", Stderr: os.Stderr,
		StateDir: filepath.Join(dir, "state"), PeerListenHost: "127.0.0.1",
		PeerEngine: func(c peer.Config) (daemon.PeerEngine, error) {
			// The daemon runs the engine (PeerEngine.Run): the
			// transport's Run, which must run once.
			t := probetest.NewMemTransport(1, 100*time.Microsecond, 0.001)
			// A QP per flow on each port, as verbs/peer makes them.
			t.SetFlows(max(c.Flows, 1))
			t.OnReply = c.OnReply
			select {
			case r.tr <- t:
			default:
			}
			return memEngine{t}, nil
		}}
	if err := os.Mkdir(opts.StateDir, 0o755); err != nil {
		tb.Fatal(err)
	}
	go func() { r.done <- daemon.Run(ctx, opts) }()
	// Ready when the socket answers.
	for deadline := time.Now().Add(30 * time.Second); ; {
		if _, err := r.c.Status(context.Background()); err == nil {
			break
		}
		select {
		case err := <-r.done:
			tb.Fatalf("daemon.Run = %v before it answered", err)
		default:
		}
		if time.Now().After(deadline) {
			tb.Fatal("the daemon's socket did not answer within 30 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return r
}

func (r *daemonRun) stop(tb testing.TB) {
	r.cancel()
	if err := <-r.done; err != nil {
		tb.Errorf("daemon.Run = %v", err)
	}
}

// waitUp waits until n peers are published, all answering.
func (r *daemonRun) waitUp(tb testing.TB, n int, limit time.Duration) {
	deadline := time.Now().Add(limit)
	last := ""
	for {
		st, err := r.c.Status(context.Background())
		if err == nil {
			answering := 0
			for _, p := range st.Peers.Peers {
				if p.State == apitype.PeerUp || p.State == apitype.PeerDegraded {
					answering++
				}
			}
			if len(st.Peers.Peers) == n && answering == n {
				return
			}
			last = fmt.Sprintf("%d peers published, %d answering", len(st.Peers.Peers), answering)
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			tb.Fatalf("after %v: %s; want %d answering", limit, last, n)
		}
		time.Sleep(time.Second)
	}
}

// startWithFleet runs a fake fleet of n peers (one port each, in groups
// of perGroup, admitting flows probe flows) and the daemon probing them
// all through peers_file, with the [probe] lines extra added; the fleet is
// closed at the end of tb, after the daemon's stop that the caller defers.
func startWithFleet(tb testing.TB, n, perGroup, flows int, extra string) *daemonRun {
	l, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	port := l.LocalAddr().(*net.UDPAddr).Port
	l.Close()
	var peers strings.Builder
	for i := range n {
		fmt.Fprintf(&peers, "%s tor-%03d\n", probetest.FleetAddr(i), i/perGroup)
	}
	peersFile := filepath.Join(tb.TempDir(), "peers")
	if err := os.WriteFile(peersFile, []byte(peers.String()), 0o644); err != nil {
		tb.Fatal(err)
	}
	local, _ := probetest.NewMemTransport(1, 0, 0).Ports()
	fp := probetest.Fingerprint(local)
	fleet, err := probetest.StartFleetFlows(n, 1, flows, netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(port)),
		fp.Marshal(), time.Minute)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { fleet.Close() })
	return startDaemon(tb, fmt.Sprintf("[probe]\npeers_file = %q\nport = %d\nmax_peers = %d\ngroup = \"tor-000\"\n%s", peersFile, port, n, extra))
}

// BenchmarkDaemonPeers1000At1Hz probes on one flow ([probe] flows = 1);
// BenchmarkDaemonPeers1000At1HzDefaults with every other [probe] setting
// as a package installs it (flows 4, walked round-robin), max_peers but
// the peers as the operator of 1,000 nodes sets them.
func BenchmarkDaemonPeers1000At1Hz(b *testing.B) { benchDaemonPeers(b, 1000, 1, "flows = 1\n") }
func BenchmarkDaemonPeers1000At1HzDefaults(b *testing.B) {
	benchDaemonPeers(b, 1000, config.DefaultProbeFlows, "")
}

func benchDaemonPeers(b *testing.B, n, flows int, extra string) {
	r := startWithFleet(b, n, 40, flows, extra)
	defer r.stop(b)
	tr := <-r.tr
	r.waitUp(b, n, 60*time.Second+time.Duration(n)*time.Millisecond)
	time.Sleep(*warmup)

	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		// The daemon takes under 1 % of a core: 100 samples a second
		// would give a handful.
		runtime.SetCPUProfileRate(1000)
		if err := pprof.StartCPUProfile(f); err != nil {
			b.Fatal(err)
		}
	}
	writeHeap(b, *memProfile, ".base")
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	cpu0, sleeps0, sent0 := rusage.CPU(), rusage.Sleeps(), tr.Sent()
	start := time.Now()
	i := 0
	for b.Loop() {
		i++
		time.Sleep(time.Until(start.Add(time.Duration(i) * time.Second)))
	}
	wall := time.Since(start)
	cpu, sleeps, sent := rusage.CPU()-cpu0, rusage.Sleeps()-sleeps0, tr.Sent()-sent0
	runtime.ReadMemStats(&ms1)
	b.StopTimer()
	if *cpuProfile != "" {
		pprof.StopCPUProfile()
	}
	writeHeap(b, *memProfile, "")
	// The figures are only worth reading if the daemon probed everyone at
	// the configured rate: one probe per peer and turn, whatever the
	// flows (walked round-robin), on every flow.
	if rate := float64(sent) / wall.Seconds(); rate < 0.9*float64(n) || rate > 1.2*float64(n) {
		b.Errorf("%.0f probes/s, want about %d (%d peers at 1 Hz)", rate, n, n)
	}
	if st, err := r.c.Status(context.Background()); err != nil {
		b.Error(err)
	} else if len(st.Peers.Peers) > 0 {
		if got := len(st.Peers.Peers[0].Paths[0].Flows); got != flows {
			b.Errorf("peer %s is probed on %d flows, want %d", st.Peers.Peers[0].Name, got, flows)
		}
	}
	b.ReportMetric(100*cpu.Seconds()/wall.Seconds(), "core-%")
	b.ReportMetric(float64(sleeps)/wall.Seconds(), "wakeups/s")
	b.ReportMetric(float64(sent)/wall.Seconds(), "probes/s")
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/float64(max(sent, 1)), "allocs/probe")
}

// writeHeap writes the heap profile to path+suffix, after a collection
// so that its allocation counts are current; nothing without a path.
func writeHeap(b *testing.B, path, suffix string) {
	if path == "" {
		return
	}
	runtime.GC()
	f, err := os.Create(path + suffix)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		b.Fatal(err)
	}
}

var (
	idleFor   = flag.Duration("daemon.idle", 30*time.Second, "BenchmarkDaemonIdle: how long each iteration measures")
	idleNoBus = flag.Bool("daemon.nobus", false, "BenchmarkDaemonIdle: no system bus (rdmad retries its connection every 30 s) instead of a private dbus-daemon")
)

// BenchmarkDaemonIdle is rdmad without peers: the fixture's devices, the
// watchers, the API socket, the main loop and the D-Bus service on a
// private dbus-daemon (a node has a system bus), nothing asked of it.
// Each iteration measures -daemon.idle (30 s) in one sleep, 20 s after the
// start; run it with -benchtime 1x.
//
// wakeups/s counts the benchmark's own too: its goroutine's sleep and
// wakeup and the runtime's threads around them, about ten a measurement
// whatever its length (strace shows no system call of rdmad's in the
// window), which the 30 s window spreads to about 0.3 a second. With
// -daemon.nobus the D-Bus service retries its connection 1, 3, 7, 15
// and 31 s after the start and then every 30 s: that is a host without a
// bus, not rdmad at rest.
func BenchmarkDaemonIdle(b *testing.B) {
	if !*idleNoBus {
		startIdleBus(b)
	}
	r := startDaemon(b, "")
	defer r.stop(b)
	time.Sleep(20 * time.Second)
	if !*idleNoBus {
		// On the bus, or the figure would be the retries of a bus that
		// failed (see -daemon.nobus).
		st, err := r.c.Status(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		if c := st.Components[apitype.ComponentDBus]; c.State != apitype.OK {
			b.Fatalf("D-Bus component %+v after 20 s on the private bus; want ok", c)
		}
	}
	cpu0, sleeps0 := rusage.CPU(), rusage.Sleeps()
	start := time.Now()
	for b.Loop() {
		time.Sleep(*idleFor)
	}
	wall := time.Since(start)
	cpu, sleeps := rusage.CPU()-cpu0, rusage.Sleeps()-sleeps0
	b.StopTimer()
	b.ReportMetric(100*cpu.Seconds()/wall.Seconds(), "core-%")
	b.ReportMetric(float64(sleeps)/wall.Seconds(), "wakeups/s")
}

// startIdleBus runs a private dbus-daemon with the system bus's default
// policy and the project's policy file, as a node's, and points
// DBUS_SYSTEM_BUS_ADDRESS at it.
func startIdleBus(b *testing.B) {
	policy, err := filepath.Abs("../../etc/dbus-1/system.d/org.rdmad.Agent1.conf")
	if err != nil {
		b.Fatal(err)
	}
	testenv.SystemBus(b, testenv.SystemBusPolicy+"\n  <include>"+policy+"</include>")
}
