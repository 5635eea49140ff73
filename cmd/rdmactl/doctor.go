package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/rdmad/rdmad/client"
	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/doctor"
	"github.com/rdmad/rdmad/inventory/ethtool"
	"github.com/rdmad/rdmad/inventory/rdmares"
)

// cmdDoctor prints the troubleshooting table as rdmad ran it on the node
// (GET /v1/doctor), then the checks of the caller's own session. When
// rdmad does not answer (or predates /v1/doctor), rdmactl runs the table
// itself: the checks that need rdmad's state skip. Exit codes: 0 when
// every check is ok or skipped, 3 when any warns or fails, 1 when it could
// not run.
func cmdDoctor(ctx context.Context, g *globals, c *client.Client, x call) int {
	interval := 2 * time.Second
	if v, ok := x.flags["interval"]; ok {
		d, err := time.ParseDuration(v)
		if err != nil {
			usageError(g.stderr, lookupCommand("doctor"), fmt.Errorf("--interval %q is not a duration; give one such as 5s or 500ms", v))
			return exitUsage
		}
		interval = d
	}
	if interval < 0 || interval > 10*time.Second {
		usageError(g.stderr, lookupCommand("doctor"), fmt.Errorf("--interval %s is out of range; use 0 to 10s", interval))
		return exitUsage
	}

	env := &doctor.Env{Ctx: ctx, SysRoot: "/", ProcRoot: "/proc", DevRoot: "/dev", Interval: interval}
	env.Resources = func() (apitype.Resources, error) { return doctorResources(ctx, g, c) }
	var rep apitype.DoctorReport
	err := g.socketErr // the path is not a socket: run the table here
	if err == nil {
		dctx, cancel := context.WithTimeout(ctx, interval+20*time.Second)
		rep, err = c.Doctor(dctx, interval)
		cancel()
	}
	var api *client.APIError
	switch {
	case err == nil:
	case errors.As(err, &api) && api.Status != http.StatusNotFound:
		return fail(g, err)
	default:
		// rdmad is down, unreachable, refuses this caller (access
		// denied: the socket's group, [daemon] access) or is too old to
		// run the doctor: run the table here, as rdmad's view is missing
		// either way; its daemon check says why.
		env.DaemonErr = err
		var denied *client.AccessDeniedError
		env.DaemonRefused = errors.As(err, &denied)
		// The packet-loss check reads the RoCE netdevs' pause and discard
		// counters here, as rdmad would have.
		net := &localNet{open: ethtool.Open}
		env.NetCounters = net.read
		rep.Checks = doctor.Run(env, doctor.Checks)
		net.close()
	}
	rep.Checks = append(rep.Checks, doctor.Run(env, doctor.CallerChecks)...)
	if ctx.Err() != nil {
		return fail(g, ctx.Err())
	}
	rep.Worst = doctor.Worst(rep.Checks)
	if g.json {
		printJSON(g.stdout, rep)
	} else {
		printDoctor(g.stdout, rep.Checks, rep.Worst)
	}
	if rep.Worst == doctor.Warn || rep.Worst == doctor.Fail {
		return exitDegraded
	}
	return exitOK
}

// printDoctor prints a row per check: its verdict, ID and message, then the
// fix of a warning or failure. Nothing is shortened, on a terminal or not:
// a message or fix of several lines (a configuration error names each bad
// line) continues on lines of its own, indented under its first.
func printDoctor(w io.Writer, rs []apitype.DoctorCheck, worst string) {
	for _, r := range rs {
		head := fmt.Sprintf("[%-4s] %-12s ", verdictLabel(r.Verdict), r.ID)
		fmt.Fprintln(w, head+hang(r.Message, len(head)))
		if r.Fix != "" && (r.Verdict == doctor.Warn || r.Verdict == doctor.Fail) {
			head := fmt.Sprintf("       %-12s fix: ", "")
			fmt.Fprintln(w, head+hang(r.Fix, len(head)))
		}
	}
	fmt.Fprintf(w, "\nworst verdict: %s\n", worst)
}

// hang indents every line of s after the first by n spaces, so that it
// continues under a first line that starts at column n.
func hang(s string, n int) string {
	s = strings.TrimRight(s, "\n")
	return strings.ReplaceAll(s, "\n", "\n"+strings.Repeat(" ", n))
}

func verdictLabel(v string) string {
	switch v {
	case doctor.Fail:
		return "FAIL"
	case doctor.Warn:
		return "WARN"
	}
	return strings.ToLower(v)
}

// doctorResources is who pins memory for the memlock checks, read only
// when they need it: from rdmad, else from the kernel here.
func doctorResources(ctx context.Context, g *globals, c *client.Client) (apitype.Resources, error) {
	if g.socketErr == nil {
		if res, err := c.Resources(ctx); err == nil {
			rdmares.FillComms(&res, "")
			return res, nil
		}
	}
	return rdmares.Read(ctx, rdmares.Options{})
}

// localNet reads the pause and discard counters of this host's netdevs
// (inventory/ethtool, as rdmad does) for the doctor when rdmad does not
// answer. Its sockets are opened at the first read, so that a host without
// RoCE netdevs opens none; the error of a failed open answers every read.
type localNet struct {
	open func(*ethtool.Config) (*ethtool.Reader, error)

	r      *ethtool.Reader
	err    error
	opened bool
}

func (l *localNet) read(netdev string) (map[string]uint64, error) {
	if !l.opened {
		l.opened = true
		l.r, l.err = l.open(nil)
	}
	if l.err != nil {
		return nil, l.err
	}
	return l.r.FlatCounters(netdev)
}

// close closes the sockets, if read opened them.
func (l *localNet) close() {
	if l.r != nil {
		l.r.Close()
	}
}
