package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
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
// plugin's output beyond it is cut.
const npdMaxOutput = 80

// checkFormats are the formats --format takes (the completions offer them).
var checkFormats = []string{"npd", "nhc"}

// cmdCheck answers "may this node run RDMA jobs?" from rdmad's verdict
// (GET /v1/health), or, when rdmad does not answer, from what rdmactl can
// read itself (the inventory): a problem there is still a problem; else
// the verdict is unknown.
func cmdCheck(ctx context.Context, g *globals, c *client.Client, x call) int {
	format := x.flags["format"]
	switch format {
	case "", "npd", "nhc":
	default:
		usageError(g.stderr, lookupCommand("check"), fmt.Errorf("--format %q is not a format; use npd (one line, the default) or nhc", format))
		return checkUnknown
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
	default:
		fmt.Fprintln(g.stdout, npdLine(h))
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

// npdLine is the one line node-problem-detector shows as the condition's
// message: the worst condition's type and message, at most 80 bytes (NPD
// cuts the rest), a longer one cut after a whole word with "...".
func npdLine(h apitype.Health) string {
	w := h.Worst()
	if w == nil {
		return clipWords("ok: every RDMA health check passes", npdMaxOutput)
	}
	return clipWords(w.Type+": "+oneLine(w.Message), npdMaxOutput)
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
