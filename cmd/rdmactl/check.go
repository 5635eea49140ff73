package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/rdmad/rdmad/client"
	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/health"
	"github.com/rdmad/rdmad/inventory"
)

// The exit codes of `rdmactl check`: node-problem-detector's custom
// plugin convention (0 ok, 1 problem, 2 unknown), which Slurm NHC's check
// and device plugins can read as well. A usage error is 2 too: the plugin
// could not decide.
const (
	checkOK      = 0
	checkProblem = 1
	checkUnknown = 2
)

// npdMaxOutput is node-problem-detector's default max_output_length: the
// plugin's output beyond it is cut. It is --max-output's default, so that
// `rdmactl check` without it prints what it always did.
const npdMaxOutput = 80

// The bounds of --max-output. NPD reads at most 4096 bytes of a plugin's
// output (its maxCustomPluginBufferBytes), so more would be cut there
// mid-word; below 16 bytes no message says anything.
const (
	minMaxOutput = 16
	maxMaxOutput = 4096
)

// checkFormats are the formats --format takes (the completions offer them).
var checkFormats = []string{"npd", "nhc"}

// checkTypes are the condition types --type takes (the completions offer
// them).
var checkTypes = apitype.ConditionTypes

// cmdCheck answers "may this node run RDMA jobs?" from rdmad's verdict
// (GET /v1/health), or, when rdmad does not answer, from what rdmactl can
// read itself (the inventory): a problem there is still a problem; else
// the verdict is unknown.
//
// --type TYPE narrows the verdict to the condition of that type (one
// node-problem-detector condition per type, each with the type as its
// reason: packaging/npd/rdmad-health.json): the exit code is that
// condition's, and --format npd prints its message alone (the objects and
// the fix). --max-output N bounds the npd line (default 80 bytes).
func cmdCheck(ctx context.Context, g *globals, c *client.Client, x call) int {
	format := x.flags["format"]
	switch format {
	case "", "npd", "nhc":
	default:
		usageError(g.stderr, lookupCommand("check"), fmt.Errorf("--format %q is not a format; use npd (one line, the default) or nhc", format))
		return checkUnknown
	}
	typ, byType := x.flags["type"]
	if byType && !slices.Contains(checkTypes, typ) {
		hint := ""
		if s := suggest(typ, checkTypes); s != "" {
			hint = " (did you mean " + s + "?)"
		}
		usageError(g.stderr, lookupCommand("check"), fmt.Errorf("--type %q is not a condition type%s; use one of %s",
			typ, hint, strings.Join(checkTypes, ", ")))
		return checkUnknown
	}
	maxOutput := npdMaxOutput
	if v, ok := x.flags["max-output"]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < minMaxOutput || n > maxMaxOutput {
			usageError(g.stderr, lookupCommand("check"), fmt.Errorf("--max-output %q is not a number of bytes from %d to %d; e.g. 1024 (node-problem-detector's max_output_length)",
				v, minMaxOutput, maxMaxOutput))
			return checkUnknown
		}
		if g.json || format == "nhc" {
			usageError(g.stderr, lookupCommand("check"), errors.New("--max-output bounds the line of --format npd; --format nhc and --json are never cut"))
			return checkUnknown
		}
		maxOutput = n
	}
	timeout := 10 * time.Second
	if v, ok := x.flags["timeout"]; ok {
		d, err := time.ParseDuration(v)
		if err != nil || d < 100*time.Millisecond || d > time.Minute {
			usageError(g.stderr, lookupCommand("check"), fmt.Errorf("--timeout %q is not a duration from 100ms to 1m; e.g. 5s", v))
			return checkUnknown
		}
		timeout = d
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	h, raw, why := daemonHealth(ctx, g, c)
	if raw == nil && h.Status == "" {
		h = localHealth("/", why)
	}
	if byType {
		h, raw = ofType(h, typ), nil
	}
	switch {
	case g.json && raw != nil:
		g.stdout.Write(raw)
		if len(raw) > 0 && raw[len(raw)-1] != '\n' {
			fmt.Fprintln(g.stdout)
		}
	case g.json:
		printJSON(g.stdout, h)
	case format == "nhc":
		printNHC(g.stdout, h)
	case byType:
		fmt.Fprintln(g.stdout, npdTypeLine(h.Conditions[0], maxOutput))
	default:
		fmt.Fprintln(g.stdout, npdLine(h, maxOutput))
	}
	switch h.Status {
	case apitype.ConditionOK:
		return checkOK
	case apitype.ConditionProblem:
		return checkProblem
	}
	return checkUnknown
}

