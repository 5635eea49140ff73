//go:build soak

package soak

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client"
	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon"
	"github.com/rdmad/rdmad/probe/probetest"
	"github.com/rdmad/rdmad/probe/ud"
	"github.com/rdmad/rdmad/verbs/peer"
)

// The run's size: SOAK_PEERS peers (default 1,000) configured and probed at
// any time, of a fleet a tenth larger; a twentieth of them churn. At most
// 4,096, the most [probe] max_peers lets a node probe at once: issue #24 item
// 12 sizes the unit's MemoryMax= and TasksMax= from a run there.
var (
	peers     = soakPeers()
	fleetSize = peers + peers/10 // fake peers; the configured ones are a window of them
	churn     = max(peers/20, 1) // peers removed and as many added at every churn
)

func soakPeers() int {
	v := os.Getenv("SOAK_PEERS")
	if v == "" {
		return 1000
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 10 || n > 4096 {
		fmt.Fprintf(os.Stderr, "SOAK_PEERS=%q: want a number of peers from 10 to 4096 (the most [probe] max_peers allows)\n", v)
		os.Exit(2)
	}
	return n
}

// The run's shape (issue #18 item 5).
const (
	churnEvery  = time.Minute      // the peers file changes
	reloadEvery = 10 * time.Second // the configuration reloads (file edit and POST /v1/reload in turn)
	scrapeEvery = 10 * time.Second // GET /v1/status and GET /metrics
	sampleEvery = 10 * time.Second // the daemon samples itself
	maxWatchers = 8                // watch streams open at once
	warmup      = 2 * time.Minute  // samples left out of the slopes and checks
	replyDelay  = 100 * time.Microsecond
	replyLoss   = 0.001
	fixture     = "../../inventory/testdata/roce-ib"
	daemonEnv   = "RDMAD_SOAK_DAEMON" // the daemon child's configuration file
)

// Leak limits: the run fails when the floor of the last quarter of the
// samples after warm-up (their minimum) stands above the ceiling of the
// first quarter (their maximum) by more than these. Comparing a floor with
// a ceiling makes bounded noise harmless: what moves with the load
// (watch streams, API connections, a reload in progress) is at most
// maxWatchers streams plus a few requests, each a connection (one fd) and a
// handful of goroutines, far below the limits. A leak of one goroutine or
// fd per watcher, reload or churned peer passes them within minutes (at
// least 6 reloads, ~15 watchers and 50 peers a minute). The heap is
// measured after a forced GC; its limit is a doubling of the early
// ceiling, which no steady state reaches. The slopes themselves are
// reported, not asserted (issue #18: benchmarks, not timed tests).
const (
	leakGoroutines = 50
	leakFDs        = 32
	leakHeapFactor = 2.0
)

// TestMain is also the fake fleet's process and the daemon's (see
// runDaemonChild).
func TestMain(m *testing.M) {
	probetest.RunFleetChild()
	if cfg := os.Getenv(daemonEnv); cfg != "" {
		os.Exit(runDaemonChild(cfg))
	}
	os.Exit(m.Run())
}

// memEngine is the daemon's peer engine over a MemTransport: the device
// methods have no devices to act on.
type memEngine struct{ *probetest.MemTransport }

func (memEngine) SetAuth([]byte, bool) {}
func (memEngine) Rescan()              {}
func (memEngine) ReleaseDevice(string) {}
func (e memEngine) Stats() ud.Stats {
	return ud.Stats{Sent: e.Sent(), Replies: e.Sent() - e.Lost()}
}

// runDaemonChild runs rdmad (daemon.Run, as cmd/rdmad does) on the
// configuration file cfg, the fixture sysfs tree and a MemTransport, until
// SIGTERM. Every sampleEvery it writes a sample line to stdout; its log
// goes to stderr.
func runDaemonChild(cfg string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	var tr atomic.Pointer[probetest.MemTransport]
	opts := daemon.Options{ConfigPath: cfg, ConfigRequired: true, SysfsRoot: fixture, Version: "soak", Stderr: os.Stderr, PeerListenHost: "127.0.0.1",
		PeerEngine: func(c peer.Config) (daemon.PeerEngine, error) {
			t := probetest.NewMemTransport(1, replyDelay, replyLoss)
			t.OnReply = c.OnReply
			tr.Store(t)
			return memEngine{t}, nil
		}}
	go func() {
		start := time.Now()
		tk := time.NewTicker(sampleEvery)
		defer tk.Stop()
		for range tk.C {
			s := takeSample(start, tr.Load())
			fmt.Printf("sample %.1f %d %d %d %d %d %d %d %d %d\n", s.t, s.heap, s.heapInuse, s.goroutines, s.fds, s.rss, s.rssPeak, s.threads, s.probes, s.lost)
		}
	}()
	if err := daemon.Run(ctx, opts); err != nil {
		fmt.Fprintln(os.Stderr, "soak daemon:", err)
		return 1
	}
	return 0
}

// A sample is the daemon process at one moment.
type sample struct {
	t               float64 // seconds since the daemon started
	heap, heapInuse uint64  // bytes: live heap (HeapAlloc after a GC), heap spans in use
	goroutines      int
	fds             int
	rss             uint64 // bytes
	rssPeak         uint64 // bytes: VmHWM, the most RSS has been since the start
	threads         int
	probes, lost    uint64 // sent by the transport so far, lost on purpose
}

func takeSample(start time.Time, tr *probetest.MemTransport) sample {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s := sample{t: time.Since(start).Seconds(), heap: ms.HeapAlloc, heapInuse: ms.HeapInuse, goroutines: runtime.NumGoroutine()}
	if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
		s.fds = len(ents) - 1 // the directory being read
	}
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			switch {
			case len(f) >= 2 && f[0] == "VmRSS:":
				kb, _ := strconv.ParseUint(f[1], 10, 64)
				s.rss = kb << 10
			case len(f) >= 2 && f[0] == "VmHWM:":
				kb, _ := strconv.ParseUint(f[1], 10, 64)
				s.rssPeak = kb << 10
			case len(f) >= 2 && f[0] == "Threads:":
				s.threads, _ = strconv.Atoi(f[1])
			}
		}
	}
	if tr != nil {
		s.probes, s.lost = tr.Sent(), tr.Lost()
	}
	return s
}

