package packaging

import (
	"bufio"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/internal/testenv"
)

// node-problem-detector's own custom plugin monitor on rdmad's plugin
// config: testdata/npd is a module that requires NPD (v1.36.0, from the Go
// module proxy) and runs its pkg/custompluginmonitor, the code behind
// --config.custom-plugin-monitor, printing each status it sends to NPD's
// exporters. It runs the shipped config with two changes only a test needs:
// the rule's path is the rdmactl built here, and it runs every second.

// npdStatus is the part of NPD's types.Status the test reads.
type npdStatus struct {
	Source     string `json:"source"`
	Conditions []struct {
		Type, Status, Reason, Message string
	} `json:"conditions"`
}

// buildNPDMonitor builds testdata/npd.
func buildNPDMonitor(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "npd-custom-plugin")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = "testdata/npd"
	if out, err := cmd.CombinedOutput(); err != nil {
		msg := "building node-problem-detector's custom plugin monitor (testdata/npd, modules from the Go module proxy): " + err.Error() + "\n" + string(out)
		if testenv.Strict() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return bin
}

// switchSocket serves GET /v1/health with whatever verdict v holds.
func switchSocket(t *testing.T, v *atomic.Pointer[apitype.Health]) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "rdmad-npd")
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
		json.NewEncoder(w).Encode(v.Load())
	})
	srv := &http.Server{Handler: mux}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return sock
}

// TestNPDConditionFollowsCause runs NPD's plugin monitor on
// npd/rdmad-health.json while the verdict changes: a problem, a problem
// of another type (rdmactl still exits 1), ok, unknown. The condition
// RDMAUnhealthy must say each cause in turn. Before, the config disabled
// enable_message_change_based_condition_update: NPD kept the first
// problem's message while the second one lasted. A message longer than
// NPD's max_output_length ends after a whole word with "..." (before,
// rdmactl cut it at the 77th byte, mid-word).
func TestNPDConditionFollowsCause(t *testing.T) {
	npd := buildNPDMonitor(t)
	rdmactl := buildRdmactl(t)

	var cfg map[string]any
	b, err := os.ReadFile("npd/rdmad-health.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	rules := cfg["rules"].([]any)
	if len(rules) != 1 {
		t.Fatalf("%d rules; the test knows one", len(rules))
	}
	rule := rules[0].(map[string]any)
	if rule["path"] != "/usr/bin/rdmactl" {
		t.Fatalf("rule path %v, want /usr/bin/rdmactl", rule["path"])
	}
	rule["path"] = rdmactl
	cfg["pluginConfig"].(map[string]any)["invoke_interval"] = "1s"
	maxLen := int(cfg["pluginConfig"].(map[string]any)["max_output_length"].(float64))
	cfgFile := filepath.Join(t.TempDir(), "rdmad-health.json")
	b, _ = json.Marshal(cfg)
	if err := os.WriteFile(cfgFile, b, 0o644); err != nil {
		t.Fatal(err)
	}

	portDown := verdicts["problem"]
	portDownMsg := portDown.Conditions[0].Message
	flapMsg := "mlx5_0/1 (ens1f0) went down 7 times in 10m0s: check the cable, the transceiver and the switch port's error counters"
	flapping := apitype.Health{Status: apitype.ConditionProblem, Conditions: []apitype.Condition{
		{Type: apitype.CondPortFlapping, Status: apitype.ConditionProblem, Reason: "Flapping", Objects: []string{"mlx5_0/1"}, Message: flapMsg}}}
	var v atomic.Pointer[apitype.Health]
	v.Store(&portDown)
	sock := switchSocket(t, &v)

	cmd := exec.Command(npd, "-config", cfgFile)
	cmd.Env = append(os.Environ(), "RDMAD_SOCKET="+sock)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	statuses := make(chan npdStatus, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var s npdStatus
			if json.Unmarshal(sc.Bytes(), &s) == nil {
				statuses <- s
			}
		}
		close(statuses)
	}()

	// await waits for NPD to send RDMAUnhealthy as ok says.
	type cond = struct{ Type, Status, Reason, Message string }
	await := func(step string, ok func(c cond) bool) cond {
		t.Helper()
		var last cond
		deadline := time.After(20 * time.Second)
		for {
			select {
			case s, open := <-statuses:
				if !open {
					t.Fatalf("%s: NPD's monitor ended; stderr:\n%s", step, stderr.String())
				}
				for _, c := range s.Conditions {
					if c.Type == "RDMAUnhealthy" && s.Source == "rdmad" {
						last = c
						if ok(c) {
							return c
						}
					}
				}
			case <-deadline:
				t.Fatalf("%s: RDMAUnhealthy is still %+v after 20s", step, last)
			}
		}
	}
	// wordCut reports whether msg is full, or full cut after a whole word
	// with "..." within NPD's limit.
	wordCut := func(msg, full string) bool {
		if msg == full {
			return len(msg) <= maxLen
		}
		head, ok := strings.CutSuffix(msg, "...")
		rest, isPrefix := strings.CutPrefix(full, head)
		return ok && isPrefix && len(msg) <= maxLen && rest != "" && strings.ContainsRune(" ,;:.", rune(rest[0]))
	}

	c := await("PortDown", func(c cond) bool { return c.Status == "True" })
	if full := "PortDown: " + portDownMsg; c.Reason != "RDMAHealthCheckFailed" || !wordCut(c.Message, full) {
		t.Errorf("PortDown: condition %+v; want reason RDMAHealthCheckFailed and %q cut after a word within %d bytes", c, full, maxLen)
	}
	v.Store(&flapping)
	c = await("PortFlapping after PortDown", func(c cond) bool {
		return c.Status == "True" && strings.HasPrefix(c.Message, "PortFlapping: ")
	})
	if full := "PortFlapping: " + flapMsg; !wordCut(c.Message, full) {
		t.Errorf("PortFlapping: message %q; want %q cut after a word within %d bytes", c.Message, full, maxLen)
	}
	ok := verdicts["ok"]
	v.Store(&ok)
	c = await("ok", func(c cond) bool { return c.Status == "False" })
	if c.Reason != "RDMAHealthy" || c.Message != "rdmad: every RDMA health check passes" {
		t.Errorf("ok: condition %+v; want the config's default", c)
	}
	unknown := verdicts["unknown"]
	v.Store(&unknown)
	c = await("unknown", func(c cond) bool { return c.Status == "Unknown" })
	if c.Message != "NoDevice: the RDMA inventory has not been read yet" {
		t.Errorf("unknown: message %q", c.Message)
	}
}
