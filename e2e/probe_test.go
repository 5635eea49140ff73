//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/verbs"
	"github.com/rdmad/rdmad/verbs/loopback"
	"github.com/rdmad/rdmad/verbs/mrpool"
)

// probeStart runs a Runner on rxe0 until the test ends.
func probeStart(t *testing.T, cfg loopback.Config) *loopback.Runner {
	t.Helper()
	cfg.Devices = []string{verbsDev}
	r, err := loopback.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Errorf("Runner.Run did not return within 30s of cancel")
		}
	})
	return r
}

// probePort returns rxe0 port 1's latest result.
func probePort(r *loopback.Runner) (loopback.PortResult, bool) {
	for _, p := range r.Snapshot().Ports {
		if p.Device == verbsDev && p.Port == 1 {
			return p, true
		}
	}
	return loopback.PortResult{}, false
}

// probeWait polls the Runner's results until cond holds or timeout.
func probeWait(t *testing.T, r *loopback.Runner, timeout time.Duration, what string, cond func(loopback.PortResult) bool) loopback.PortResult {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last loopback.PortResult
	for time.Now().Before(deadline) {
		if p, ok := probePort(r); ok {
			last = p
			if cond(p) {
				return p
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: not within %v; last result %+v (snapshot unavailable=%q)", what, timeout, last, r.Snapshot().Unavailable)
	return last
}

func TestProbeLoopback(t *testing.T) {
	verbsRequireVM(t)
	r := probeStart(t, loopback.Config{Interval: 100 * time.Millisecond})
	p := probeWait(t, r, 30*time.Second, "10 ok rounds", func(p loopback.PortResult) bool {
		return p.State == loopback.StateOK && p.Send.Count >= 10
	})
	for name, op := range map[string]loopback.OpStats{"write": p.Write, "read": p.Read, "send": p.Send, "warmup": p.Warmup} {
		if op.Count < 10 || op.Errors != 0 || op.P50 <= 0 || op.P99 < op.P50 || op.Max < op.P99 || op.LastRTT <= 0 {
			t.Errorf("%s stats %+v: want >= 10 samples, no errors, 0 < p50 <= p99 <= max", name, op)
		}
	}
	if p.GIDType != "RoCE v2" || p.PortState != "ACTIVE" || p.Failures != 0 || p.UpdatedAt.IsZero() {
		t.Errorf("result %+v; want RoCE v2 GID, ACTIVE port, no failures, stamped", p)
	}
	t.Logf("rxe0/1: write p50 %v p99 %v, read p50 %v, send p50 %v, warm-up p50 %v over %d rounds",
		p.Write.P50, p.Write.P99, p.Read.P50, p.Send.P50, p.Warmup.P50, p.Rounds)
}

// TestProbeQPErrorRecovery forces the probe's QP into ERR with a real
// ibv_modify_qp: the round fails as qp_error, the QPs are rebuilt, and the
// port is ok again.
func TestProbeQPErrorRecovery(t *testing.T) {
	verbsRequireVM(t)
	r := probeStart(t, loopback.Config{Interval: 100 * time.Millisecond})
	probeWait(t, r, 30*time.Second, "first ok round", func(p loopback.PortResult) bool { return p.State == loopback.StateOK })
	r.InjectQPError(verbsDev, 1)
	failed := probeWait(t, r, 10*time.Second, "failure after QP error", func(p loopback.PortResult) bool { return p.Failures >= 1 })
	if failed.ErrorKind != loopback.KindQPError || failed.LastError == "" {
		t.Errorf("after forcing ERR: kind %q error %q; want qp_error with a message", failed.ErrorKind, failed.LastError)
	}
	t.Logf("failure: %s: %s", failed.ErrorKind, failed.LastError)
	p := probeWait(t, r, 10*time.Second, "recovery", func(p loopback.PortResult) bool {
		return p.State == loopback.StateOK && p.QPRecreated >= 1
	})
	if p.Failures != 1 {
		t.Errorf("failures = %d, want exactly the injected one", p.Failures)
	}
}

// TestProbePortDownPauses takes eth0 down: the port leaves ACTIVE and the
// probe pauses (not fails), then resumes when eth0 is back.
func TestProbePortDownPauses(t *testing.T) {
	verbsRequireVM(t)
	r := probeStart(t, loopback.Config{Interval: 100 * time.Millisecond})
	probeWait(t, r, 30*time.Second, "first ok round", func(p loopback.PortResult) bool { return p.State == loopback.StateOK })
	t.Cleanup(func() { verbsRun(30*time.Second, "ip", "link", "set", "eth0", "up") })
	if _, err := verbsRun(30*time.Second, "ip", "link", "set", "eth0", "down"); err != nil {
		t.Fatal(err)
	}
	p := probeWait(t, r, 20*time.Second, "paused", func(p loopback.PortResult) bool { return p.State == loopback.StatePaused })
	if p.PortState == "ACTIVE" || !strings.Contains(p.LastError, "resumes when it is ACTIVE") {
		t.Errorf("paused result %+v", p)
	}
	failures := p.Failures
	if _, err := verbsRun(30*time.Second, "ip", "link", "set", "eth0", "up"); err != nil {
		t.Fatal(err)
	}
	p = probeWait(t, r, 30*time.Second, "resumed", func(p loopback.PortResult) bool { return p.State == loopback.StateOK && p.Rounds > 0 })
	if p.Failures > failures+1 {
		// The round racing with the link going down may fail once.
		t.Errorf("failures went from %d to %d across a clean link flap", failures, p.Failures)
	}
}

// TestProbeDeviceRemoval deletes rxe0 while the prober and the MR pool use
// it: the kernel waits for every user to close the device, so `rdma link
// del` only returns if both let go. The probe reports the device gone, and
// after `rdma link add` both come back.
func TestProbeDeviceRemoval(t *testing.T) {
	verbsRequireVM(t)
	r := probeStart(t, loopback.Config{Interval: 100 * time.Millisecond, Rescan: 500 * time.Millisecond})
	pool, err := mrpool.New(mrpool.Config{Classes: []mrpool.Class{{Size: 4 << 10, Count: 16}}, CanaryInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := pool.AddDevice(verbsDev); err != nil {
		t.Fatal(err)
	}
	dp := pool.Device(verbsDev)
	held, ok := dp.Get(1)
	if !ok {
		t.Fatal("pool Get failed")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go pool.Run(ctx)
	probeWait(t, r, 30*time.Second, "first ok round", func(p loopback.PortResult) bool { return p.State == loopback.StateOK })

	t.Cleanup(func() {
		if _, err := os.Stat("/sys/class/infiniband/" + verbsDev); err != nil {
			verbsRun(60*time.Second, "rdma", "link", "add", verbsDev, "type", "rxe", "netdev", "eth0")
		}
	})
	start := time.Now()
	if out, err := verbsRun(60*time.Second, "rdma", "link", "del", verbsDev); err != nil {
		t.Fatalf("rdma link del: %v (%s)", err, out)
	}
	t.Logf("rdma link del returned after %v", time.Since(start))
	p := probeWait(t, r, 10*time.Second, "device gone", func(p loopback.PortResult) bool { return p.State == loopback.StateUnavailable })
	if p.ErrorKind != loopback.KindDeviceGone {
		t.Errorf("after removal: %+v; want device_gone", p)
	}
	if pool.Device(verbsDev) != nil {
		t.Errorf("pool still holds %s after removal", verbsDev)
	}
	held.Bytes()[0] = 1 // a buffer held across removal stays mapped until Put
	dp.Put(held)

	if out, err := verbsRun(60*time.Second, "rdma", "link", "add", verbsDev, "type", "rxe", "netdev", "eth0"); err != nil {
		t.Fatalf("rdma link add: %v (%s)", err, out)
	}
	// The daemon asks the runner to look again on the new device's
	// uevent (the runner no longer polls the device list, #29 item 1):
	// this test stands in for the daemon.
	r.Rescan()
	p = probeWait(t, r, 30*time.Second, "back after rdma link add", func(p loopback.PortResult) bool {
		return p.State == loopback.StateOK && p.UpdatedAt.After(start)
	})
	deadline := time.Now().Add(10 * time.Second)
	for pool.Device(verbsDev) == nil && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if pool.Device(verbsDev) == nil {
		t.Errorf("pool did not re-register %s after it returned: %+v", verbsDev, pool.Stats())
	}
}

// TestProbeCPU measures the CPU the Runner adds probing one port at 1 Hz
// (the default): getrusage of this process over RDMAD_PROBE_CPU_SECONDS
// (default 10; docs/BENCHMARKS.md uses 30), first idle as a baseline, then
// probing; the probe's cost is the difference. User and system time are
// kept apart: with Soft-RoCE the kernel does the NIC's work (packet build,
// ACKs, completions) inside our post_send syscalls and charges it to us as
// system time, which a hardware adapter does not. Both are logged; the
// goal (well under 1% of a core) is reported in docs/BENCHMARKS.md, and the
// test fails only on a probe that spins.
func TestProbeCPU(t *testing.T) {
	verbsRequireVM(t)
	secs := 10
	if v, err := strconv.Atoi(os.Getenv("RDMAD_PROBE_CPU_SECONDS")); err == nil && v > 0 {
		secs = v
	}
	d := time.Duration(secs) * time.Second
	u0, s0 := probeCPU(t)
	w0 := time.Now()
	time.Sleep(d)
	u1, s1 := probeCPU(t)
	idleWall := time.Since(w0)

	r := probeStart(t, loopback.Config{Interval: time.Second})
	probeWait(t, r, 30*time.Second, "first ok round", func(p loopback.PortResult) bool { return p.State == loopback.StateOK })
	u2, s2 := probeCPU(t)
	w2, rounds0 := time.Now(), probeRounds(r)
	time.Sleep(d)
	u3, s3 := probeCPU(t)
	wall, rounds := time.Since(w2), probeRounds(r)-rounds0
	pct := func(cpu, wall time.Duration) float64 { return 100 * float64(cpu) / float64(wall) }
	idleU, idleS := pct(u1-u0, idleWall), pct(s1-s0, idleWall)
	probU, probS := pct(u3-u2, wall), pct(s3-s2, wall)
	p, _ := probePort(r)
	t.Logf("idle process: user %.3f%% sys %.3f%% of a core over %v", idleU, idleS, idleWall.Round(time.Millisecond))
	t.Logf("probing rxe0/1 at 1 Hz (%d rounds over %v): user %.3f%% sys %.3f%% of a core; the probe adds user %.3f%% + sys %.3f%% = %.3f%% (%v per round)",
		rounds, wall.Round(time.Millisecond), probU, probS, probU-idleU, probS-idleS, probU-idleU+probS-idleS,
		time.Duration(float64(u3-u2+s3-s2)/float64(max(rounds, 1))))
	t.Logf("1 Hz RTT p50: warm-up write %v (cold: the VM idles between rounds), then write %v read %v send %v",
		p.Warmup.P50, p.Write.P50, p.Read.P50, p.Send.P50)
	if rounds < uint64(secs)-2 {
		t.Errorf("only %d rounds in %v at 1 Hz", rounds, wall)
	}
	// The goal (well under 1% of a core) is a measured figure, reported in
	// docs/BENCHMARKS.md; under TCG with other VMs on the same two cores it
	// varies too much to gate on. This bound catches what must never
	// happen: a probe that spins or polls at idle.
	if probU-idleU >= 10 {
		t.Errorf("the probe loop adds %.3f%% of a core of user time at 1 Hz: it must not spin between rounds", probU-idleU)
	}
}

func probeRounds(r *loopback.Runner) uint64 {
	p, _ := probePort(r)
	return p.Rounds
}

// probeCPU returns this process's user and system CPU time.
func probeCPU(t *testing.T) (user, sys time.Duration) {
	t.Helper()
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}

var probeLatLine = regexp.MustCompile(`(?m)^\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)`)

// TestProbeRTTVsPerftest compares the probe's RDMA WRITE RTT median with
// ib_write_lat's on the same rxe port in the same VM: perftest reports
// one-way latency (half its ping-pong RTT), so its RTT is 2 x t_typical.
// The goal is probe <= 1.10 x perftest; RDMAD_PROBE_RTT_STRICT=1 makes
// missing it a failure (TCG timing is too noisy to gate every run on).
func TestProbeRTTVsPerftest(t *testing.T) {
	verbsRequireVM(t)
	if _, err := verbsRun(10*time.Second, "sh", "-c", "command -v ib_write_lat"); err != nil {
		t.Skip("ib_write_lat (perftest) is not installed in this VM")
	}
	c := verbsOpen(t)
	pa, err := c.QueryPort(1)
	if err != nil {
		t.Fatal(err)
	}
	table, err := c.GIDTable(1)
	if err != nil {
		t.Fatal(err)
	}
	g, _ := verbs.PickGID(table, pa.LinkLayer)
	c.Close()
	const iters, size = 1000, 64
	args := []string{"-d", verbsDev, "-x", strconv.Itoa(g.Index), "-n", strconv.Itoa(iters), "-s", strconv.Itoa(size), "-F"}
	// perftest calibrates its cycle counter against the clock before it
	// measures; under TCG that calibration sometimes fails ("Correlation
	// coefficient r^2: 0.87 < 0.9") and every figure comes out "inf". That
	// is perftest's, not a result: it is run again, up to three times.
	var m []string
	for attempt := 1; m == nil; attempt++ {
		srvDone := make(chan error, 1)
		go func() {
			_, err := verbsRun(120*time.Second, "ib_write_lat", args...)
			srvDone <- err
		}()
		time.Sleep(2 * time.Second)
		out, err := verbsRun(120*time.Second, "ib_write_lat", append(args, "127.0.0.1")...)
		if err != nil {
			t.Fatalf("ib_write_lat client: %v", err)
		}
		if err := <-srvDone; err != nil {
			t.Fatalf("ib_write_lat server: %v", err)
		}
		if m = probeLatLine.FindStringSubmatch(out); m == nil {
			if attempt == 3 {
				t.Fatalf("no result line in ib_write_lat output after %d runs; the last:\n%s", attempt, out)
			}
			t.Logf("ib_write_lat run %d gave no figures (its clock calibration under the emulator); again", attempt)
		}
	}
	typical, _ := strconv.ParseFloat(m[5], 64)
	perfRTT := time.Duration(2 * typical * float64(time.Microsecond))

	// Rounds 10 ms apart: the probe sleeps between rounds as it does in
	// production (1 s apart), and its warm-up WRITE, not the measured one,
	// pays for waking the path. perftest never sleeps.
	r := probeStart(t, loopback.Config{Interval: 10 * time.Millisecond, Window: iters, Payload: size})
	p := probeWait(t, r, 120*time.Second, fmt.Sprintf("%d probe rounds", iters), func(p loopback.PortResult) bool { return p.Write.Count >= iters })
	ratio := float64(p.Write.P50) / float64(perfRTT)
	t.Logf("ib_write_lat -n %d -s %d: t_typical %.2f us one-way = RTT %v; probe RDMA WRITE RTT p50 %v p99 %v max %v (%d samples); ratio %.2f",
		iters, size, typical, perfRTT, p.Write.P50, p.Write.P99, p.Write.Max, p.Write.Count, ratio)
	t.Logf("probe READ p50 %v, SEND/RECV p50 %v, warm-up WRITE p50 %v p99 %v (ratio to perftest %.2f)",
		p.Read.P50, p.Send.P50, p.Warmup.P50, p.Warmup.P99, float64(p.Warmup.P50)/float64(perfRTT))
	if p.Write.P50 <= 0 || perfRTT <= 0 {
		t.Fatalf("no measurement: probe p50 %v, perftest RTT %v", p.Write.P50, perfRTT)
	}
	if ratio > 1.10 {
		msg := fmt.Sprintf("probe RTT p50 %v is %.2f x perftest's %v, goal <= 1.10", p.Write.P50, ratio, perfRTT)
		if os.Getenv("RDMAD_PROBE_RTT_STRICT") == "1" {
			t.Error(msg)
		} else {
			t.Log(msg)
		}
	}
}
