package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rdmad/rdmad/client"
	"github.com/rdmad/rdmad/client/apitype"
)

func cmdPeers(ctx context.Context, g *globals, c *client.Client, x call) int {
	f, err := peerFilterOf(x)
	if err != nil {
		usageError(g.stderr, lookupCommand("peers"), err)
		return exitUsage
	}
	raw, err := c.StatusRaw(ctx)
	if err != nil {
		return fail(g, err)
	}
	if g.json && !f.any() && printable(raw) {
		return peersJSON(g, raw)
	}
	s, err := decodeSnapshot(raw)
	if err != nil {
		return fail(g, err)
	}
	probed := len(s.Peers.Peers)
	ps := s.Peers
	ps.Peers = f.apply(ps.Peers)
	comp, hasComp := s.Components[apitype.ComponentPeers]
	// failed: the probes could not start (a key file that cannot be
	// read, a port in use): that is what to fix, not the configuration
	// of peers, and no peer is probed.
	failed := hasComp && (comp.State == apitype.Error || comp.State == apitype.Unavailable) && probed == 0
	if g.json {
		printJSON(g.stdout, ps)
	} else {
		if hasComp && comp.State != apitype.OK {
			fmt.Fprintf(g.stdout, "Peer probes: %s", comp.State)
			if d := comp.Detail(); d != "" {
				fmt.Fprintf(g.stdout, ": %s", d)
			}
			fmt.Fprintln(g.stdout)
		}
		switch {
		case failed:
		case f.any():
			printFiltered(g.stdout, ps, probed, f)
		default:
			printPeers(g.stdout, ps)
		}
	}
	if failed {
		return exitDegraded
	}
	return peersExit(ps.Peers...)
}

// peersJSON prints the status's peers as rdmad sent them (re-indented
// to stand on their own, as printJSON would print them), decoding only
// what the exit code needs: the peers' states and the peers component.
// Decoding and encoding again every peer took 140 ms at 1,000 peers.
func peersJSON(g *globals, raw json.RawMessage) int {
	var v struct {
		Components map[string]apitype.Component `json:"components"`
		Peers      json.RawMessage              `json:"peers"`
	}
	var states struct {
		Peers []struct {
			State string `json:"state"`
		} `json:"peers"`
	}
	var out bytes.Buffer
	err := json.Unmarshal(raw, &v)
	if err == nil && len(v.Peers) > 0 && v.Peers[0] == '{' {
		if err = json.Unmarshal(v.Peers, &states); err == nil {
			err = json.Indent(&out, v.Peers, "", "  ")
		}
	} else if err == nil {
		// No peers object (an rdmad without probes): what printJSON
		// prints for none.
		printJSON(&out, apitype.Peers{})
	}
	if err != nil {
		return fail(g, fmt.Errorf("decode status: %w", err))
	}
	if b := out.Bytes(); len(b) > 0 && b[len(b)-1] != '\n' {
		out.WriteByte('\n')
	}
	g.stdout.Write(out.Bytes())
	comp, hasComp := v.Components[apitype.ComponentPeers]
	if hasComp && (comp.State == apitype.Error || comp.State == apitype.Unavailable) && len(states.Peers) == 0 {
		return exitDegraded // the probes could not start, as cmdPeers says
	}
	for _, p := range states.Peers {
		if p.State != apitype.PeerUp {
			return exitDegraded
		}
	}
	return exitOK
}

// peerStates are the states --state takes, in the order help names them.
var peerStates = []string{apitype.PeerUnknown, apitype.PeerUp, apitype.PeerDegraded, apitype.PeerDown}

// A peerFilter selects the peers `rdmactl peers` shows: by state (any of
// states) and by group ("-" for peers without one); the zero value selects
// every peer.
type peerFilter struct {
	states   []string
	group    string
	hasGroup bool
}

// peerFilterOf reads --state (repeated, or a comma list) and --group.
func peerFilterOf(x call) (peerFilter, error) {
	var f peerFilter
	if v, ok := x.flags["state"]; ok {
		for _, st := range strings.Split(v, ",") {
			st = strings.ToLower(strings.TrimSpace(st))
			if !slices.Contains(peerStates, st) {
				return f, fmt.Errorf("--state %q is not a peer state; give %s (repeat --state or list them: --state down,degraded)", st, strings.Join(peerStates, ", "))
			}
			if !slices.Contains(f.states, st) {
				f.states = append(f.states, st)
			}
		}
	}
	f.group, f.hasGroup = x.flags["group"]
	return f, nil
}

func (f peerFilter) any() bool { return len(f.states) > 0 || f.hasGroup }

func (f peerFilter) match(p apitype.Peer) bool {
	if len(f.states) > 0 && !slices.Contains(f.states, p.State) {
		return false
	}
	return !f.hasGroup || f.group == p.Group || (f.group == "-" && p.Group == "")
}

