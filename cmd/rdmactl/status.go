package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/rdmad/rdmad/client"
	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/internal/size"
)

func cmdStatus(ctx context.Context, g *globals, c *client.Client, x call) int {
	raw, err := c.StatusRaw(ctx)
	if err != nil {
		return fail(g, err)
	}
	decode := decodeSnapshot
	pass := g.json && printable(raw)
	if pass {
		decode = decodeVerdict // printed as sent: the exit code is all that is decoded
	}
	s, err := decode(raw)
	if err != nil {
		return fail(g, err)
	}
	switch {
	case pass:
		g.stdout.Write(raw)
		if len(raw) > 0 && raw[len(raw)-1] != '\n' {
			fmt.Fprintln(g.stdout)
		}
	case g.json:
		printJSON(g.stdout, s)
	default:
		sh := newShortener(g, "status")
		printStatus(g.stdout, s, sh)
		sh.hint(g.stdout)
	}
	if !s.Healthy() {
		return exitDegraded
	}
	return exitOK
}

// printStatus prints the status tables; sh shortens their long texts.
func printStatus(w io.Writer, s *apitype.Snapshot, sh *shortener) {
	fmt.Fprintf(w, "rdmad %s: %s (pid %d, up %s)\n", s.Version, s.State, s.PID, since(s.StartedAt))
	cfg := "ok"
	if s.Config.Error != "" {
		cfg = "ERROR (running on generation " + fmt.Sprint(s.Config.Generation) + ")"
	}
	fmt.Fprintf(w, "config: %s, generation %d, loaded %s: %s\n", s.Config.Path, s.Config.Generation, ago(s.Config.LoadedAt), cfg)
	if s.Config.Error != "" {
		fmt.Fprintln(w, indent(s.Config.Error))
	}
	printRestartNeeded(w, s.Config.PendingRestart, "  ")
	printRefused(w, s.RefusedFiles)
	printHealth(w, s.Health, sh)
	printKernelNonFatal(w, s.KernelFaults, sh)
	fmt.Fprintln(w)

	tw := tabwriter.NewWriter(sh.fit(w), 0, 0, 2, ' ', 0)
	// The no-device text says what to do in two sentences; said once by
	// the health block, the device table and the inventory's row point at
	// it instead of repeating it.
	noDevShown := noDeviceShown(s.Health)
	if s.NoDevices() && noDevShown {
		fmt.Fprintln(w, "DEGRADED: no RDMA device (NoDevice above says what to do).")
	} else if s.NoDevices() {
		fmt.Fprintln(w, "DEGRADED: "+apitype.NoDevice+".")
	} else if len(s.Devices) == 0 {
		fmt.Fprintln(w, "No RDMA devices.")
	} else {
		fmt.Fprintln(tw, "DEVICE\tPORT\tSTATE\tPHYS\tLINK\tRATE\tNETDEV\tGIDS")
		for _, d := range s.Devices {
			for _, p := range d.Ports {
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", d.Name, p.Port, p.State, p.PhysState,
					p.LinkLayer, dash(p.Rate), dash(p.Netdev), gidSummary(p.GIDs))
			}
		}
		tw.Flush()
	}

	if len(s.Loopback) > 0 {
		fmt.Fprintln(w)
		// TCLASS: the GRH traffic class (RoCE v2: the IP ToS byte) the
		// probe runs in, so that a probe of the wrong class is seen.
		fmt.Fprintln(tw, "LOOPBACK\tPORT\tSTATE\tTCLASS\tWRITE p50/p99\tREAD p50/p99\tSEND p50/p99\tWARM-UP p50/p99\tROUNDS\tFAILED\tLAST ERROR")
		for _, p := range s.Loopback {
			lastErr := p.LastError
			if p.ErrorKind != "" {
				lastErr = p.ErrorKind + ": " + lastErr
			}
			row(tw, p.Device, fmt.Sprint(p.Port), p.State, fmt.Sprint(p.TrafficClass), rtts(p.Write), rtts(p.Read), rtts(p.Send), rtts(p.Warmup),
				fmt.Sprint(p.Rounds), fmt.Sprint(p.Failures), lastErr)
		}
		tw.Flush()
	}
	if len(s.MRPool) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(tw, "MRPOOL\tREGISTERED\tIN USE\tCLASSES\tCANARY\tLAST ERROR")
		for _, p := range s.MRPool {
			reg := "no"
			if p.Registered {
				reg = sizeOf(p.RegisteredBytes)
			}
			var cls []string
			for _, c := range p.Classes {
				cls = append(cls, fmt.Sprintf("%dx%s", c.Count, sizeOf(c.Size)))
			}
			canary := "-"
			if p.Canary.Registrations > 0 || p.Canary.Failures > 0 {
				canary = fmt.Sprintf("%d ok, %d failed, last %s", p.Canary.Registrations, p.Canary.Failures, p.Canary.LastLatency.Round(time.Microsecond))
			}
			row(tw, p.Device, reg, fmt.Sprintf("%d (%s)", p.InUse, sizeOf(p.InUseBytes)), strings.Join(cls, " "), canary,
				dash(sh.cell(p.LastError)))
		}
		tw.Flush()
	}

	if len(s.QoS) > 0 {
		fmt.Fprintln(w)
		printQoSTable(tw, s.QoS, sh)
		tw.Flush()
	}

	if len(s.Policy.Policies) > 0 {
		fmt.Fprintln(w)
		printPolicies(w, s.Policy.Policies, sh)
		printOverridden(w, s.Policy.Overridden)
	}

	fmt.Fprintln(w)
	names := make([]string, 0, len(s.Components))
	for n := range s.Components {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintln(tw, "COMPONENT\tSTATE\tSINCE\tDETAIL")
	for _, n := range names {
		c := s.Components[n]
		detail := c.Detail()
		if noDevShown && detail == apitype.NoDevice {
			detail = "no RDMA device (see NoDevice above)"
		}
		row(tw, n, c.State, ago(c.Since), sh.cell(detail))
	}
	tw.Flush()
}

