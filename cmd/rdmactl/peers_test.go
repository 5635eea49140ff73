package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
)

// TestPrintPeers checks what an operator reads first: the probe ports with
// the traffic class they probe in, the suspect local port and a control
// endpoint that could not move, before the table.
func TestPrintPeers(t *testing.T) {
	down := func(name string) apitype.Peer {
		return apitype.Peer{Name: name, State: apitype.PeerDown, Reason: "3 probes in a row unanswered", Since: time.Now(),
			Paths: []apitype.PeerPath{{Local: "rxe0/1", State: apitype.PeerDown}}}
	}
	ps := apitype.Peers{
		Ports: []apitype.PeerPort{
			{Key: "rxe0/1", GID: "192.0.2.1", QPN: 0x11, TrafficClass: 104, LocalFault: "all 2 peers are down from rxe0/1: suspect this port"},
			{Key: "rxe1/1", GID: "198.51.100.1", QPN: 0x12},
		},
		Configured:   2,
		Peers:        []apitype.Peer{down("192.0.2.17"), down("192.0.2.18")},
		ControlPort:  18516,
		ControlError: "peers: listen on control endpoint [::]:18600: address already in use; still answering on UDP port 18516",
	}
	var b bytes.Buffer
	printPeers(&b, ps)
	out := b.String()
	for _, want := range []string{
		// The class each port's probes and answers carry ([probe]
		// traffic_class, else the port's [policy.roce] tos, else 0).
		"Probe ports: rxe0/1 (QPN 0x11, GID 192.0.2.1, tclass 104) rxe1/1 (QPN 0x12, GID 198.51.100.1, tclass 0)\n",
		"CONTROL ENDPOINT: peers: listen on control endpoint [::]:18600: address already in use; still answering on UDP port 18516\n",
		"LOCAL FAULT? all 2 peers are down from rxe0/1: suspect this port\n",
		"192.0.2.17",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Count(out, "LOCAL FAULT?") != 1 {
		t.Errorf("want one LOCAL FAULT line (rxe1/1 is fine):\n%s", out)
	}
	if strings.Index(out, "LOCAL FAULT?") > strings.Index(out, "PEER") {
		t.Errorf("the fault must come before the table:\n%s", out)
	}
}
