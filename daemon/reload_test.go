package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client"
	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/internal/syncbuf"
)

// runDaemon runs Run with opts until the test ends and returns a client of
// the socket sock once rdmad serves there past "starting".
func runDaemon(t *testing.T, sock string, opts Options) *client.Client {
	t.Helper()
	if opts.Stderr == nil {
		opts.Stderr = testWriter{t}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, opts) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("rdmad did not stop 10s after cancel")
		}
	})
	c := client.New(sock)
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err := c.Status(ctx)
		if err == nil && s.State != apitype.Starting {
			return c
		}
		select {
		case err := <-done:
			t.Fatalf("Run returned before serving: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("rdmad did not come up on %s: %v", sock, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// scrape GETs /metrics on addr; ok reports a 200 with rdmad's metrics.
func scrape(addr string) (ok bool, err error) {
	cl := http.Client{Timeout: 5 * time.Second}
	resp, err := cl.Get("http://" + addr + "/metrics")
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode == http.StatusOK && strings.Contains(string(b), "rdmad_build_info"), nil
}

func mustServe(t *testing.T, addr, when string) {
	t.Helper()
	if ok, err := scrape(addr); !ok {
		t.Fatalf("%s: GET /metrics on %s: %v, want rdmad's metrics", when, addr, err)
	}
}

func mustRefuse(t *testing.T, addr, when string) {
	t.Helper()
	_, err := scrape(addr)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("%s: GET /metrics on %s: %v, want connection refused", when, addr, err)
	}
}

// TestMetricsListenReload: a reload moves the TCP metrics listener to the
// new [metrics] listen (the old address then refuses); a new address that
// cannot be bound leaves the old one serving, with the metrics component
// in error saying so; an address on the same port as the old one (which
// can only be bound once the old listener is closed) is taken; an empty
// listen closes it. A changed [daemon] socket is reported as pending a
// restart (reload answer, status, log), and the socket stays where it is.
func TestMetricsListenReload(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "rdmad.sock")
	cfgPath := filepath.Join(dir, "rdmad.toml")
	write := func(listen, extra string) {
		t.Helper()
		body := "[daemon]\nsocket = \"" + sock + "\"\n" + extra + "[metrics]\nlisten = \"" + listen + "\"\n"
		if err := os.WriteFile(cfgPath, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	addrA := "127.0.0.1:" + freePort(t)
	addrB := "127.0.0.1:" + freePort(t)
	write(addrA, "")
	logs := &syncbuf.Buffer{}
	c := runDaemon(t, sock, Options{ConfigPath: cfgPath, ConfigRequired: true, SysfsRoot: "../inventory/testdata/roce-ib", Version: "test",
		Stderr: io.MultiWriter(logs, testWriter{t})})
	ctx := context.Background()
	mustServe(t, addrA, "at start")

	reload := func(when string) apitype.ReloadResult {
		t.Helper()
		res, err := c.Reload(ctx)
		if err != nil || !res.OK {
			t.Fatalf("%s: reload: %+v, %v", when, res, err)
		}
		return res
	}
	metricsComponent := func() apitype.Component {
		t.Helper()
		s, err := c.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return s.Components[apitype.ComponentMetrics]
	}

	// A to B.
	write(addrB, "")
	if res := reload("A to B"); len(res.RestartNeeded) != 0 {
		t.Errorf("A to B: restart_needed %q, want none ([metrics] listen applies on reload)", res.RestartNeeded)
	}
	mustServe(t, addrB, "after the move to B")
	mustRefuse(t, addrA, "after the move to B")
	if m := metricsComponent(); m.State != apitype.OK {
		t.Errorf("after the move to B: metrics component %+v, want ok", m)
	}

	// B to an address someone else holds: B keeps serving.
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	write(busy.Addr().String(), "")
	reload("B to a busy port")
	mustServe(t, addrB, "after a move to a busy port")
	if m := metricsComponent(); m.State != apitype.Error || !strings.Contains(m.Error, busy.Addr().String()) ||
		!strings.Contains(m.Error, "still served on "+addrB) {
		t.Errorf("after a move to a busy port: metrics component %+v, want error naming %s and that %s still serves", m, busy.Addr(), addrB)
	}

	// Back to B, which still serves: the error goes.
	write(addrB, "")
	reload("back to B")
	if m := metricsComponent(); m.State != apitype.OK || m.Error != "" {
		t.Errorf("back to B after the failed move: metrics component %+v, want ok", m)
	}

	// The same port by another name: taken once B is closed.
	_, portB, _ := net.SplitHostPort(addrB)
	write("localhost:"+portB, "")
	reload("B to localhost on B's port")
	mustServe(t, addrB, "after the move to localhost:"+portB)
	if m := metricsComponent(); m.State != apitype.OK {
		t.Errorf("after the move to localhost:%s: metrics component %+v, want ok", portB, m)
	}

	// A socket path that changes only on restart.
	moved := filepath.Join(dir, "moved.sock")
	if err := os.WriteFile(cfgPath, []byte("[daemon]\nsocket = \""+moved+"\"\n[metrics]\nlisten = \""+addrA+"\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res := reload("socket moved")
	if !slices.Equal(res.RestartNeeded, []string{"daemon.socket"}) {
		t.Errorf("socket moved: restart_needed %q, want [daemon.socket]", res.RestartNeeded)
	}
	s, err := c.Status(ctx) // still on the old socket
	if err != nil {
		t.Fatalf("status on the old socket after the socket key changed: %v", err)
	}
	if !slices.Equal(s.Config.PendingRestart, []string{"daemon.socket"}) {
		t.Errorf("status config.pending_restart %q, want [daemon.socket]", s.Config.PendingRestart)
	}
	if _, err := os.Stat(moved); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a socket appeared at the new path %s before a restart: %v", moved, err)
	}
	if l := logs.String(); !strings.Contains(l, "takes effect only when rdmad restarts") || !strings.Contains(l, "key=daemon.socket") ||
		!strings.Contains(l, "configured="+moved) {
		t.Errorf("the log does not say that daemon.socket waits for a restart:\n%s", l)
	}
	mustServe(t, addrA, "after the move back to A")
	mustRefuse(t, addrB, "after the move back to A")

	// Back to the running socket: nothing pending. Then no listener.
	write("", "")
	if res := reload("listen off"); len(res.RestartNeeded) != 0 {
		t.Errorf("socket back: restart_needed %q, want none", res.RestartNeeded)
	}
	mustRefuse(t, addrA, "after listen was emptied")
	s, err = c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Config.PendingRestart) != 0 || s.Components[apitype.ComponentMetrics].State != apitype.OK {
		t.Errorf("with the socket back and no listener: pending_restart %q, metrics %+v; want none and ok",
			s.Config.PendingRestart, s.Components[apitype.ComponentMetrics])
	}
}

// TestPeersOffNeedsRestart: [probe] peers = false while the peer probes run
// does not stop them; the reload answer, the status and the log say it
// waits for a restart, and turning it back on clears that.
func TestPeersOffNeedsRestart(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "rdmad.sock")
	cfgPath := filepath.Join(dir, "rdmad.toml")
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(udp.LocalAddr().String())
	udp.Close()
	write := func(peers bool) {
		t.Helper()
		body := fmt.Sprintf("[daemon]\nsocket = %q\n[probe]\nport = %s\npeers = %v\n[[peer]]\naddress = \"127.0.0.9\"\n", sock, port, peers)
		if err := os.WriteFile(cfgPath, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(true)
	logs := &syncbuf.Buffer{}
	c := runDaemon(t, sock, Options{ConfigPath: cfgPath, ConfigRequired: true, SysfsRoot: "../inventory/testdata/roce-ib", Version: "test",
		Stderr: io.MultiWriter(logs, testWriter{t})})
	ctx := context.Background()

	write(false)
	res, err := c.Reload(ctx)
	if err != nil || !res.OK || !slices.Equal(res.RestartNeeded, []string{"probe.peers"}) {
		t.Fatalf("reload with peers = false while they run: %+v, %v; want ok with restart_needed [probe.peers]", res, err)
	}
	s, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.Config.PendingRestart, []string{"probe.peers"}) {
		t.Errorf("status config.pending_restart %q, want [probe.peers]", s.Config.PendingRestart)
	}
	if !strings.Contains(logs.String(), "key=probe.peers") {
		t.Errorf("the log does not say that probe.peers waits for a restart:\n%s", logs.String())
	}

	write(true)
	if res, err := c.Reload(ctx); err != nil || !res.OK || len(res.RestartNeeded) != 0 {
		t.Fatalf("reload with peers = true again: %+v, %v; want nothing pending", res, err)
	}
	if s, err := c.Status(ctx); err != nil || len(s.Config.PendingRestart) != 0 {
		t.Errorf("status after peers = true again: pending_restart %q, %v; want none", s.Config.PendingRestart, err)
	}
}