// printHealth prints the verdict's line and each condition that is not ok
// (rdmactl check and GET /v1/health have all of them).
// noDeviceShown reports whether printHealth prints the NoDevice problem,
// whose message is the no-device text.
func noDeviceShown(h apitype.Health) bool {
	if h.Status == "" || h.Healthy {
		return false
	}
	for _, c := range h.Conditions {
		if c.Type == apitype.CondNoDevice && c.Status == apitype.ConditionProblem {
			return true
		}
	}
	return false
}

func printHealth(w io.Writer, h apitype.Health, sh *shortener) {
	if h.Status == "" {
		return // an rdmad that predates the verdict
	}
	if h.Healthy {
		fmt.Fprintf(w, "health: ok (%d conditions; rdmactl check)\n", len(h.Conditions))
		return
	}
	fmt.Fprintf(w, "health: %s\n", strings.ToUpper(h.Status))
	w = sh.fit(w)
	for _, st := range []string{apitype.ConditionProblem, apitype.ConditionUnknown} {
		for _, c := range h.Conditions {
			if c.Status == st {
				fmt.Fprintf(w, "  %s %s (%s): %s\n", c.Type, c.Status, c.Reason, sh.cell(c.Message))
			}
		}
	}
}

// printKernelNonFatal prints, under the health block, the kernel log's
// non-fatal faults (docs/HEALTH.md, "Kernel faults"): counted, no problem
// alone, so the verdict's lines do not show them.
func printKernelNonFatal(w io.Writer, faults []apitype.KernelFault, sh *shortener) {
	w = sh.fit(w)
	for _, f := range faults {
		if f.Fatal() {
			continue
		}
		who := f.Device
		if f.Netdev != "" {
			who += " " + f.Netdev
		}
		fmt.Fprintf(w, "  kernel log, non-fatal: %s %s, %d× (last %s)\n", who, f.Pattern, f.Count, ago(f.Last))
	}
}

// printRefused prints, under the config line, each input file the
// configuration names that rdmad refused (the peers file, the fleet key):
// the file, why, what runs instead, and on a line of its own the fix. Like
// the configuration's error it is never shortened: the fix is what the
// reader came for.
func printRefused(w io.Writer, files []apitype.RefusedFile) {
	for _, f := range files {
		fmt.Fprintf(w, "  refused %s %s: %s", f.Key, f.Path, f.Why)
		if f.Kept != "" {
			fmt.Fprintf(w, "; %s", f.Kept)
		}
		fmt.Fprintln(w)
		if f.Fix != "" {
			fmt.Fprintf(w, "    fix: %s\n", f.Fix)
		}
	}
}

// printRestartNeeded prints a line per configuration key whose new value
// waits for a restart (the reload result's restart_needed, the status's
// config.pending_restart), each after prefix.
func printRestartNeeded(w io.Writer, keys []string, prefix string) {
	for _, k := range keys {
		fmt.Fprintf(w, "%srestart needed for %s: rdmad runs on with the old value until it restarts (systemctl restart rdmad)\n", prefix, k)
	}
}

func gidSummary(gids []apitype.GID) string {
	if len(gids) == 0 {
		return "-"
	}
	count := map[string]int{}
	var order []string
	for _, g := range gids {
		if count[g.Type] == 0 {
			order = append(order, g.Type)
		}
		count[g.Type]++
	}
	parts := make([]string, len(order))
	for i, t := range order {
		parts[i] = fmt.Sprintf("%d %s", count[t], t)
	}
	return strings.Join(parts, ", ")
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func ago(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	if s := since(t); s != "now" {
		return s + " ago"
	}
	return "just now"
}

func since(t time.Time) string {
	d := time.Since(t)
	switch {
	case d < time.Second:
		return "now"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// decodeSnapshot decodes the raw status.
func decodeSnapshot(raw []byte) (*apitype.Snapshot, error) {
	var s apitype.Snapshot
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("decode status: %w", err)
	}
	return &s, nil
}

// printable reports whether raw, an answer the client checked to be JSON,
// stays JSON when printed as it came: g.stdout's safeWriter escapes C1 and
// bidirectional controls as \uNNNN, which is JSON inside a string (the
// only place JSON has them), but invalid UTF-8, CR (JSON whitespace
// between values) and DEL (JSON allows it raw in a string) as \xNN, which
// is not JSON. rdmad sends none of them (encoding/json writes UTF-8,
// no CR, and no DEL in the names rdmad accepts); an answer with them is
// decoded and printed encoded again, as before #29.
func printable(raw []byte) bool {
	return utf8.Valid(raw) && bytes.IndexByte(raw, '\r') < 0 && bytes.IndexByte(raw, 0x7f) < 0
}

// decodeVerdict decodes what Snapshot.Healthy reads of a status, which is
// all of it but the peers: at scale the peers are most of a status (at
// 1,000 peers 1.3 of its 1.4 MB), and status --json prints the status as
// it came without them.
func decodeVerdict(raw []byte) (*apitype.Snapshot, error) {
	s := statusVerdict{Snapshot: &apitype.Snapshot{}}
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("decode status: %w", err)
	}
	return s.Snapshot, nil
}

// A statusVerdict decodes a status but its peers: its own Peers field,
// shallower than the snapshot's, takes the peers' key.
type statusVerdict struct {
	*apitype.Snapshot
	Peers skipJSON `json:"peers"`
}

// A skipJSON decodes any JSON value into nothing (the decoder has checked
// it already).
type skipJSON struct{}

func (*skipJSON) UnmarshalJSON([]byte) error { return nil }

func printPolicies(w io.Writer, ps []apitype.PolicyStatus, sh *shortener) {
	tw := tabwriter.NewWriter(sh.fit(w), 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "POLICY\tMODE\tKIND\tOBJECT\tDESIRED\tACTUAL\tSTATE")
	for _, p := range ps {
		if len(p.Targets) == 0 {
			fmt.Fprintf(tw, "%s\t%s\t-\t(matches nothing)\t\t\t\n", p.Name, p.Mode)
		}
		for _, t := range p.Targets {
			st := t.State
			if t.Error != "" {
				st += ": " + sh.cell(t.Error)
			}
			row(tw, p.Name, p.Mode, t.Kind, t.Object, dash(t.Desired), dash(t.Actual), st)
		}
	}
	tw.Flush()
}

func rtts(o apitype.OpStats) string {
	if o.Count == 0 {
		return "-"
	}
	return fmt.Sprintf("%s/%s", o.P50.Round(100*time.Nanosecond), o.P99.Round(100*time.Nanosecond))
}

func sizeOf(n int64) string { return size.Size(n).String() }

// A shortener decides how long texts go into tables: on a terminal it
// keeps a text's first line and cuts the table's lines to the terminal's
// width (and remembers that it did); with full set (--full, or stdout not
// a terminal) it keeps them whole. --json always has the whole text.
type shortener struct {
	full bool
	// width is the terminal's columns (terminalWidth).
	width int
	// cmd is the command in use ("status", "policy apply"), for the hint.
	cmd string
	cut bool // a text was shortened
}

// newShortener returns the shortener of command cmd's output to g.stdout.
func newShortener(g *globals, cmd string) *shortener {
	sh := &shortener{full: g.full, cmd: cmd}
	if !g.full {
		sh.width = terminalWidth(g.stdout)
	}
	return sh
}

// cell returns s for a table cell: its first line, on a terminal.
func (sh *shortener) cell(s string) string {
	if sh.full {
		return s
	}
	c := clip(s, len(s))
	if c != s {
		sh.cut = true
	}
	return c
}

// fit returns w, or on a terminal a writer that cuts every line written
// through it to the terminal's width. Tables go through it: their columns
// are only known once the whole table is, so the line, not the cell, is
// cut.
func (sh *shortener) fit(w io.Writer) io.Writer {
	if sh.full || sh.width <= 0 {
		return w
	}
	return &lineFitter{w: w, sh: sh}
}

// hint tells the reader of a terminal that texts were shortened and how to
// see them whole, with the command in use.
// The note is wrapped at the terminal's width, as the lines it is about
// were cut to it.
func (sh *shortener) hint(w io.Writer) {
	if sh.cut {
		fmt.Fprintf(w, "\n%s\n", wrapWords(fmt.Sprintf("Lines ending in ... are cut to fit the terminal: rdmactl %s --full (-l) prints them whole.", sh.cmd), sh.width))
	}
}

// wrapWords breaks s into lines of at most width columns at its spaces (a
// word longer than width stands on a line of its own); width <= 0 leaves s
// whole.
func wrapWords(s string, width int) string {
	if width <= 0 {
		return s
	}
	var b strings.Builder
	col := 0
	for _, word := range strings.Fields(s) {
		n := utf8.RuneCountInString(word)
		switch {
		case col == 0:
		case col+1+n > width:
			b.WriteByte('\n')
			col = 0
		default:
			b.WriteByte(' ')
			col++
		}
		b.WriteString(word)
		col += n
	}
	return b.String()
}

// A lineFitter cuts each line written through it to sh.width columns,
// ending a cut line with "...". It holds a line until its newline comes
// (a tabwriter writes whole lines).
type lineFitter struct {
	w       io.Writer
	sh      *shortener
	pending []byte
}

func (f *lineFitter) Write(b []byte) (int, error) {
	f.pending = append(f.pending, b...)
	for {
		i := bytes.IndexByte(f.pending, '\n')
		if i < 0 {
			return len(b), nil
		}
		line, cut := fitLine(string(f.pending[:i]), f.sh.width)
		if cut {
			f.sh.cut = true
		}
		if _, err := io.WriteString(f.w, line+"\n"); err != nil {
			return len(b), err
		}
		f.pending = f.pending[i+1:]
	}
}

// fitLine cuts line to at most width columns, the last three of a cut line
// being "...", and says whether it cut text. Padding at the end of a line
// (a tabwriter's) is dropped, not cut. A rune counts one column, a control
// character the width of its escape (escape.go: \x1b, \u202e).
func fitLine(line string, width int) (string, bool) {
	cols, end := 0, -1 // end: where the line is cut, once it must be
	for i, r := range line {
		w := runeColumns(r)
		if end < 0 && cols+w > width-3 {
			end = i
		}
		cols += w
		if cols > width {
			if strings.TrimRight(line[i:], " ") == "" {
				return strings.TrimRight(line, " "), false
			}
			return strings.TrimRight(line[:end], " ") + "...", true
		}
	}
	return line, false
}

func runeColumns(r rune) int {
	switch {
	case r < 0x20 || r == 0x7f:
		return 4 // \x1b
	case r >= 0x80 && r < 0xa0, r >= 0x2028 && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == utf8.RuneError:
		return 6 // \u202e
	}
	return 1
}

// clip shortens s to its first line and at most n bytes (not splitting a
// UTF-8 sequence).
func clip(s string, n int) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " ..."
	}
	if len(s) > n {
		i := n - 3
		for i > 0 && !utf8.RuneStart(s[i]) {
			i--
		}
		s = s[:i] + "..."
	}
	return s
}

// row writes one tab-separated table row. A last cell of several lines
// continues on rows of its own, under its column; a line break in another
// cell becomes a space.
func row(w io.Writer, cells ...string) {
	last := len(cells) - 1
	for i := range last {
		cells[i] = strings.ReplaceAll(cells[i], "\n", " ")
	}
	lines := strings.Split(strings.TrimRight(cells[last], "\n"), "\n")
	cells[last] = lines[0]
	fmt.Fprintln(w, strings.Join(cells, "\t"))
	for _, l := range lines[1:] {
		fmt.Fprintln(w, strings.Repeat("\t", last)+l)
	}
}
