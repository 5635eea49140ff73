package daemon

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client"
	"github.com/rdmad/rdmad/client/apitype"
)

// TestSinks runs the daemon on the inventory fixture with [metrics] listen
// set and checks the wiring end to end: /metrics on the socket and on TCP,
// /v1/watch events for a rejected reload, and a "bye" line at stop.
func TestSinks(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "rdmad.sock")
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := free.Addr().String()
	free.Close()
	cfgPath := filepath.Join(dir, "rdmad.toml")
	good := "[daemon]\nsocket = \"" + sock + "\"\n[metrics]\nlisten = \"" + addr + "\"\n"
	if err := os.WriteFile(cfgPath, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	root, _ := filepath.Abs("../inventory/testdata/roce-ib")

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{ConfigPath: cfgPath, ConfigRequired: true, SysfsRoot: root, Version: "test", Stderr: io.Discard})
	}()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("rdmad did not stop 10s after cancel")
		}
	}()

	c := client.New(sock)
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err := c.Status(ctx)
		if err == nil && s.State != "starting" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rdmad did not come up: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}

	body, err := c.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`rdmad_infiniband_state_id{device="mlx5_0",port="2"} 1`, `rdmad_component_up{component="metrics"} 1`, `rdmad_build_info{`, "go_goroutines "} {
		if !bytes.Contains(body, []byte(want)) {
			t.Errorf("GET /metrics on the socket lacks %s", want)
		}
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("metrics on [metrics] listen %s: %v", addr, err)
	}
	tcpBody, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Contains(tcpBody, []byte(`rdmad_infiniband_info{board_id="MT_0000000010"`)) {
		t.Errorf("GET /metrics on %s: %s\n%.300s", addr, resp.Status, tcpBody)
	}

	st, err := c.Watch(context.Background()) // outlives ctx, to see the bye line
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := os.WriteFile(cfgPath, []byte(good+"bogus = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if res, err := c.Reload(ctx); err != nil || res.OK {
		t.Fatalf("reload of a bad file: %+v, %v; want rejected", res, err)
	}
	var sawConfig bool
	for !sawConfig {
		ev, err := st.Next()
		if err != nil {
			t.Fatalf("watch: %v before the config error event", err)
		}
		sawConfig = ev.Type == apitype.EventConfig && ev.To == "error" && strings.Contains(ev.Message, "bogus")
	}
	body, err = c.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"rdmad_config_load_failures_total 1\n", "rdmad_config_last_load_failed 1\n"} {
		if !bytes.Contains(body, []byte(want)) {
			t.Errorf("after a rejected reload, /metrics lacks %q", want)
		}
	}

	cancel()
	for {
		ev, err := st.Next()
		if err != nil {
			t.Fatalf("watch ended with %v before a bye line", err)
		}
		if ev.Type == apitype.EventBye {
			break
		}
	}
}