func parseSample(line string) (sample, bool) {
	var s sample
	_, err := fmt.Sscanf(line, "sample %g %d %d %d %d %d %d %d %d %d", &s.t, &s.heap, &s.heapInuse, &s.goroutines, &s.fds, &s.rss, &s.rssPeak, &s.threads, &s.probes, &s.lost)
	return s, err == nil
}

// counters are what the drivers did and what went wrong.
type counters struct {
	mu                      sync.Mutex
	churns                  int
	fileReloads, apiReloads int
	watchers, watchEvents   int
	watchDropped            int // streams the daemon ended early (slow readers are dropped by design)
	scrapes                 int
	statusTimes             []time.Duration
	metricsTimes            []time.Duration
	metricsBytes            int
	failures                []string
}

func (c *counters) fail(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.failures) < 100 {
		c.failures = append(c.failures, fmt.Sprintf("%s: ", time.Now().Format(time.TimeOnly))+fmt.Sprintf(format, args...))
	}
}

func (c *counters) add(f func(c *counters)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f(c)
}

// A soak is one run: files, processes and clients.
type soak struct {
	t         *testing.T
	dir       string
	cfgPath   string
	peersPath string
	sock      string
	port      int
	c         *client.Client
	n         counters

	mu      sync.Mutex
	samples []sample
	offset  int // the window of configured peers starts here
	edits   int // configuration file rewrites
}

