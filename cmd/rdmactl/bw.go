package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rdmad/rdmad/client"
	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/internal/size"
)

// Bounds of rdmactl bw, as rdmad and the peer apply them.
const (
	bwMaxSize     = 1 << 20
	bwMinDuration = 100 * time.Millisecond
	bwMaxDuration = 30 * time.Second
	bwMaxQPs      = 16
)

// bwOps are the operations --op takes.
var bwOps = []string{"write", "read", "send"}

// cmdBW runs an RC bandwidth test to a peer, or with --loopback of one of
// the node's ports against itself (POST /v1/bw). Its arguments are checked
// before rdmad is asked, so a mistake is a usage error (2) whether or not
// rdmad runs. Exit codes: 0 the test ran; 1 rdmad could not be asked
// (unreachable, access denied); 3 the test did not run or failed (the peer
// refused it, or a test runs already).
func cmdBW(ctx context.Context, g *globals, c *client.Client, x call) int {
	cmd := lookupCommand("bw")
	_, loopback := x.flags["loopback"]
	if !loopback && len(x.args) == 0 {
		usageError(g.stderr, cmd, errors.New(cmd.missing))
		return exitUsage
	}
	if loopback && len(x.args) == 1 && !validLoopbackTarget(x.args[0]) {
		usageError(g.stderr, cmd, fmt.Errorf("--loopback %q: name a device and optionally its port as rdmactl status shows them, e.g. rxe0 or mlx5_0:1", x.args[0]))
		return exitUsage
	}
	qps := 0
	if v, ok := x.flags["qps"]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > bwMaxQPs {
			usageError(g.stderr, cmd, fmt.Errorf("--qps %q is out of range; use 1 to %d queue pairs", v, bwMaxQPs))
			return exitUsage
		}
		qps = n
	}
	op := "write"
	if v, ok := x.flags["op"]; ok {
		if !slices.Contains(bwOps, v) {
			usageError(g.stderr, cmd, fmt.Errorf("--op %q: use write, read or send", v))
			return exitUsage
		}
		op = v
	}
	sz := 65536
	if v, ok := x.flags["size"]; ok {
		n, err := parseBWSize(v)
		if err != nil {
			usageError(g.stderr, cmd, err)
			return exitUsage
		}
		sz = n
	}
	d := 5 * time.Second
	if v, ok := x.flags["duration"]; ok {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			usageError(g.stderr, cmd, fmt.Errorf("--duration %q is not a duration; give one such as 5s or 2500ms", v))
			return exitUsage
		}
		if d < bwMinDuration || d > bwMaxDuration || d%time.Millisecond != 0 {
			usageError(g.stderr, cmd, fmt.Errorf("--duration %s is out of range; use %s to %s in whole milliseconds", d, bwMinDuration, bwMaxDuration))
			return exitUsage
		}
	}
	if g.socketErr != nil {
		return fail(g, g.socketErr)
	}
	o := client.BandwidthOptions{Op: op, Size: sz, Duration: d, QPs: qps}
	what := ""
	var stop func()
	if !g.json && isTerminal(g.stdout) {
		if loopback {
			what = "loopback"
			if len(x.args) == 1 {
				what += " of " + x.args[0] // checked: a device name
			}
		} else {
			what = "to " + plainText(x.args[0])
		}
		if qps > 1 {
			what += fmt.Sprintf(", %d QPs", qps)
		}
		stop = startProgress(rawWriter(g.stdout), fmt.Sprintf("bw: %s %s", op, what), d, terminalWidth(g.stdout)-1, time.Now)
	}
	var res apitype.BandwidthResult
	var err error
	if loopback {
		target := ""
		if len(x.args) == 1 {
			target = x.args[0]
		}
		res, err = c.LoopbackBandwidth(ctx, target, o)
	} else {
		res, err = c.BandwidthTest(ctx, x.args[0], o)
	}
	if stop != nil {
		stop()
	}
	if err != nil {
		code := fail(g, err)
		// An rdmad that runs no bandwidth tests (501) answered: the test
		// did not run, which is 3 as the help says, not 1 (rdmad could
		// not be asked).
		var ae *client.APIError
		if errors.As(err, &ae) && ae.Status == http.StatusNotImplemented {
			code = exitDegraded
		}
		return code
	}
	if g.json {
		printJSON(g.stdout, res)
	} else {
		printBW(g.stdout, res)
	}
	return exitOK
}

