package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/rdmad/rdmad/client"
	"github.com/rdmad/rdmad/client/apitype"
)

func cmdPolicy(ctx context.Context, g *globals, c *client.Client, args []string) int {
	if len(args) != 1 || (args[0] != "diff" && args[0] != "apply") {
		fmt.Fprintln(g.stderr, "rdmactl policy: say `policy diff` (what would change) or `policy apply` (apply now)")
		return exitUsage
	}
	if args[0] == "diff" {
		cs, err := c.PolicyDiff(ctx)
		if err != nil {
			return fail(g, err)
		}
		if g.json {
			printJSON(g.stdout, map[string]any{"changes": cs})
		} else {
			printChanges(g.stdout, cs)
		}
		if len(cs) > 0 {
			return exitDegraded
		}
		return exitOK
	}
	res, err := c.PolicyApply(ctx)
	if err != nil {
		return fail(g, err)
	}
	if g.json {
		printJSON(g.stdout, res)
	} else {
		printChanges(g.stdout, res.Changes)
		fmt.Fprintln(g.stdout)
		printPolicies(g.stdout, res.Policy.Policies)
	}
	for _, p := range res.Policy.Policies {
		for _, t := range p.Targets {
			if t.State == apitype.TargetError || t.State == apitype.Drifted {
				return exitDegraded
			}
		}
	}
	return exitOK
}

func printChanges(w io.Writer, cs []apitype.Change) {
	if len(cs) == 0 {
		fmt.Fprintln(w, "Everything is in sync with the policies.")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "POLICY\tKIND\tOBJECT\tFROM\tTO\tACTION")
	for _, c := range cs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", c.Policy, c.Kind, c.Object, dash(c.From), dash(c.To), c.Action)
	}
	tw.Flush()
}
