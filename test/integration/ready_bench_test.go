package integration

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/internal/syncbuf"
)

// BenchmarkReady measures how long rdmad takes from exec to READY=1 on a
// NOTIFY_SOCKET, as systemd waits for it (Type=notify), on this host's real
// /sys with no RDMA device, and its resident memory once idle (issue #18
// item 4; docs/BENCHMARKS.md, "Start and idle"). Each iteration is one
// start; run it with a count:
//
//	go test -run '^$' -bench Ready -benchtime 30x ./test/integration
//
// It reports the median and worst start (ready-p50-ms, ready-max-ms) and
// the idle VmRSS in KiB a second after READY (rss-KiB, median).
func BenchmarkReady(b *testing.B) {
	dir := b.TempDir()
	config := filepath.Join(dir, "rdmad.toml")
	if err := os.WriteFile(config, nil, 0o644); err != nil {
		b.Fatal(err)
	}
	notify := filepath.Join(dir, "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notify, Net: "unixgram"})
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()

	var ready []time.Duration
	var rss []int
	for b.Loop() {
		sock := filepath.Join(dir, "rdmad.sock")
		cmd := exec.Command(filepath.Join(bin, "rdmad"), "--config", config, "--socket", sock)
		cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+notify)
		log := new(syncbuf.Buffer)
		cmd.Stdout, cmd.Stderr = log, log
		t0 := time.Now()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		at, err := waitReady(conn, 10*time.Second)
		if err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			b.Fatalf("%v\n%s", err, log)
		}
		ready = append(ready, at.Sub(t0))
		b.StopTimer()
		time.Sleep(time.Second)
		rss = append(rss, vmRSS(b, cmd.Process.Pid))
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
		b.StartTimer()
	}
	slices.Sort(ready)
	slices.Sort(rss)
	b.ReportMetric(float64(ready[len(ready)/2].Microseconds())/1000, "ready-p50-ms")
	b.ReportMetric(float64(ready[len(ready)-1].Microseconds())/1000, "ready-max-ms")
	b.ReportMetric(float64(rss[len(rss)/2]), "rss-KiB")
}

// waitReady reads the notify socket until READY=1 comes and returns when
// it came.
func waitReady(conn *net.UnixConn, limit time.Duration) (time.Time, error) {
	buf := make([]byte, 4096)
	conn.SetReadDeadline(time.Now().Add(limit))
	for {
		n, err := conn.Read(buf)
		if err != nil {
			return time.Time{}, fmt.Errorf("waiting for READY=1: %w", err)
		}
		for _, l := range strings.Split(string(buf[:n]), "\n") {
			if l == "READY=1" {
				return time.Now(), nil
			}
		}
	}
}

// vmRSS returns pid's resident set in KiB.
func vmRSS(tb testing.TB, pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		tb.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kib, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			if err != nil {
				tb.Fatal(err)
			}
			return kib
		}
	}
	tb.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}