// apply returns the peers f selects, in their order.
func (f peerFilter) apply(ps []apitype.Peer) []apitype.Peer {
	if !f.any() {
		return ps
	}
	out := []apitype.Peer{}
	for _, p := range ps {
		if f.match(p) {
			out = append(out, p)
		}
	}
	return out
}

// String is the filter as given on the command line, normalised.
func (f peerFilter) String() string {
	var parts []string
	if len(f.states) > 0 {
		parts = append(parts, "--state "+strings.Join(f.states, ","))
	}
	if f.hasGroup {
		parts = append(parts, "--group "+f.group)
	}
	return strings.Join(parts, " ")
}

// printFiltered prints the peers a filter selected, of probed peers: the
// same table, after a line that says how many it shows. A group fault is
// shown when its group is selected.
func printFiltered(w io.Writer, ps apitype.Peers, probed int, f peerFilter) {
	if f.hasGroup {
		var faults []apitype.GroupFault
		for _, g := range ps.GroupFaults {
			if g.Group == f.group {
				faults = append(faults, g)
			}
		}
		ps.GroupFaults = faults
	}
	printPeerFaults(w, ps)
	if ps.Configured > probed {
		fmt.Fprintf(w, "Probing %d of %d configured peers ([probe] max_peers; the selection rotates).\n", probed, ps.Configured)
	}
	if len(ps.Peers) == 0 {
		fmt.Fprintf(w, "No peer matches %s (of %d probed).\n", f, probed)
		return
	}
	fmt.Fprintf(w, "Showing %d of %d probed peers (%s).\n", len(ps.Peers), probed, f)
	printPeerTable(w, ps)
}

func cmdProbe(ctx context.Context, g *globals, c *client.Client, x call) int {
	p, err := c.Probe(ctx, x.args[0])
	if err != nil {
		return fail(g, err)
	}
	if g.json {
		printJSON(g.stdout, p)
	} else {
		printPeers(g.stdout, apitype.Peers{Peers: []apitype.Peer{p}})
	}
	return peersExit(p)
}

// peersExit is 0 when every peer is up, 3 (degraded) otherwise.
func peersExit(ps ...apitype.Peer) int {
	for _, p := range ps {
		if p.State != apitype.PeerUp {
			return exitDegraded
		}
	}
	return exitOK
}

func printPeers(w io.Writer, ps apitype.Peers) {
	printPeerFaults(w, ps)
	if len(ps.Peers) == 0 {
		fmt.Fprintln(w, "No peers are probed; declare [[peer]] blocks or [probe] peers_file.")
		return
	}
	if ps.Configured > len(ps.Peers) {
		fmt.Fprintf(w, "Probing %d of %d configured peers ([probe] max_peers; the selection rotates).\n", len(ps.Peers), ps.Configured)
	}
	printPeerTable(w, ps)
}

// printPeerFaults prints the probe ports (with the traffic class their
// probes and answers carry: [probe] traffic_class, else the port's
// [policy.roce] tos, else 0) and the suspects: a control endpoint that is
// not where configured, local ports and groups at fault.
func printPeerFaults(w io.Writer, ps apitype.Peers) {
	if len(ps.Ports) > 0 {
		fmt.Fprint(w, "Probe ports:")
		for _, p := range ps.Ports {
			fmt.Fprintf(w, " %s (QPN 0x%x, GID %s, tclass %d)", p.Key, p.QPN, p.GID, p.TrafficClass)
		}
		fmt.Fprintln(w)
		if ps.ControlError != "" {
			fmt.Fprintf(w, "CONTROL ENDPOINT: %s\n", ps.ControlError)
		}
		for _, p := range ps.Ports {
			if p.LocalFault != "" {
				fmt.Fprintf(w, "LOCAL FAULT? %s\n", p.LocalFault)
			}
			if p.Stuck != "" {
				fmt.Fprintf(w, "PORT CUT OFF: %s: %s\n", p.Key, p.Stuck)
			}
		}
	}
	for _, g := range ps.GroupFaults {
		fmt.Fprintf(w, "GROUP FAULT? %s\n", g.Reason)
	}
}

// printPeerTable prints a row per peer and path, then the peers' reasons,
// mismatches and missing authentication.
func printPeerTable(w io.Writer, ps apitype.Peers) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PEER\tGROUP\tSTATE\tWIRE\tPORT\tPATH\tRTT p50\tRTT p99\tLAST\tLOSS\tHOST p99\tSINCE")
	for _, p := range ps.Peers {
		if len(p.Paths) == 0 {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t-\t-\t-\t-\t-\t-\t-\t%s\n", p.Name, dash(p.Group), p.State, wireOf(p), peerSince(p.Since))
		}
		for _, pa := range p.Paths {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.1f%% of %d\t%s\t%s\n", p.Name, dash(p.Group), p.State, wireOf(p), pa.Local, pa.State,
				us(pa.RTTP50), us(pa.RTTP99), us(pa.LastRTT), pa.LossPct, pa.Samples, us(pa.HostDelayP99), peerSince(pa.Since))
		}
	}
	tw.Flush()
	for _, p := range ps.Peers {
		if p.Reason != "" {
			fmt.Fprintf(w, "%s: %s\n", p.Name, p.Reason)
		}
	}
	if len(ps.Peers) == 1 {
		printClock(w, ps.Peers[0])
	}
	printFlows(w, ps.Peers)
	printMismatches(w, ps.Peers)
	printFingerprintUnknown(w, ps.Peers)
	if ps.Auth == "" {
		return
	}
	// With a fleet key ([probe] auth = "prefer" during a rollout), name
	// the peers that still answer without it.
	for _, p := range ps.Peers {
		if p.WireVersion != 0 && !p.Authenticated {
			fmt.Fprintf(w, "UNAUTHENTICATED: %s answers without the fleet key (wire v%d); give it [probe] key_file\n", p.Name, p.WireVersion)
		}
	}
}

