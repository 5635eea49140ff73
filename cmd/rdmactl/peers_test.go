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
			{Key: "rxe1/1", GID: "198.51.100.1", QPN: 0x12, Stuck: "its post of probes (ibv_post_send) has not returned since 2026-12-07T10:00:00Z"},
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
		"PORT CUT OFF: rxe1/1: its post of probes (ibv_post_send) has not returned since 2026-12-07T10:00:00Z\n",
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

// TestPrintPeersFlows: a degraded path's flows are listed, the lossy one
// marked with its source port; an up path's are not.
func TestPrintPeersFlows(t *testing.T) {
	flows := func(lossy int) []apitype.PeerFlow {
		var out []apitype.PeerFlow
		for i := range 4 {
			f := apitype.PeerFlow{Flow: i, SourcePort: uint16(49152 + i), QPN: uint32(0x11 + i), Sent: 100, RTTP50: 30 * time.Microsecond, RTTP99: 40 * time.Microsecond}
			if i == lossy {
				f.Lost, f.LossPct, f.Lossy = 100, 100, true
			}
			out = append(out, f)
		}
		return out
	}
	ps := apitype.Peers{Peers: []apitype.Peer{
		{Name: "192.0.2.17", State: apitype.PeerDegraded, Reason: "rxe0/1: loss on 1 of 4 flows (worst flow 2, UDP source port 49154: ...)",
			Paths: []apitype.PeerPath{{Local: "rxe0/1", State: apitype.PeerDegraded, Flows: flows(2), LossyFlows: 1}}},
		{Name: "192.0.2.18", State: apitype.PeerUp, Paths: []apitype.PeerPath{{Local: "rxe0/1", State: apitype.PeerUp, Flows: flows(-1)}}},
	}}
	var b bytes.Buffer
	printPeers(&b, ps)
	out := b.String()
	if !strings.Contains(out, "FLOWS 192.0.2.17 rxe0/1 (degraded, 1 of 4 lossy):\n") || strings.Contains(out, "FLOWS 192.0.2.18") {
		t.Errorf("want the flows of the degraded path only:\n%s", out)
	}
	var lossy string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasSuffix(strings.TrimSpace(l), "LOSSY") {
			lossy = l
		}
	}
	if f := strings.Fields(lossy); len(f) < 6 || f[0] != "2" || f[1] != "49154" || f[2] != "0x13" || f[4] != "100" || f[5] != "100.0%" {
		t.Errorf("lossy flow line %q: want flow 2, source port 49154, QPN 0x13, 100 lost (100.0%%):\n%s", lossy, out)
	}
	if n := strings.Count(out, "LOSSY"); n != 1 {
		t.Errorf("%d flows marked LOSSY, want 1:\n%s", n, out)
	}
}