// daemonHealth asks rdmad. It returns the verdict and its JSON, or (for an
// rdmad that predates /v1/health) the verdict decided from its status, or
// nothing and why rdmad gave no verdict.
func daemonHealth(ctx context.Context, g *globals, c *client.Client) (apitype.Health, []byte, error) {
	if g.socketErr != nil {
		return apitype.Health{}, nil, g.socketErr
	}
	h, raw, err := c.HealthRaw(ctx)
	if err == nil {
		return h, raw, nil
	}
	var api *client.APIError
	if errors.As(err, &api) && api.Status == http.StatusNotFound {
		// An older rdmad: decide from its status as rdmad would.
		s, serr := c.Status(ctx)
		if serr != nil {
			return apitype.Health{}, nil, serr
		}
		return health.Evaluate(health.Input{Snap: s, Now: time.Now()}), nil, nil
	}
	return apitype.Health{}, nil, err
}

// localHealth is the verdict rdmactl decides alone: the inventory it reads
// from sysfs (devices, uverbs nodes, port states, PCIe links) can show a
// problem; what only rdmad knows is unknown.
func localHealth(root string, why error) apitype.Health {
	s := &apitype.Snapshot{Components: map[string]apitype.Component{}}
	r := inventory.Reader{Root: root}
	devs, err := r.Read()
	if err != nil {
		s.Components[apitype.ComponentInventory] = apitype.Component{State: apitype.Error, Error: err.Error()}
	} else {
		s.Components[apitype.ComponentInventory] = apitype.Component{State: apitype.OK}
		s.Devices = devs
		s.FunctionsWithoutDevice = r.FunctionsWithoutDevice(devs)
	}
	h := health.Evaluate(health.Input{Snap: s, Now: time.Now(), Local: true})
	for i := range h.Conditions {
		if c := &h.Conditions[i]; c.Type == apitype.CondDaemon {
			c.Message = "rdmad does not answer (" + oneLineErr(why) + "): " + c.Message
		}
	}
	return h
}

func oneLineErr(err error) string {
	if err == nil {
		return "no answer"
	}
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// npdLine is the one line node-problem-detector shows as the aggregate
// condition's message: the worst condition's type and message, at most n
// bytes (NPD's max_output_length: it cuts the rest), a longer one cut
// after a whole word with "...".
func npdLine(h apitype.Health, n int) string {
	w := h.Worst()
	if w == nil {
		return clipWords("ok: every RDMA health check passes", n)
	}
	return clipWords(w.Type+": "+oneLine(w.Message), n)
}

// npdTypeLine is the line of --type: the condition's message alone (the
// NPD condition and its reason name the type), at most n bytes, cut as
// npdLine cuts.
func npdTypeLine(c apitype.Condition, n int) string {
	msg := strings.TrimSpace(oneLine(c.Message))
	if msg == "" {
		msg = c.Type + " " + c.Status
	}
	return clipWords(msg, n)
}

// ofType is the verdict of h's condition of type t alone: its status is
// the condition's. A verdict without that condition (an rdmad older than
// this rdmactl, which does not check it) makes it unknown.
func ofType(h apitype.Health, t string) apitype.Health {
	c, found := h.Condition(t)
	if !found {
		c = apitype.Condition{Type: t, Status: apitype.ConditionUnknown, Reason: "NotReported",
			Message: "rdmad's verdict has no " + t + " condition: this rdmad is older than rdmactl and does not check it; restart rdmad after an upgrade"}
	}
	status := c.Status
	switch status {
	case apitype.ConditionOK, apitype.ConditionProblem:
	default:
		status = apitype.ConditionUnknown
	}
	return apitype.Health{Healthy: status == apitype.ConditionOK, Status: status, Conditions: []apitype.Condition{c}}
}

// clipWords returns s if it has at most n bytes, else its words that fit
// in n bytes with "..." (without the punctuation that ended the last
// one: "the cable, the switch port..."); a first word longer than that
// is cut at a character.
func clipWords(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n - len("...")
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	cut := s[:i]
	if s[i] != ' ' {
		if sp := strings.LastIndexByte(cut, ' '); sp > 0 {
			cut = cut[:sp]
		}
	}
	return strings.TrimRight(cut, " ,;:.") + "..."
}

// printNHC prints for Slurm NHC's check (packaging/nhc/rdmad.nhc) one line
// per condition that is not ok, problems first, or one saying the node is
// healthy; the check passes the first line to NHC's die.
func printNHC(w io.Writer, h apitype.Health) {
	n := 0
	for _, status := range []string{apitype.ConditionProblem, apitype.ConditionUnknown} {
		for _, c := range h.Conditions {
			if c.Status == status {
				fmt.Fprintf(w, "rdmad: %s %s: %s\n", c.Type, c.Status, oneLine(c.Message))
				n++
			}
		}
	}
	if n == 0 {
		fmt.Fprintln(w, "rdmad: healthy")
	}
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }
