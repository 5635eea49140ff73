package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/rdmad/rdmad/client"
	"github.com/rdmad/rdmad/client/apitype"
)

// cmdQoS prints the DCB state of the RoCE netdevs (status qos), all or the
// one named, like mlnx_qos -i <netdev> without arguments.
func cmdQoS(ctx context.Context, g *globals, c *client.Client, x call) int {
	s, err := c.Status(ctx)
	if err != nil {
		return fail(g, err)
	}
	qs := s.QoS
	if qs == nil {
		qs = []apitype.NetdevQoS{}
	}
	if len(x.args) == 1 {
		nd := x.args[0]
		var found []apitype.NetdevQoS
		for _, q := range qs {
			if q.Netdev == nd {
				found = append(found, q)
			}
		}
		if len(found) == 0 {
			return fail(g, fmt.Errorf("%q is not a RoCE netdev of this node (the netdev of an RDMA device's Ethernet port); %s",
				nd, knownNetdevs(qs)))
		}
		qs = found
	}
	if g.json {
		printJSON(g.stdout, qs)
		return exitOK
	}
	if len(qs) == 0 {
		fmt.Fprintln(g.stdout, "No RoCE netdevs: no RDMA device has an Ethernet port with a netdev (InfiniBand has no DCB).")
		return exitOK
	}
	for i, q := range qs {
		if i > 0 {
			fmt.Fprintln(g.stdout)
		}
		printQoS(g.stdout, q)
	}
	return exitOK
}

func knownNetdevs(qs []apitype.NetdevQoS) string {
	if len(qs) == 0 {
		return "rdmad knows none (rdmactl status lists the devices and their netdevs)"
	}
	names := make([]string, len(qs))
	for i, q := range qs {
		names[i] = q.Netdev
	}
	return "give one of: " + strings.Join(names, ", ")
}

// printQoS prints one netdev's DCB state in the order mlnx_qos does: DCBX
// mode, trust, DSCP map, PFC, ETS.
func printQoS(w io.Writer, q apitype.NetdevQoS) {
	title := q.Netdev
	if q.Device != "" {
		title += " (" + q.Device + ")"
	}
	if !q.Supported {
		fmt.Fprintf(w, "%s: %s\n", title, q.Error)
		return
	}
	fmt.Fprintln(w, title)
	if len(q.DCBX) > 0 {
		fmt.Fprintf(w, "  DCBX mode:  %s\n", strings.Join(q.DCBX, " "))
	}
	how := "by the APP table: DSCP entries make it trust DSCP"
	if q.TrustTable {
		how = "by the APP trust table"
	}
	fmt.Fprintf(w, "  trust:      %s (%s)\n", dash(q.Trust), how)

	fmt.Fprint(w, "  DSCP map:  ")
	if len(q.DSCP) == 0 {
		fmt.Fprintln(w, " none")
	} else {
		fmt.Fprintln(w)
		byPrio := map[int][]int{}
		for _, m := range q.DSCP {
			byPrio[m.Priority] = append(byPrio[m.Priority], m.DSCP)
		}
		for p := range 8 {
			if ds := byPrio[p]; len(ds) > 0 {
				fmt.Fprintf(w, "    prio %d:  dscp %s\n", p, ranges(ds))
			}
		}
	}

	if !q.HasPFC {
		fmt.Fprintln(w, "  PFC:        not reported by the driver")
	} else {
		fmt.Fprintf(w, "  PFC:        priority %s   (cap %d, delay %d)\n", cells(func(p int) string { return strconv.Itoa(p) }), q.PFCCap, q.PFCDelay)
		fmt.Fprintf(w, "              enabled  %s\n", cells(func(p int) string {
			if q.PFCOn(p) {
				return "1"
			}
			return "0"
		}))
	}

	if q.ETS == nil {
		fmt.Fprintln(w, "  ETS:        not reported by the driver")
		return
	}
	fmt.Fprintln(w, "  ETS:")
	for _, tc := range q.ETS.TCs {
		var prios []string
		for p, t := range q.ETS.PrioTC {
			if t == tc.TC {
				prios = append(prios, strconv.Itoa(p))
			}
		}
		share := tc.TSA
		if tc.TSA == "ets" {
			share = fmt.Sprintf("ets %d%%", tc.Bandwidth)
		}
		fmt.Fprintf(w, "    tc %d:    %-8s priorities %s\n", tc.TC, share, dash(strings.Join(prios, " ")))
	}
}

// cells formats the 8 priorities' values in columns of 3.
func cells(f func(int) string) string {
	var b strings.Builder
	for p := range 8 {
		fmt.Fprintf(&b, "%3s", f(p))
	}
	return b.String()
}

// ranges formats DSCP values as runs in the order given, e.g.
// [24 25 26 27 46] as "24-27,46".
func ranges(vs []int) string {
	var parts []string
	for i := 0; i < len(vs); {
		j := i
		for j+1 < len(vs) && vs[j+1] == vs[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d-%d", vs[i], vs[j]))
		} else {
			parts = append(parts, strconv.Itoa(vs[i]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// printQoSTable prints one line per RoCE netdev's DCB state, for rdmactl
// status (rdmactl qos has the details).
func printQoSTable(w io.Writer, qs []apitype.NetdevQoS, sh *shortener) {
	fmt.Fprintln(w, "QOS\tDEVICE\tTRUST\tPFC\tDSCP MAP\tETS\tDETAIL")
	for _, q := range qs {
		if !q.Supported {
			row(w, q.Netdev, dash(q.Device), "-", "-", "-", "-", sh.cell(q.Error))
			continue
		}
		pfc := "-"
		if q.HasPFC {
			pfc = apitype.FormatPriorities(q.PFCEnabled)
		}
		ets := "-"
		if q.ETS != nil {
			ets = fmt.Sprintf("%d tcs", len(q.ETS.TCs))
		}
		row(w, q.Netdev, dash(q.Device), dash(q.Trust), pfc, fmt.Sprintf("%d values", len(q.DSCP)), ets, "")
	}
}
