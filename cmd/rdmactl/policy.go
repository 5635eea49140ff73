package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/rdmad/rdmad/client"
	"github.com/rdmad/rdmad/client/apitype"
)

func cmdPolicy(ctx context.Context, g *globals, c *client.Client, x call) int {
	if x.args[0] == "diff" {
		return policyDiff(ctx, g, c)
	}
	res, err := c.PolicyApply(ctx)
	if err != nil {
		return fail(g, err)
	}
	if g.json {
		printJSON(g.stdout, res)
	} else {
		printApply(g.stdout, res, newShortener(g, "policy apply"))
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

// policyDiff is `policy diff`: the changes a pass would make, and the
// policies that would make none because they match nothing here (rdmad
// names them: a policy without targets): "in sync" would hide a policy
// whose globs name no netdev or device of this node.
func policyDiff(ctx context.Context, g *globals, c *client.Client) int {
	res, err := c.PolicyDiff(ctx)
	if err != nil {
		return fail(g, err)
	}
	cs := res.Changes
	if g.json {
		printJSON(g.stdout, res)
	} else {
		printDiff(g.stdout, cs, res.Policies, res.Unmatched)
		printOverridden(g.stdout, res.Overridden)
	}
	if len(cs) > 0 {
		return exitDegraded
	}
	return exitOK
}

func printDiff(w io.Writer, cs []apitype.Change, rules, idle []string) {
	switch {
	case len(rules) == 0 && len(cs) == 0:
		fmt.Fprintln(w, "No policy is declared: there is nothing to diff. Declare [[policy]] blocks in the configuration rdmad runs with (rdmactl status names it; see rdmad.toml(5)).")
		return
	case len(cs) > 0:
		printChanges(w, cs)
	case len(idle) == 0:
		fmt.Fprintln(w, "Everything is in sync with the policies.")
	case len(idle) < len(rules):
		fmt.Fprintln(w, "Nothing to change: every policy that matches something is in sync.")
	default:
		fmt.Fprintln(w, "Nothing to change, because no policy matches anything on this node.")
	}
	for _, n := range idle {
		fmt.Fprintf(w, "Policy %q matches nothing on this node: no netdev or RDMA device fits its netdevs or devices globs, so it changes nothing here. Compare them with `ip link` and `rdma link`.\n", n)
	}
}

// printOverridden says which settings a later policy takes over: the
// earlier policy declares them in vain, which its own targets do not show.
func printOverridden(w io.Writer, os []apitype.Override) {
	for _, o := range os {
		fmt.Fprintf(w, "Policy %q's %s of %s is overridden by the later policy %q, whose value applies; remove it from one of them if that is not meant.\n", o.Policy, o.Kind, o.Object, o.By)
	}
}

// printApply prints what a policy pass found and did, then the targets;
// without policies, no empty table.
func printApply(w io.Writer, res apitype.ApplyResult, sh *shortener) {
	ps := res.Policy.Policies
	if len(ps) == 0 {
		fmt.Fprintln(w, "No policy is declared: there is nothing to apply. Declare [[policy]] blocks in the configuration rdmad runs with (rdmactl status names it; see rdmad.toml(5)).")
		return
	}
	if len(res.Changes) == 0 {
		fmt.Fprintln(w, "Nothing to apply: the pass found no difference.")
	} else {
		printChanges(w, res.Changes)
	}
	fmt.Fprintln(w)
	printPolicies(w, ps, sh)
	sh.hint(w)
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
