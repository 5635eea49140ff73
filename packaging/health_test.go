package packaging

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
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
		MessageChange   bool   `json:"enable_message_change_based_condition_update"`
	} `json:"pluginConfig"`
	Source     string `json:"source"`
	Conditions []struct {
		Type, Reason, Message string
	} `json:"conditions"`
	Rules []npdRule `json:"rules"`
}

type npdRule struct {
	Type, Condition, Reason, Path, Timeout string
	Args                                   []string
}

// flag returns the value of --name in the rule's arguments.
func (r npdRule) flag(name string) (string, bool) {
	for i, a := range r.Args {
		if a == "--"+name && i+1 < len(r.Args) {
			return r.Args[i+1], true
		}
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// npdMaxBuffer is what NPD reads of a plugin's output at most
// (maxCustomPluginBufferBytes in pkg/custompluginmonitor/plugin): a
// max_output_length beyond it cuts nothing more.
const npdMaxBuffer = 4096

func readNPDConfig(t *testing.T) npdConfig {
	t.Helper()
	var cfg npdConfig
	b, err := os.ReadFile("npd/rdmad-health.json")
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	if err := dec.Decode(&cfg); err != nil {
		t.Fatalf("npd/rdmad-health.json: %v", err)
	}
	return cfg
}

// The aggregate condition: what existing alerts and remediation read.
const (
	npdAggregate       = "RDMAUnhealthy"
	npdAggregateReason = "RDMAHealthCheckFailed"
	npdAggregateOK     = "RDMAHealthy"
	npdAggregateOKMsg  = "rdmad: every RDMA health check passes"
)

// TestNPDConfig checks the shipped config as NPD reads it: the aggregate
// RDMAUnhealthy and one condition RDMA<Type> per condition type of
// apitype.ConditionTypes (a type added there without its rule fails here),
// each rule's condition declared, the reason of a type's rule the type
// itself, every rule running rdmactl check --format npd with --max-output
// equal to max_output_length (so that rdmactl, not NPD, cuts a long
// message, after a whole word), and timeouts such that a cycle of every
// rule, rdmad hung and each rdmactl waiting its --timeout, still ends
// within invoke_interval.
func TestNPDConfig(t *testing.T) {
	cfg := readNPDConfig(t)
	pc := cfg.PluginConfig
	if cfg.Plugin != "custom" || cfg.Source != "rdmad" || !pc.MessageChange {
		t.Errorf("plugin %q, source %q, enable_message_change_based_condition_update %v; want custom, rdmad, true", cfg.Plugin, cfg.Source, pc.MessageChange)
	}
	if pc.MaxOutputLength < 80 || pc.MaxOutputLength > npdMaxBuffer {
		t.Errorf("max_output_length %d: want 80 to %d (what NPD reads of a plugin's output)", pc.MaxOutputLength, npdMaxBuffer)
	}
	declared := map[string]struct{ reason, message string }{}
	for _, c := range cfg.Conditions {
		if _, dup := declared[c.Type]; dup {
			t.Errorf("condition %s declared twice", c.Type)
		}
		declared[c.Type] = struct{ reason, message string }{c.Reason, c.Message}
	}
	if d := declared[npdAggregate]; d.reason != npdAggregateOK || d.message != npdAggregateOKMsg {
		t.Errorf("%s: default %+v, want %s %q as before", npdAggregate, d, npdAggregateOK, npdAggregateOKMsg)
	}
	interval, err := time.ParseDuration(pc.InvokeInterval)
	if err != nil {
		t.Fatalf("invoke_interval %q: %v", pc.InvokeInterval, err)
	}
	global, err := time.ParseDuration(pc.Timeout)
	if err != nil {
		t.Fatalf("timeout %q: %v", pc.Timeout, err)
	}
	byType := map[string]npdRule{}
	ruled := map[string]bool{}
	aggregates := 0
	var waits []time.Duration // each rule's rdmactl --timeout, in the rules' order
	for _, r := range cfg.Rules {
		if r.Type != "permanent" || r.Path != "/usr/bin/rdmactl" || len(r.Args) < 3 || r.Args[0] != "check" {
			t.Errorf("rule %+v: want a permanent rule running /usr/bin/rdmactl check", r)
			continue
		}
		if _, ok := declared[r.Condition]; !ok {
			t.Errorf("rule %+v: its condition %s is not declared (NPD refuses the config)", r, r.Condition)
		}
		if ruled[r.Condition] {
			t.Errorf("condition %s has two rules: a rule that exits 0 clears what the other set True", r.Condition)
		}
		ruled[r.Condition] = true
		if f, _ := r.flag("format"); f != "npd" {
			t.Errorf("rule %s: --format %q, want npd", r.Condition, f)
		}
		if m, _ := r.flag("max-output"); m != strconv.Itoa(pc.MaxOutputLength) {
			t.Errorf("rule %s: --max-output %q, want max_output_length %d", r.Condition, m, pc.MaxOutputLength)
		}
		ruleTimeout, err := time.ParseDuration(r.Timeout)
		if err != nil || ruleTimeout > global {
			t.Errorf("rule %s: timeout %q, want a duration within the global %s", r.Condition, r.Timeout, global)
		}
		v, _ := r.flag("timeout")
		wait, err := time.ParseDuration(v)
		if err != nil || wait >= ruleTimeout {
			t.Errorf("rule %s: rdmactl --timeout %q, want less than the rule's timeout %s (NPD kills a run that lasts it)", r.Condition, v, ruleTimeout)
		}
		waits = append(waits, wait)
		typ, ok := r.flag("type")
		if !ok {
			aggregates++
			if r.Condition != npdAggregate || r.Reason != npdAggregateReason {
				t.Errorf("rule without --type %+v: want the aggregate %s, reason %s", r, npdAggregate, npdAggregateReason)
			}
			continue
		}
		if !slices.Contains(apitype.ConditionTypes, typ) {
			t.Errorf("rule %s: --type %q is no condition type", r.Condition, typ)
		}
		if r.Condition != "RDMA"+typ || r.Reason != typ {
			t.Errorf("rule for %s: condition %s reason %s, want RDMA%s and reason %s", typ, r.Condition, r.Reason, typ, typ)
		}
		byType[typ] = r
	}
	if aggregates != 1 {
		t.Errorf("%d aggregate rules, want one (%s)", aggregates, npdAggregate)
	}
	for _, typ := range apitype.ConditionTypes {
		if _, ok := byType[typ]; !ok {
			t.Errorf("condition type %s has no rule: add RDMA%s (reason %s, rdmactl check --type %s) to npd/rdmad-health.json", typ, typ, typ, typ)
		}
		if d := declared["RDMA"+typ]; d.reason != typ+"NotDetected" || d.message != "rdmad reports no "+typ+" problem" {
			t.Errorf("RDMA%s: default %+v", typ, d)
		}
	}
	if len(cfg.Conditions) != len(cfg.Rules) {
		t.Errorf("%d conditions, %d rules: a condition without a rule stays at its default forever", len(cfg.Conditions), len(cfg.Rules))
	}
	// NPD starts the rules in order, at most concurrency at once, and
	// waits for all of them before the next tick.
	slots := make([]time.Duration, max(pc.Concurrency, 1))
	for _, w := range waits {
		i := slices.Index(slots, slices.Min(slots))
		slots[i] += w + 100*time.Millisecond // and rdmactl's own start and local read
	}
	if cycle := slices.Max(slots); cycle > interval {
		t.Errorf("with rdmad hung a cycle of the %d rules takes %s, longer than invoke_interval %s", len(waits), cycle, interval)
	}
}

// fullVerdict is a verdict of every condition type, ok but for those
// given.
func fullVerdict(conds ...apitype.Condition) apitype.Health {
	h := apitype.Health{Status: apitype.ConditionOK}
	for _, typ := range apitype.ConditionTypes {
		c := apitype.Condition{Type: typ, Status: apitype.ConditionOK, Reason: "Fine", Message: "fine"}
		for _, o := range conds {
			if o.Type == typ {
				c = o
			}
		}
		if apitype.ConditionRank(c.Status) > apitype.ConditionRank(h.Status) {
			h.Status = c.Status
		}
		h.Conditions = append(h.Conditions, c)
	}
	h.Healthy = h.Status == apitype.ConditionOK
	return h
}

// TestNPDPlugin runs every rule's exact command line as NPD does, against
// an rdmad-like socket: NPD's exit convention per condition (0 ok, 1
// problem, 2 unknown), one line within max_output_length, the aggregate
// naming the worst condition, a type's rule its own condition's message.
func TestNPDPlugin(t *testing.T) {
	cfg := readNPDConfig(t)
	maxLen := cfg.PluginConfig.MaxOutputLength
	rdmactl := buildRdmactl(t)
	run := func(rule npdRule, sock string) (int, string) {
		timeout, err := time.ParseDuration(rule.Timeout)
		if err != nil {
			t.Fatalf("rule timeout %q: %v", rule.Timeout, err)
		}
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
		line := strings.TrimSuffix(string(out), "\n")
		if strings.Contains(line, "\n") || len(line) > maxLen || line == "" {
			t.Errorf("%v: output %q; want one line of at most %d bytes", rule.Args, out, maxLen)
		}
		return code, line
	}
	down := verdicts["problem"].Conditions[0]
	unknown := verdicts["unknown"].Conditions[0]
	for name, h := range map[string]apitype.Health{"ok": fullVerdict(), "problem": fullVerdict(down), "unknown": fullVerdict(unknown)} {
		sock := verdictSocket(t, h)
		for _, rule := range cfg.Rules {
			typ, byType := rule.flag("type")
			want, wantLine := 0, "fine"
			switch {
			case !byType && name == "ok":
				wantLine = "ok: every RDMA health check passes"
			case !byType && name == "problem":
				want, wantLine = 1, "PortDown: "+down.Message
			case !byType:
				want, wantLine = 2, "NoDevice: "+unknown.Message
			case typ == down.Type && name == "problem":
				want, wantLine = 1, down.Message
			case typ == unknown.Type && name == "unknown":
				want, wantLine = 2, unknown.Message
			}
			if code, line := run(rule, sock); code != want || line != wantLine {
				t.Errorf("%s, rule %s: exit %d, %q; want %d (NPD's 0 ok, 1 non-ok, 2 unknown), %q", name, rule.Condition, code, line, want, wantLine)
			}
		}
	}
	// No rdmad: rdmactl decides alone; this host has no RDMA device, so
	// its inventory read is a problem, never an ok, for the aggregate and
	// for NoDevice; what only rdmad knows is unknown.
	gone := filepath.Join(t.TempDir(), "gone.sock")
	for _, rule := range cfg.Rules {
		typ, _ := rule.flag("type")
		code, line := run(rule, gone)
		switch typ {
		case "", apitype.CondNoDevice:
			if code != 1 {
				t.Errorf("without rdmad, rule %s: exit %d, %q; want 1", rule.Condition, code, line)
			}
		case apitype.CondPortFlapping, apitype.CondLoopback, apitype.CondDaemon:
			if code != 2 {
				t.Errorf("without rdmad, rule %s: exit %d, %q; want 2 (only rdmad knows)", rule.Condition, code, line)
			}
		}
	}
}
