package daemon

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client"
)

// notifySocket listens on a datagram socket and set NOTIFY_SOCKET to it, as
// systemd does for Type=notify services.
func notifySocket(t *testing.T) <-chan string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	t.Setenv("NOTIFY_SOCKET", path)
	msgs := make(chan string, 256)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				close(msgs)
				return
			}
			msgs <- string(buf[:n])
		}
	}()
	return msgs
}

// expect waits for a message containing every one of want.
func expect(t *testing.T, msgs <-chan string, timeout time.Duration, want ...string) string {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case m, ok := <-msgs:
			if !ok {
				t.Fatalf("notify socket closed while waiting for %q", want)
			}
			all := true
			for _, w := range want {
				all = all && strings.Contains(m, w)
			}
			if all {
				return m
			}
		case <-deadline:
			t.Fatalf("no notify message with %q within %v", want, timeout)
		}
	}
}

func TestNotifyLifecycle(t *testing.T) {
	msgs := notifySocket(t)
	t.Setenv("WATCHDOG_USEC", "200000") // pings every 100 ms
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))
	dir := t.TempDir()
	cfg := filepath.Join(dir, "rdmad.toml")
	os.WriteFile(cfg, []byte("[daemon]\nlog_level = \"debug\"\n"), 0o644)
	sock := filepath.Join(dir, "rdmad.sock")

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{ConfigPath: cfg, Socket: sock, SysfsRoot: "../inventory/testdata/roce-ib",
			Version: "test", Stderr: testWriter{t}})
	}()

	ready := expect(t, msgs, 10*time.Second, "READY=1", "STATUS=")
	if !strings.Contains(ready, "3 devices, 3/4 ports active") {
		t.Errorf("READY status %q lacks the inventory summary", ready)
	}
	// READY=1 only once the socket serves.
	if _, err := client.New(sock).Status(context.Background()); err != nil {
		t.Fatalf("socket not serving after READY=1: %v", err)
	}
	expect(t, msgs, 2*time.Second, "WATCHDOG=1")
	expect(t, msgs, 2*time.Second, "WATCHDOG=1")

	// SIGHUP: RELOADING=1 with a timestamp, then READY=1 again.
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	rl := expect(t, msgs, 5*time.Second, "RELOADING=1")
	if !strings.Contains(rl, "MONOTONIC_USEC=") {
		t.Errorf("RELOADING=1 without MONOTONIC_USEC: %q", rl)
	}
	expect(t, msgs, 5*time.Second, "READY=1", "config generation 2")

	cancel()
	expect(t, msgs, 5*time.Second, "STOPPING=1")
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return within 5s of cancellation")
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("socket left behind after stop: %v", err)
	}
}

// TestWatchdogStopsWhenLoopHangs proves the pings come from the main loop:
// with the test fault switched on, a hung loop sends no more WATCHDOG=1.
func TestWatchdogStopsWhenLoopHangs(t *testing.T) {
	msgs := notifySocket(t)
	t.Setenv("WATCHDOG_USEC", "100000")
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))
	t.Setenv("RDMAD_TEST_FAULT", "hang-on-sigusr2")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "rdmad.toml")
	os.WriteFile(cfg, nil, 0o644)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{ConfigPath: cfg, Socket: filepath.Join(dir, "s"), SysfsRoot: dir, Stderr: testWriter{t}})
	}()
	expect(t, msgs, 10*time.Second, "READY=1")
	expect(t, msgs, 2*time.Second, "WATCHDOG=1")
	syscall.Kill(os.Getpid(), syscall.SIGUSR2)
	time.Sleep(200 * time.Millisecond) // let the loop take the signal
	drain := time.After(500 * time.Millisecond)
	pings := 0
loop:
	for {
		select {
		case m := <-msgs:
			if strings.Contains(m, "WATCHDOG=1") {
				pings++
			}
		case <-drain:
			break loop
		}
	}
	if pings > 0 {
		t.Errorf("%d watchdog pings while the main loop hung", pings)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}