func TestSoak(t *testing.T) {
	dur := 30 * time.Minute
	if v := os.Getenv("SOAK_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Minute {
			t.Fatalf("SOAK_DURATION=%q: want a duration of at least 1m, such as 30m", v)
		}
		dur = d
	}
	outDir := os.Getenv("SOAK_OUT")
	if outDir == "" {
		outDir = "../../.soak"
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	s := &soak{t: t, dir: dir, cfgPath: filepath.Join(dir, "rdmad.toml"), peersPath: filepath.Join(dir, "peers"), sock: filepath.Join(dir, "rdmad.sock")}
	s.port = freeUDPPort(t)
	s.c = client.New(s.sock)
	s.writePeers()
	s.writeConfig()

	// The fleet answers for every address the peers file may name.
	tr := probetest.NewMemTransport(1, replyDelay, replyLoss)
	local, _ := tr.Ports()
	fp := probetest.Fingerprint(local)
	fleet, err := probetest.StartFleet(fleetSize, 1, netipAddrPort(s.port), fp.Marshal(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()

	logPath := filepath.Join(outDir, "daemon.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), daemonEnv+"="+s.cfgPath)
	child.Stderr = logf
	stdout, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	// exited is closed when the daemon exited, with its error in exitErr.
	exited := make(chan struct{})
	var exitErr error
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if smp, ok := parseSample(sc.Text()); ok {
				s.mu.Lock()
				s.samples = append(s.samples, smp)
				s.mu.Unlock()
			}
		}
		exitErr = child.Wait()
		close(exited)
	}()
	defer func() {
		child.Process.Kill() // when a check gave up on it
		<-exited
	}()

	// At start: every configured peer resolved through the fleet and up.
	start := time.Now()
	if err := s.waitPeers(2*time.Minute, exited, &exitErr); err != nil {
		t.Fatalf("at start: %v (daemon log: %s)", err, logPath)
	}
	t.Logf("%d peers up %v after the daemon started", peers, time.Since(start).Round(time.Second))
	gen0 := s.generation()

	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	soakStart := time.Now()
	s.mu.Lock()
	t0 := len(s.samples) // first sample of the soak proper
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, f := range []func(context.Context){s.churnPeers, s.reload, s.watch, s.scrape} {
		wg.Add(1)
		go func() { defer wg.Done(); f(ctx) }()
	}
	select {
	case <-ctx.Done():
	case <-exited:
		cancel()
		wg.Wait()
		t.Fatalf("the daemon exited during the soak: %v (log: %s)", exitErr, logPath)
	}
	wg.Wait()
	elapsed := time.Since(soakStart)
	// The last edit of the configuration may have come with the end: let
	// the config watcher's reload (200 ms after it) happen before counting.
	time.Sleep(time.Second)

	// At the end: the last peers file in force, every peer up, every
	// reload counted, the configuration without error.
	res, err := s.c.Reload(context.Background())
	if err != nil || !res.OK {
		s.n.fail("final reload: %+v, %v", res, err)
	}
	s.n.add(func(c *counters) { c.apiReloads++ })
	if err := s.waitPeers(time.Minute, exited, &exitErr); err != nil {
		s.n.fail("at the end: %v", err)
	}
	st, err := s.c.Status(context.Background())
	if err != nil {
		t.Fatalf("status at the end: %v", err)
	}
	if st.Config.Error != "" {
		s.n.fail("configuration error at the end: %s", st.Config.Error)
	}
	if got, want := st.Config.Generation-gen0, uint64(s.n.fileReloads+s.n.apiReloads); got < want {
		s.n.fail("configuration generation rose by %d during the soak; want at least %d (%d file edits, %d POST /v1/reload): reloads were missed",
			got, want, s.n.fileReloads, s.n.apiReloads)
	}
	mismatched := 0
	for _, p := range st.Peers.Peers {
		if len(p.Mismatches) > 0 {
			mismatched++
		}
	}

	// A clean stop.
	child.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
		if exitErr != nil {
			s.n.fail("the daemon's exit after SIGTERM: %v, want 0", exitErr)
		}
	case <-time.After(15 * time.Second):
		s.n.fail("the daemon did not stop within 15s of SIGTERM")
	}

	s.mu.Lock()
	all := slices.Clone(s.samples)
	s.mu.Unlock()
	soakSamples := all[min(t0, len(all)):]
	w := min(warmup, dur/3)
	var steady []sample
	for _, smp := range soakSamples {
		if smp.t >= soakSamples[0].t+w.Seconds() {
			steady = append(steady, smp)
		}
	}
	report := s.report(st, elapsed, w, all, steady, mismatched)
	fmt.Print(report)
	if err := os.WriteFile(filepath.Join(outDir, "report.txt"), []byte(report), 0o644); err != nil {
		t.Error(err)
	}
	if err := writeCSV(filepath.Join(outDir, "samples.csv"), all); err != nil {
		t.Error(err)
	}

	for _, f := range s.n.failures {
		t.Error(f)
	}
	s.checkRate(steady)
	checkLeaks(t, steady)
	if s.n.watchEvents == 0 {
		t.Errorf("the watchers received no event in %v; the watch hub sent nothing while the configuration reloaded every %v", elapsed, reloadEvery)
	}
}

