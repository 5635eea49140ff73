package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rdmad/rdmad/client"
	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/doctor"
	"github.com/rdmad/rdmad/inventory/rdmares"
)

// cmdResources prints the RDMA objects the kernel tracks per process and
// device (GET /v1/resources). When rdmad does not answer (or predates the
// route), rdmactl reads RDMA netlink itself: the kernel lets any user dump
// the objects. Exit codes: 0 read, 1 nothing could be read.
func cmdResources(ctx context.Context, g *globals, c *client.Client, x call) int {
	res, err := resourcesFrom(ctx, g, c)
	if err != nil {
		return fail(g, err)
	}
	// rdmad's sandbox hides other users' processes from it (ProtectProc=
	// invisible): name them from the caller's view of /proc.
	rdmares.FillComms(&res, "")
	if g.json {
		printJSON(g.stdout, res)
	} else if res.Error == "" {
		printResources(g.stdout, res)
	}
	if res.Error != "" {
		fmt.Fprintf(g.stderr, "rdmactl: cannot read the RDMA resources: %s\n", res.Error)
		return exitError
	}
	return exitOK
}

// resourcesFrom asks rdmad, and reads the kernel here when rdmad cannot
// answer. Access denied and other refusals by rdmad are errors.
func resourcesFrom(ctx context.Context, g *globals, c *client.Client) (apitype.Resources, error) {
	err := g.socketErr
	if err == nil {
		var res apitype.Resources
		if res, err = c.Resources(ctx); err == nil {
			return res, nil
		}
	}
	var ae *client.AccessDeniedError
	var api *client.APIError
	switch {
	case errors.As(err, &ae):
		return apitype.Resources{}, err
	case errors.As(err, &api) && api.Status != http.StatusNotFound && api.Status != http.StatusNotImplemented:
		return apitype.Resources{}, err
	}
	if errors.As(err, &api) && api.Status == http.StatusNotImplemented {
		// rdmad answered that it does not read them (a fixture tree): say
		// so, not that it did not answer.
		fmt.Fprintf(g.stderr, "rdmactl: %s; reading the kernel's RDMA resources directly\n", api.Message)
	} else {
		fmt.Fprintf(g.stderr, "rdmactl: rdmad did not answer (%v); reading the kernel's RDMA resources directly\n", err)
	}
	res, rerr := rdmares.Read(ctx, rdmares.Options{})
	if rerr != nil {
		return apitype.Resources{ReadAt: time.Now(), Error: rerr.Error()}, nil
	}
	return res, nil
}

// printResources prints the processes, most pinned bytes first, then the
// devices' totals.
func printResources(w io.Writer, res apitype.Resources) {
	if len(res.Devices) == 0 {
		fmt.Fprintln(w, "no RDMA devices")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PID\tCOMM\tDEVICES\tQPS\tCQS\tMRS\tPDS\tPINNED")
	for _, p := range res.Processes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", processPID(p), processName(p), strings.Join(p.Devices, ","), countCols(p.ResourceCounts), doctor.HumanBytes(p.PinnedBytes))
	}
	tw.Flush()
	if len(res.Processes) == 0 {
		fmt.Fprintln(w, "(no RDMA objects)")
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "DEVICE\tQPS\tCQS\tMRS\tPDS\tPINNED")
	for _, d := range res.Devices {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", d.Device, countCols(d.ResourceCounts), doctor.HumanBytes(d.PinnedBytes))
	}
	tw.Flush()
}

func countCols(c apitype.ResourceCounts) string {
	return fmt.Sprintf("%d\t%d\t%d\t%d", c.QPs, c.CQs, c.MRs, c.PDs)
}

func processPID(p apitype.ProcessResources) string {
	if p.PID == 0 {
		return "-"
	}
	return strconv.Itoa(p.PID)
}

func processName(p apitype.ProcessResources) string {
	switch {
	case p.Kernel:
		return "[" + p.Comm + "]"
	case p.PID == 0:
		return "(exiting)"
	case p.Comm == "":
		return "?"
	}
	return p.Comm
}
