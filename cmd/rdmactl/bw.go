package main

import (
	"context"
	"fmt"
	"io"
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
)

// bwOps are the operations --op takes.
var bwOps = []string{"write", "read", "send"}

// cmdBW runs an RC bandwidth test to a peer (POST /v1/bw). Its arguments
// are checked before rdmad is asked, so a mistake is a usage error (2)
// whether or not rdmad runs. Exit codes: 0 the test ran; 1 rdmad could not
// be asked (unreachable, access denied); 3 the test did not run or failed
// (the peer refused it, or a test runs already).
func cmdBW(ctx context.Context, g *globals, c *client.Client, x call) int {
	cmd := lookupCommand("bw")
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
	res, err := c.Bandwidth(ctx, x.args[0], op, sz, d)
	if err != nil {
		return fail(g, err)
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
	fmt.Fprintln(tw, "PEER\tOP\tSIZE\tDURATION\tGb/s\tMSG/S\tLOCAL")
	peer := r.Peer
	if r.Address != "" && r.Address != r.Peer {
		peer += " (" + r.Address + ")"
	}
	fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%.3f\t%.0f\t%s\n", peer, strings.ToUpper(r.Op), r.Size,
		r.Elapsed.Round(time.Millisecond), r.Gbps, r.MsgRate, r.Local)
	tw.Flush()
	fmt.Fprintf(w, "%d messages, %d bytes; completions busy-polled\n", r.Messages, r.Bytes)
}
