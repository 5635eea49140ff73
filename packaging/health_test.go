package packaging

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
)

// The scheduler files rdmad ships (packaging/npd, packaging/nhc), run the
// way their consumers run them: the exact command line of the
// node-problem-detector rule here and node-problem-detector's own plugin
// monitor in npd_real_test.go, and LBNL NHC's own driver in
// nhc_real_test.go, each against an rdmad-like socket that answers a
// healthy, a problem and an unknown verdict, and against no rdmad.

// buildRdmactl builds rdmactl as the package does (no cgo).
func buildRdmactl(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "rdmactl")
	cmd := exec.Command("go", "build", "-o", bin, "../cmd/rdmactl")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build rdmactl: %v\n%s", err, out)
	}
	return bin
}

// verdictSocket serves GET /v1/health with h on a Unix socket.
func verdictSocket(t *testing.T, h apitype.Health) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "rdmad-health")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "rdmad.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/health", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(h)
	})
	srv := &http.Server{Handler: mux}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return sock
}

var verdicts = map[string]apitype.Health{
	"ok": {Healthy: true, Status: apitype.ConditionOK, Conditions: []apitype.Condition{
		{Type: apitype.CondPortDown, Status: apitype.ConditionOK, Reason: "AllPortsActive", Message: "1 of 1 ports ACTIVE"}}},
	"problem": {Status: apitype.ConditionProblem, Conditions: []apitype.Condition{
		{Type: apitype.CondPortDown, Status: apitype.ConditionProblem, Reason: "PortNotActive", Objects: []string{"rxe0/1"},
			Message: "rxe0/1 (eth0) is DOWN/Disabled: check the cable, the switch port and `ip link`; list a port in [health] ignore if it is not meant to be used"}}},
	"unknown": {Status: apitype.ConditionUnknown, Conditions: []apitype.Condition{
		{Type: apitype.CondNoDevice, Status: apitype.ConditionUnknown, Reason: "NotReadYet", Message: "the RDMA inventory has not been read yet"}}},
}

// npdConfig is the part of node-problem-detector's custom plugin config
// (pkg/custompluginmonitor/types) that decides how it runs the plugin.
type npdConfig struct {
	Plugin       string `json:"plugin"`
	PluginConfig struct {
		InvokeInterval  string `json:"invoke_interval"`
		Timeout         string `json:"timeout"`
		MaxOutputLength int    `json:"max_output_length"`
		Concurrency     int    `json:"concurrency"`
	} `json:"pluginConfig"`
	Source     string `json:"source"`
	Conditions []struct {
		Type, Reason, Message string
	} `json:"conditions"`
	Rules []struct {
		Type, Condition, Reason, Path, Timeout string
		Args                                   []string
	} `json:"rules"`
}

func TestNPDPlugin(t *testing.T) {
	var cfg npdConfig
	b, err := os.ReadFile("npd/rdmad-health.json")
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	if err := dec.Decode(&cfg); err != nil {
		t.Fatalf("npd/rdmad-health.json: %v", err)
	}
	if cfg.Plugin != "custom" || len(cfg.Rules) != 1 || len(cfg.Conditions) != 1 || cfg.PluginConfig.MaxOutputLength != 80 {
		t.Fatalf("config %+v: want one custom rule and condition, max_output_length 80", cfg)
	}
	rule := cfg.Rules[0]
	if rule.Type != "permanent" || rule.Condition != cfg.Conditions[0].Type || rule.Path != "/usr/bin/rdmactl" {
		t.Fatalf("rule %+v: want a permanent rule on %s running /usr/bin/rdmactl", rule, cfg.Conditions[0].Type)
	}
	timeout, err := time.ParseDuration(rule.Timeout)
	if err != nil {
		t.Fatalf("rule timeout %q: %v", rule.Timeout, err)
	}
	rdmactl := buildRdmactl(t)
	run := func(sock string) (int, string) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, rdmactl, rule.Args...) // the rule's path, built here
		cmd.Env = append(os.Environ(), "RDMAD_SOCKET="+sock)
		out, err := cmd.Output()
		if ctx.Err() != nil {
			t.Fatalf("%v took longer than the rule's timeout %s", rule.Args, timeout)
		}
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, string(out)
	}
	for name, want := range map[string]int{"ok": 0, "problem": 1, "unknown": 2} {
		code, out := run(verdictSocket(t, verdicts[name]))
		line := strings.TrimSuffix(out, "\n")
		if code != want || strings.Contains(line, "\n") || len(line) > cfg.PluginConfig.MaxOutputLength || line == "" {
			t.Errorf("%s: exit %d (want %d: NPD's 0 ok, 1 non-ok, 2 unknown), output %q (one line of at most %d bytes)",
				name, code, want, out, cfg.PluginConfig.MaxOutputLength)
		}
		if name == "problem" && !strings.HasPrefix(line, "PortDown: rxe0/1") {
			t.Errorf("problem: %q does not name the condition and port", line)
		}
	}
	// No rdmad: rdmactl decides alone; this host has no RDMA device, so
	// its inventory read is a problem, never an ok.
	if code, out := run(filepath.Join(t.TempDir(), "gone.sock")); code == 0 || len(strings.TrimSpace(out)) > 80 {
		t.Errorf("without rdmad: exit %d, %q", code, out)
	}
}