// printFlows prints the probe flows ([probe] flows: one UDP source port,
// so one of the fabric's equal-cost paths, each) of every path that is
// degraded or has a lossy flow, so that the flow to blame and its source
// port are on screen; healthy paths' flows are in --json.
func printFlows(w io.Writer, ps []apitype.Peer) {
	for _, p := range ps {
		for _, pa := range p.Paths {
			if len(pa.Flows) < 2 || (pa.State != apitype.PeerDegraded && pa.LossyFlows == 0) {
				continue
			}
			fmt.Fprintf(w, "FLOWS %s %s (%s, %d of %d lossy):\n", p.Name, pa.Local, pa.State, pa.LossyFlows, len(pa.Flows))
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "  FLOW\tSPORT\tQPN\tSENT\tLOST\tLOSS\tRTT p50\tRTT p99\t")
			for _, f := range pa.Flows {
				sport, mark := "-", ""
				if f.SourcePort != 0 {
					sport = fmt.Sprint(f.SourcePort)
				}
				if f.Lossy {
					mark = "LOSSY"
				}
				fmt.Fprintf(tw, "  %d\t%s\t0x%x\t%d\t%d\t%.1f%%\t%s\t%s\t%s\n", f.Flow, sport, f.QPN, f.Sent, f.Lost, f.LossPct, us(f.RTTP50), us(f.RTTP99), mark)
			}
			tw.Flush()
		}
	}
}

// wireOf says which control protocol version the peer answered in, and
// "+key" when that answer was authenticated by the fleet key.
func wireOf(p apitype.Peer) string {
	if p.WireVersion == 0 {
		return "-"
	}
	if p.Authenticated {
		return fmt.Sprintf("v%d+key", p.WireVersion)
	}
	return fmt.Sprintf("v%d", p.WireVersion)
}

func us(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0fµs", float64(d)/1e3)
}

func peerSince(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return time.Since(t).Round(time.Second).String()
}

// printClock prints the peer's clock offset in the detail view (one peer):
// how far its clock is ahead of this node's, the error bound and how many
// exchanges it is the best of (docs/PROBES.md, "Clock offset").
func printClock(w io.Writer, p apitype.Peer) {
	if p.ClockSamples == 0 {
		return
	}
	fmt.Fprintf(w, "CLOCK %s: %+.6fs ahead of this node's (± %s, best of %d exchanges)\n", p.Name, p.ClockOffset.Seconds(), p.ClockOffsetError, p.ClockSamples)
}

// printMismatches prints a MISMATCH line per setting on which a peer's
// fingerprint disagrees with this node's (docs/PROBES.md, "Fingerprints"):
// the field, both values and both ports; firmware and driver differences
// are marked informational, a rate difference a warning (a link trained
// low, or a fleet of mixed NICs).
func printMismatches(w io.Writer, ps []apitype.Peer) {
	for _, p := range ps {
		for _, m := range p.Mismatches {
			info := ""
			switch m.Severity {
			case apitype.SeverityInfo:
				info = " (informational)"
			case apitype.SeverityWarn:
				info = " (warning: the ports train at different rates)"
			}
			fmt.Fprintf(w, "MISMATCH %s: %s %s here (%s), %s on the peer (%s)%s\n", p.Name, m.Field, m.Local, m.LocalPort, m.Peer, m.PeerPort, info)
		}
	}
}

// printFingerprintUnknown names the peers that answer without a fingerprint
// (docs/PROBES.md, "Fingerprints"): an rdmad that predates fingerprints, in
// wire version 1 or an older version 2. They are probed as before, but
// nothing of theirs is compared, so no MISMATCH line can show for them. A
// peer that has not answered yet (wire "-") is not named: it has told
// nothing at all.
func printFingerprintUnknown(w io.Writer, ps []apitype.Peer) {
	for _, p := range ps {
		if p.WireVersion != 0 && (p.FingerprintUnknown || p.Fingerprint == nil) {
			fmt.Fprintf(w, "FINGERPRINT UNKNOWN: %s answers without a fingerprint (wire v%d): an rdmad that predates fingerprints; "+
				"its MTU, link layer, RoCE, QoS, firmware and driver are not compared until it is upgraded\n", p.Name, p.WireVersion)
		}
	}
}