// waitPeers waits until the published peers are exactly the configured
// ones and every one of them answers (up or degraded); exited is closed
// when the daemon exited, with its error in *exitErr.
func (s *soak) waitPeers(limit time.Duration, exited <-chan struct{}, exitErr *error) error {
	deadline := time.Now().Add(limit)
	var last string
	for {
		want := s.configured()
		st, err := s.c.Status(context.Background())
		if err == nil {
			got := map[string]bool{}
			answering := 0
			for _, p := range st.Peers.Peers {
				got[p.Name] = true
				if want[p.Name] && (p.State == apitype.PeerUp || p.State == apitype.PeerDegraded) {
					answering++
				}
			}
			extra := 0
			for name := range got {
				if !want[name] {
					extra++
				}
			}
			if answering == len(want) && extra == 0 {
				return nil
			}
			last = fmt.Sprintf("%d peers published, %d of the %d configured answering, %d not configured", len(st.Peers.Peers), answering, len(want), extra)
		} else {
			last = err.Error()
		}
		select {
		case <-exited:
			return fmt.Errorf("the daemon exited: %v", *exitErr)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v: %s", limit, last)
		}
		time.Sleep(time.Second)
	}
}

// configured returns the peers the peers file names now.
func (s *soak) configured() map[string]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := make(map[string]bool, peers)
	for i := range peers {
		m[probetest.FleetAddr((s.offset+i)%fleetSize).String()] = true
	}
	return m
}

func (s *soak) generation() uint64 {
	st, err := s.c.Status(context.Background())
	if err != nil {
		s.t.Fatalf("status: %v", err)
	}
	return st.Config.Generation
}

// writePeers writes the window of peers from s.offset, atomically (a new
// file renamed over the old one).
func (s *soak) writePeers() {
	s.mu.Lock()
	off := s.offset
	s.mu.Unlock()
	var b strings.Builder
	b.WriteString("# soak: the configured window of the fake fleet\n")
	for i := range peers {
		k := (off + i) % fleetSize
		fmt.Fprintf(&b, "%s tor-%03d\n", probetest.FleetAddr(k), k/40)
	}
	if err := writeAtomic(s.peersPath, b.String()); err != nil {
		s.n.fail("write the peers file: %v", err)
	}
}

// writeConfig writes the main configuration file, atomically; each
// rewrite differs (a comment), which the config watcher sees as a change.
func (s *soak) writeConfig() {
	s.mu.Lock()
	s.edits++
	edit := s.edits
	s.mu.Unlock()
	body := fmt.Sprintf(`# soak: rewrite %d
[daemon]
socket = %q

[probe]
peers_file = %q
port = %d
max_peers = %d
group = "tor-000"
`, edit, s.sock, s.peersPath, s.port, peers)
	if err := writeAtomic(s.cfgPath, body); err != nil {
		s.n.fail("write the configuration: %v", err)
	}
}

func writeAtomic(path, body string) error {
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// churnPeers removes the churn oldest peers and adds as many others every
// churnEvery; a reload (every reloadEvery) or the daemon's own check of
// the file picks the change up.
func (s *soak) churnPeers(ctx context.Context) {
	tk := time.NewTicker(churnEvery)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
		s.mu.Lock()
		s.offset = (s.offset + churn) % fleetSize
		s.mu.Unlock()
		s.writePeers()
		s.n.add(func(c *counters) { c.churns++ })
	}
}

