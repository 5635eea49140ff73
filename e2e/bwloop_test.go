//go:build e2e

package e2e

import (
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The loopback bandwidth tests (#26 item 4) run on node 1 alone: RC
// between two queue pairs of rxe0's port, through Soft-RoCE, as
// ib_write_bw to the node's own address measures it.

// loopResult is the part of rdmactl bw --loopback --json the tests read.
type loopResult struct {
	Loopback bool    `json:"loopback"`
	Op       string  `json:"op"`
	QPs      int     `json:"qps"`
	Elapsed  int64   `json:"elapsed_ns"`
	Messages uint64  `json:"messages"`
	Gbps     float64 `json:"gbps"`
	MsgRate  float64 `json:"msg_rate"`
	Local    string  `json:"local"`
	MinGbps  float64 `json:"min_gbps"`
	Low      bool    `json:"low"`
}

// loopRun runs rdmactl --json bw --loopback rxe0 with args on node 1.
func loopRun(t *testing.T, args ...string) loopResult {
	t.Helper()
	full := append([]string{"--json", "bw", "--loopback", "rxe0"}, args...)
	out := mustRun(t, "rdmactl", full...)
	var r loopResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("rdmactl %s: %v in %q", strings.Join(full, " "), err, out)
	}
	if !r.Loopback || r.Local != "rxe0/1" || r.Gbps <= 0 || r.Messages == 0 {
		t.Fatalf("rdmactl %s: %+v; want a loopback result of rxe0/1 with gbps > 0", strings.Join(full, " "), r)
	}
	return r
}

// TestLoopbackBandwidthVsPerftest compares rdmactl bw --loopback rxe0 with
// ib_write_bw to the node's own address in the same boot (64 KiB RDMA
// WRITEs for 5 s, one QP each, then rdmactl with 4 QPs), logs the figures
// (docs/BENCHMARKS.md records them with #26's goal of 0.8). The two tools
// run one after the other on an emulated CPU that other work shares, so
// the ratio swings by a quarter between runs (0.78 and 1.07 for the same
// code): it is logged against the goal, and the test fails only below
// loopbackFloor, about half the lowest ratio recorded: a loss that large
// is rdmad's, not the swing between two runs.
//
// The goal's figure is measured, not gated on: a benchmark's number,
// not a timed test's.
func TestLoopbackBandwidthVsPerftest(t *testing.T) {
	requireVM(t)
	if _, err := run("sh", "-c", "command -v ib_write_bw"); err != nil {
		t.Skip("ib_write_bw (perftest) is not installed in this VM")
	}
	waitActive(t)
	self := nodeAddr(t)

	args := []string{"-d", "rxe0", "-x", "1", "-s", "65536", "-D", "5", "--report_gbits", "-F"}
	srv := make(chan error, 1)
	go func() {
		_, err := run("ib_write_bw", args...)
		srv <- err
	}()
	time.Sleep(3 * time.Second)
	var perf string
	var err error
	for i := 0; i < 5; i++ {
		if perf, err = run("ib_write_bw", append(args, self)...); err == nil {
			break
		}
		time.Sleep(2 * time.Second) // the server may not listen yet under TCG
	}
	if err != nil {
		t.Fatalf("ib_write_bw client to %s: %v", self, err)
	}
	if err := <-srv; err != nil {
		t.Fatalf("ib_write_bw server: %v", err)
	}
	m := bwPerftestLine.FindStringSubmatch(perf)
	if m == nil {
		t.Fatalf("no result line in ib_write_bw's output:\n%s", perf)
	}
	perfGbps, _ := strconv.ParseFloat(m[4], 64)
	perfMpps, _ := strconv.ParseFloat(m[5], 64)

	r := loopRun(t, "--op", "write", "--size", "65536", "--duration", "5s")
	r4 := loopRun(t, "--op", "write", "--size", "65536", "--duration", "5s", "--qps", "4")
	ratio := r.Gbps / perfGbps
	t.Logf("ib_write_bw -d rxe0 -x 1 -s 65536 -D 5 %s (own address): %.3f Gb/s, %.0f msg/s; rdmactl bw --loopback rxe0 --op write --size 65536 --duration 5s: %.3f Gb/s, %.0f msg/s (%d messages); ratio %.2f; with --qps 4: %.3f Gb/s, %.0f msg/s (%d messages), ratio %.2f",
		self, perfGbps, perfMpps*1e6, r.Gbps, r.MsgRate, r.Messages, ratio, r4.Gbps, r4.MsgRate, r4.Messages, r4.Gbps/perfGbps)
	if perfGbps <= 0 {
		t.Fatalf("ib_write_bw measured %.3f Gb/s", perfGbps)
	}
	if r4.QPs != 4 {
		t.Errorf("--qps 4 ran %d QPs", r4.QPs)
	}
	if ratio < loopbackGoal {
		t.Logf("rdmactl bw --loopback is %.2f x ib_write_bw's figure, goal >= %.1f (TCG timing: recorded, not gated on)", ratio, loopbackGoal)
	}
	if ratio < loopbackFloor {
		t.Errorf("rdmactl bw --loopback reached %.2f x ib_write_bw's figure; below %.1f is more than the runs' swing: the loopback test lost bandwidth", ratio, loopbackFloor)
	}
}

// loopbackGoal is #26's goal for rdmactl bw --loopback against ib_write_bw
// to the node's own address; loopbackFloor the ratio below which the
// test fails (TestLoopbackBandwidthVsPerftest).
const (
	loopbackGoal  = 0.8
	loopbackFloor = 0.4
)

// TestLoopbackBandwidthHealth: with [health] min_loopback_gbps above what
// the port can reach, a loopback test raises LoopbackBandwidthLow (rdmactl
// check exits 1 naming it and the port), and a threshold below the figure
// clears it without a new test; a loopback test while another runs is
// refused.
func TestLoopbackBandwidthHealth(t *testing.T) {
	requireVM(t)
	healthDiag(t)
	waitActive(t)
	const dropin = "/etc/rdmad/rdmad.d/71-e2e-loopbw.toml"
	healthDropin(t, "71-e2e-loopbw.toml", "[health]\nmin_loopback_gbps = 100000\n")

	r := loopRun(t, "--duration", "2s")
	t.Logf("loopback: %.3f Gb/s, threshold %.0f Gb/s, low %v", r.Gbps, r.MinGbps, r.Low)
	if r.MinGbps != 100000 || !r.Low {
		t.Errorf("result %+v; want min_gbps 100000 and low", r)
	}
	waitFor(t, 10*time.Second, "rdmactl check exits 1 naming LoopbackBandwidthLow", func() (bool, string) {
		code, out := checkNow(t, "--format", "nhc")
		return code == 1 && strings.Contains(out, "LoopbackBandwidthLow") && strings.Contains(out, "rxe0/1"), strconv.Itoa(code) + ": " + out
	})
	if st, msg, objs := healthNow(t).cond("LoopbackBandwidthLow"); st != "problem" || len(objs) != 1 || objs[0] != "rxe0/1" || !strings.Contains(msg, "below its threshold 100000.00 Gb/s") {
		t.Errorf("LoopbackBandwidthLow %s %v %q; want a problem about rxe0/1 naming the threshold", st, objs, msg)
	}

	// A threshold below the figure clears it: the last result is judged
	// again at the reload.
	low := strconv.FormatFloat(r.Gbps/2, 'f', 6, 64)
	if err := os.WriteFile(dropin, []byte("[health]\nmin_loopback_gbps = "+low+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mustRun(t, "rdmactl", "reload")
	waitFor(t, 10*time.Second, "LoopbackBandwidthLow ok", func() (bool, string) {
		st, msg, _ := healthNow(t).cond("LoopbackBandwidthLow")
		return st == "ok", st + ": " + msg
	})

	// One test at a time: a loopback test while one runs is refused.
	first := make(chan error, 1)
	go func() {
		_, err := run("rdmactl", "bw", "--loopback", "rxe0", "--duration", "4s")
		first <- err
	}()
	time.Sleep(1500 * time.Millisecond)
	if _, err := run("rdmactl", "bw", "--loopback", "rxe0", "--duration", "1s"); err == nil || !strings.Contains(err.Error(), "one bandwidth test at a time") {
		t.Errorf("a second loopback test while one runs: %v; want a refusal (one at a time)", err)
	}
	if err := <-first; err != nil {
		t.Errorf("the first loopback test: %v", err)
	}
}

// TestLoopbackDuringPeerTest: a test to node 2 runs several queue pairs
// (--qps), and the node runs one bandwidth test at a time, loopback tests
// included: a loopback test while a test to node 2 runs is refused naming
// it, and a test to node 2 while a loopback test runs.
func TestLoopbackDuringPeerTest(t *testing.T) {
	other := peersOther(t)
	peersWait(t, 1, other, "up", 90*time.Second)
	bwEnable(t, true)
	t.Cleanup(func() { run("vmnode", "2", "rm", "-f", bwDropin); run("vmnode", "2", "rdmactl", "reload") })

	out := mustRun(t, "rdmactl", "--json", "bw", other, "--qps", "2", "--duration", "2s")
	var r loopResult
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.QPs != 2 || r.Gbps <= 0 || r.Loopback {
		t.Errorf("rdmactl bw %s --qps 2: %+v (%v); want 2 QPs and gbps > 0", other, r, err)
	}
	t.Logf("to %s with 2 QPs: %.3f Gb/s, %.0f msg/s", other, r.Gbps, r.MsgRate)

	for _, tc := range []struct {
		name          string
		first, second []string
		want          string
	}{
		{"loopback during a peer test", []string{"bw", other, "--duration", "4s"}, []string{"bw", "--loopback", "rxe0", "--duration", "1s"},
			"a bandwidth test to " + other + " runs on this node already"},
		{"peer test during a loopback test", []string{"bw", "--loopback", "rxe0", "--duration", "4s"}, []string{"bw", other, "--duration", "1s"},
			"a loopback bandwidth test of rxe0 runs on this node already"},
	} {
		first := make(chan error, 1)
		go func() {
			_, err := run("rdmactl", tc.first...)
			first <- err
		}()
		time.Sleep(1500 * time.Millisecond)
		_, err := run("rdmactl", tc.second...)
		if err == nil || !strings.Contains(err.Error(), "exit status 3") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want exit 3 saying %q", tc.name, err, tc.want)
		}
		if err := <-first; err != nil {
			t.Errorf("%s: the first test: %v", tc.name, err)
		}
	}
}
