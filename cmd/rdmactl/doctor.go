package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/rdmad/rdmad/client"
	"github.com/rdmad/rdmad/daemon/doctor"
)

// doctorResult is `rdmactl doctor --json`.
type doctorResult struct {
	Worst  string          `json:"worst"`
	Checks []doctor.Report `json:"checks"`
}

// cmdDoctor runs the troubleshooting table. Exit codes: 0 when every check
// is ok or skipped, 3 when any warns or fails, 1 when it could not run.
func cmdDoctor(ctx context.Context, g *globals, c *client.Client, args []string) int {
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	fs.SetOutput(g.stderr)
	interval := fs.Duration("interval", 2*time.Second, "time between the two counter reads of the rising-counter checks (0 skips them)")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(g.stderr, "rdmactl doctor: unexpected argument %q; doctor takes only --interval\n", fs.Arg(0))
		return exitUsage
	}
	if *interval < 0 || *interval > 5*time.Minute {
		fmt.Fprintf(g.stderr, "rdmactl doctor: --interval %s is out of range; use 0 to 5m\n", *interval)
		return exitUsage
	}

	env := &doctor.Env{Ctx: ctx, SysRoot: "/", ProcRoot: "/proc", DevRoot: "/dev", Interval: *interval}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	env.Snapshot, env.DaemonErr = c.Status(sctx)
	cancel()
	if env.DaemonErr != nil {
		env.Snapshot = nil
	}
	reports := doctor.Run(env, doctor.Checks)
	if ctx.Err() != nil {
		return fail(g, ctx.Err())
	}
	worst := doctor.Worst(reports)
	if g.json {
		printJSON(g.stdout, doctorResult{Worst: worst, Checks: reports})
	} else {
		printDoctor(g.stdout, reports, worst)
	}
	if worst == doctor.Warn || worst == doctor.Fail {
		return exitDegraded
	}
	return exitOK
}

func printDoctor(w io.Writer, rs []doctor.Report, worst string) {
	for _, r := range rs {
		fmt.Fprintf(w, "[%-4s] %-11s %s\n", verdictLabel(r.Verdict), r.ID, r.Message)
		if r.Fix != "" && (r.Verdict == doctor.Warn || r.Verdict == doctor.Fail) {
			fmt.Fprintf(w, "       %-11s fix: %s\n", "", r.Fix)
		}
	}
	fmt.Fprintf(w, "\nworst verdict: %s\n", worst)
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