// parseBWSize parses --size: bytes, or with a unit (64KiB, 1MiB).
func parseBWSize(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil {
		s, serr := size.Parse(v)
		if serr != nil {
			return 0, fmt.Errorf("--size %q is not a size; give bytes such as 65536 or 64KiB", v)
		}
		if s > bwMaxSize {
			return 0, fmt.Errorf("--size %s is out of range; use 1 byte to 1MiB", v)
		}
		n = int(s)
	}
	if n < 1 || n > bwMaxSize {
		return 0, fmt.Errorf("--size %s is out of range; use 1 byte to 1MiB (1048576)", v)
	}
	return n, nil
}

func printBW(w io.Writer, r apitype.BandwidthResult) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PEER\tOP\tSIZE\tQPS\tDURATION\tGb/s\tMSG/S\tLOCAL")
	peer := r.Peer
	if r.Address != "" && r.Address != r.Peer {
		peer += " (" + r.Address + ")"
	}
	if r.Loopback {
		peer = "loopback"
	}
	fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%.3f\t%.0f\t%s\n", peer, strings.ToUpper(r.Op), r.Size, max(r.QPs, 1),
		r.Elapsed.Round(time.Millisecond), r.Gbps, r.MsgRate, r.Local)
	tw.Flush()
	fmt.Fprintf(w, "%d messages, %d bytes; completions busy-polled\n", r.Messages, r.Bytes)
	switch {
	case r.Loopback && r.Low:
		fmt.Fprintf(w, "below the loopback threshold of %s, %.3f Gb/s ([health] min_loopback_gbps, min_loopback_share): LoopbackBandwidthLow\n", r.Local, r.MinGbps)
	case r.Loopback && r.MinGbps > 0:
		fmt.Fprintf(w, "at or above the loopback threshold of %s, %.3f Gb/s\n", r.Local, r.MinGbps)
	}
}

// loopbackTarget is DEVICE or DEVICE:PORT (DEVICE/PORT too), as rdmad
// takes them (service.ParseLoopbackRequest).
var loopbackTarget = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}([:/][0-9]{1,3})?$`)

func validLoopbackTarget(s string) bool { return loopbackTarget.MatchString(s) }

// progressEvery is how often the progress line is written again.
const progressEvery = 250 * time.Millisecond

// startProgress writes a progress line to w, a terminal, while a test of
// duration d runs: what, the time elapsed of d and a bar, written again
// in place (carriage return) every progressEvery; past d it says the test
// is finishing (the drain, rdmad's answer). The returned stop erases the
// line and returns once the goroutine writing it has ended. The line is
// cut to cols bytes, so that it never wraps (a wrapped line cannot be
// written again in place). now is the clock (tests).
func startProgress(w io.Writer, what string, d time.Duration, cols int, now func() time.Time) (stop func()) {
	start := now()
	done := make(chan struct{})
	ended := make(chan struct{})
	width := 0
	write := func() {
		line := progressLine(what, now().Sub(start), d)
		if cols > 0 && len(line) > cols {
			line = line[:cols]
		}
		pad := max(width-len(line), 0)
		width = max(width, len(line))
		fmt.Fprintf(w, "\r%s%s", line, strings.Repeat(" ", pad))
	}
	go func() {
		defer close(ended)
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		write()
		for {
			select {
			case <-done:
				if width > 0 {
					fmt.Fprintf(w, "\r%s\r", strings.Repeat(" ", width))
				}
				return
			case <-t.C:
				write()
			}
		}
	}()
	return func() {
		close(done)
		<-ended
	}
}

// plainText is s if it is printable ASCII, else s quoted: the progress
// line bypasses the escaping of everything else rdmactl prints.
func plainText(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return strconv.QuoteToASCII(s)
		}
	}
	return s
}

// progressLine is the progress of a test of duration d after elapsed.
func progressLine(what string, elapsed, d time.Duration) string {
	const bar = 20
	if elapsed >= d {
		return fmt.Sprintf("%s [%s] %s of %s, finishing", what, strings.Repeat("=", bar), d, d)
	}
	n := int(int64(bar) * int64(elapsed) / int64(d))
	return fmt.Sprintf("%s [%s%s] %s of %s", what, strings.Repeat("=", n), strings.Repeat(" ", bar-n),
		elapsed.Round(100*time.Millisecond), d)
}