// reload reloads the configuration every reloadEvery: by rewriting the
// file (the config watcher) and by POST /v1/reload, in turn.
func (s *soak) reload(ctx context.Context) {
	tk := time.NewTicker(reloadEvery)
	defer tk.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
		if i%2 == 0 {
			s.writeConfig()
			s.n.add(func(c *counters) { c.fileReloads++ })
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		res, err := s.c.Reload(rctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil || !res.OK {
			s.n.fail("POST /v1/reload: %+v, %v", res, err)
			continue
		}
		s.n.add(func(c *counters) { c.apiReloads++ })
	}
}

// watch opens watch streams, at most maxWatchers at once, one every 1-4 s:
// each lives 2-40 s; two in three read every event, the others read the
// hello only and then nothing (the daemon may drop them), and every one
// vanishes by closing its connection.
func (s *soak) watch(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	sem := make(chan struct{}, maxWatchers)
	rng := rand.New(rand.NewPCG(18, 5))
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second + time.Duration(rng.Int64N(int64(3*time.Second)))):
		}
		select {
		case sem <- struct{}{}:
		default:
			continue
		}
		life := 2*time.Second + time.Duration(rng.Int64N(int64(38*time.Second)))
		reader := rng.IntN(3) != 0
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			s.watcher(ctx, life, reader)
		}()
	}
}

func (s *soak) watcher(ctx context.Context, life time.Duration, reader bool) {
	wctx, cancel := context.WithTimeout(ctx, life)
	defer cancel()
	st, err := s.c.Watch(wctx)
	if err != nil {
		if ctx.Err() == nil {
			s.n.fail("GET /v1/watch: %v", err)
		}
		return
	}
	defer st.Close()
	s.n.add(func(c *counters) { c.watchers++ })
	if !reader {
		<-wctx.Done()
		return
	}
	events := 0
	defer func() { s.n.add(func(c *counters) { c.watchEvents += events }) }()
	for {
		ev, err := st.Next()
		if err != nil {
			if wctx.Err() == nil {
				// The stream ended before the watcher left.
				s.n.add(func(c *counters) { c.watchDropped++ })
			}
			return
		}
		if ev.Type == apitype.EventDropped || ev.Type == apitype.EventBye {
			s.n.add(func(c *counters) { c.watchDropped++ })
			return
		}
		events++
	}
}

// scrape reads GET /v1/status and GET /metrics every scrapeEvery.
func (s *soak) scrape(ctx context.Context) {
	tk := time.NewTicker(scrapeEvery)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		t0 := time.Now()
		st, err := s.c.Status(rctx)
		dStatus := time.Since(t0)
		t1 := time.Now()
		m, merr := s.c.Metrics(rctx)
		dMetrics := time.Since(t1)
		cancel()
		if ctx.Err() != nil {
			return
		}
		switch {
		case err != nil:
			s.n.fail("GET /v1/status: %v", err)
		case len(st.Peers.Peers) < peers-churn:
			s.n.fail("GET /v1/status: %d peers, want about %d", len(st.Peers.Peers), peers)
		}
		switch {
		case merr != nil:
			s.n.fail("GET /metrics: %v", merr)
		case !strings.Contains(string(m), "rdmad_build_info"):
			s.n.fail("GET /metrics: %d bytes without rdmad_build_info", len(m))
		}
		s.n.add(func(c *counters) {
			c.scrapes++
			c.statusTimes = append(c.statusTimes, dStatus)
			c.metricsTimes = append(c.metricsTimes, dMetrics)
			c.metricsBytes = len(m)
		})
	}
}

// checkRate checks that the daemon probed every configured peer at about
// 1 Hz after warm-up: the soak measured a daemon doing its work.
func (s *soak) checkRate(steady []sample) {
	if len(steady) < 2 {
		s.t.Errorf("%d samples after warm-up; the run was too short to judge", len(steady))
		return
	}
	a, b := steady[0], steady[len(steady)-1]
	rate := float64(b.probes-a.probes) / (b.t - a.t)
	if n := float64(peers); rate < 0.9*n || rate > 1.2*n {
		s.t.Errorf("%.0f probes/s after warm-up, want about %d (%d peers at 1 Hz)", rate, peers, peers)
	}
}

// checkLeaks fails on growth that bounded noise cannot explain (see the
// leak limits).
func checkLeaks(t *testing.T, steady []sample) {
	q := len(steady) / 4
	if q < 2 {
		t.Logf("%d samples after warm-up: too few to judge growth (a run of 10m or more is)", len(steady))
		return
	}
	early, late := steady[:q], steady[len(steady)-q:]
	for _, m := range metricsOf() {
		if m.limit == nil {
			continue
		}
		ceil := slices.Max(mapf(early, m.get))
		floor := slices.Min(mapf(late, m.get))
		if limit := m.limit(ceil); floor > limit {
			t.Errorf("%s leaks: the last quarter after warm-up never went below %.0f, the first quarter never above %.0f (limit %.0f)",
				m.name, floor, ceil, limit)
		}
	}
}

// A metric is one quantity of the samples.
type metric struct {
	name, unit string
	scale      float64 // shown as value/scale
	get        func(sample) float64
	// limit returns the most the late floor may be given the early
	// ceiling; nil: reported only.
	limit func(ceil float64) float64
}

func metricsOf() []metric {
	return []metric{
		{"heap live (after GC)", "MiB", 1 << 20, func(s sample) float64 { return float64(s.heap) }, func(c float64) float64 { return leakHeapFactor * c }},
		{"heap in use", "MiB", 1 << 20, func(s sample) float64 { return float64(s.heapInuse) }, nil},
		{"goroutines", "", 1, func(s sample) float64 { return float64(s.goroutines) }, func(c float64) float64 { return c + leakGoroutines }},
		{"open files", "", 1, func(s sample) float64 { return float64(s.fds) }, func(c float64) float64 { return c + leakFDs }},
		{"RSS", "MiB", 1 << 20, func(s sample) float64 { return float64(s.rss) }, nil},
		{"threads", "", 1, func(s sample) float64 { return float64(s.threads) }, nil},
	}
}

func mapf(ss []sample, f func(sample) float64) []float64 {
	out := make([]float64, len(ss))
	for i, s := range ss {
		out[i] = f(s)
	}
	return out
}

// slope returns the least-squares slope of ys over xs.
func slope(xs, ys []float64) float64 {
	n := float64(len(xs))
	if n < 2 {
		return math.NaN()
	}
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
		sxx += xs[i] * xs[i]
		sxy += xs[i] * ys[i]
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return math.NaN()
	}
	return (n*sxy - sx*sy) / d
}

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

func (s *soak) report(st *apitype.Snapshot, elapsed, w time.Duration, all, steady []sample, mismatched int) string {
	var b strings.Builder
	n := &s.n
	n.mu.Lock()
	defer n.mu.Unlock()
	commit := "?"
	if out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		commit = strings.TrimSpace(string(out))
		if exec.Command("git", "diff", "--quiet", "HEAD").Run() != nil {
			commit += "+dirty"
		}
	}
	fmt.Fprintf(&b, "# make soak: %s, commit %s, %s, %d CPUs\n", time.Now().UTC().Format(time.RFC3339), commit, runtime.Version(), runtime.NumCPU())
	fmt.Fprintf(&b, "soak %v (after every peer was up), %d peers of a fleet of %d on the in-memory transport (reply after %v, %.1f%% lost)\n",
		elapsed.Round(time.Second), peers, fleetSize, replyDelay, 100*replyLoss)
	fmt.Fprintf(&b, "churns %d (%d peers out and %d in every %v), reloads %d by file edit + %d by POST /v1/reload, watchers %d (%d events read, %d streams ended by the daemon), scrapes %d\n",
		n.churns, churn, churn, churnEvery, n.fileReloads, n.apiReloads, n.watchers, n.watchEvents, n.watchDropped, n.scrapes)
	fmt.Fprintf(&b, "GET /v1/status p50 %v p99 %v max %v; GET /metrics p50 %v p99 %v max %v (%d bytes)\n",
		percentile(n.statusTimes, .5).Round(time.Microsecond), percentile(n.statusTimes, .99).Round(time.Microsecond), percentile(n.statusTimes, 1).Round(time.Microsecond),
		percentile(n.metricsTimes, .5).Round(time.Microsecond), percentile(n.metricsTimes, .99).Round(time.Microsecond), percentile(n.metricsTimes, 1).Round(time.Microsecond), n.metricsBytes)
	up := 0
	for _, p := range st.Peers.Peers {
		if p.State == apitype.PeerUp {
			up++
		}
	}
	fmt.Fprintf(&b, "at the end: %d peers published, %d up, %d with mismatches; configuration generation %d; failures %d\n",
		len(st.Peers.Peers), up, mismatched, st.Config.Generation, len(n.failures))
	if len(steady) >= 2 {
		a, z := steady[0], steady[len(steady)-1]
		fmt.Fprintf(&b, "probes %.0f/s after warm-up\n", float64(z.probes-a.probes)/(z.t-a.t))
	}
	// The peaks over the whole run, warm-up included: what the unit's
	// MemoryMax= and TasksMax= are sized from (issue #24 item 12).
	var peakRSS uint64
	peakThreads, peakGoroutines := 0, 0
	for _, s := range all {
		peakRSS = max(peakRSS, s.rssPeak, s.rss)
		peakThreads, peakGoroutines = max(peakThreads, s.threads), max(peakGoroutines, s.goroutines)
	}
	fmt.Fprintf(&b, "peaks over the run: RSS %.1f MiB (VmHWM), threads %d, goroutines %d (sampled every %v)\n",
		float64(peakRSS)/(1<<20), peakThreads, peakGoroutines, sampleEvery)
	fmt.Fprintf(&b, "\n%d samples every %v; slopes over the %d after %v of warm-up (least squares):\n", len(all), sampleEvery, len(steady), w)
	fmt.Fprintf(&b, "%-28s %8s %8s %8s %8s %14s %10s\n", "", "first", "last", "min", "max", "slope per hour", "% per hour")
	xs := mapf(steady, func(s sample) float64 { return s.t / 3600 })
	for _, m := range metricsOf() {
		if len(steady) == 0 {
			break
		}
		ys := mapf(steady, m.get)
		mean := 0.0
		for _, y := range ys {
			mean += y
		}
		mean /= float64(len(ys))
		sl := slope(xs, ys)
		name := m.name
		if m.unit != "" {
			name += " (" + m.unit + ")"
		}
		f := func(v float64) string {
			if m.scale == 1 {
				return fmt.Sprintf("%.0f", v)
			}
			return fmt.Sprintf("%.2f", v/m.scale)
		}
		fs := fmt.Sprintf("%+.2f", sl/m.scale)
		fmt.Fprintf(&b, "%-28s %8s %8s %8s %8s %14s %10s\n", name, f(ys[0]), f(ys[len(ys)-1]), f(slices.Min(ys)), f(slices.Max(ys)), fs, fmt.Sprintf("%+.1f%%", 100*sl/mean))
	}
	if len(n.failures) > 0 {
		fmt.Fprintf(&b, "\nfailures:\n")
		for _, f := range n.failures {
			fmt.Fprintf(&b, "  %s\n", f)
		}
	}
	return b.String()
}

func writeCSV(path string, all []sample) error {
	var b strings.Builder
	b.WriteString("seconds,heap_bytes,heap_inuse_bytes,goroutines,open_files,rss_bytes,rss_peak_bytes,threads,probes_sent,probes_lost\n")
	for _, s := range all {
		fmt.Fprintf(&b, "%.1f,%d,%d,%d,%d,%d,%d,%d,%d,%d\n", s.t, s.heap, s.heapInuse, s.goroutines, s.fds, s.rss, s.rssPeak, s.threads, s.probes, s.lost)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// freeUDPPort returns a UDP port of 127.0.0.1 that was free a moment ago:
// the node's control port.
func freeUDPPort(t *testing.T) int {
	l, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.LocalAddr().(*net.UDPAddr).Port
}

func netipAddrPort(port int) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(port))
}
