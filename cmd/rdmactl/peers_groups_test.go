package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/client/apitype"
)

// TestPrintPeersGroupFault: a suspect group is named before the table, one
// line per group, like a suspect local port.
func TestPrintPeersGroupFault(t *testing.T) {
	ps := apitype.Peers{
		Ports:      []apitype.PeerPort{{Key: "rxe0/1", GID: "192.0.2.1", QPN: 0x11}},
		Configured: 3,
		Peers: []apitype.Peer{
			{Name: "192.0.2.17", Group: "tor-a", State: apitype.PeerDown},
			{Name: "192.0.2.18", Group: "tor-a", State: apitype.PeerDown},
			{Name: "192.0.2.30", Group: "tor-b", State: apitype.PeerUp},
		},
		GroupFaults: []apitype.GroupFault{{Group: "tor-a", Reason: "all 2 probed peers of group tor-a are down from every local port while 1 peers of other groups answer"}},
	}
	var b bytes.Buffer
	printPeers(&b, ps)
	out := b.String()
	want := "GROUP FAULT? all 2 probed peers of group tor-a are down from every local port while 1 peers of other groups answer\n"
	if strings.Count(out, "GROUP FAULT?") != 1 || !strings.Contains(out, want) {
		t.Errorf("want one line %q:\n%s", want, out)
	}
	if strings.Index(out, "GROUP FAULT?") > strings.Index(out, "PEER") {
		t.Errorf("the group fault must come before the table:\n%s", out)
	}
	b.Reset()
	ps.GroupFaults = []apitype.GroupFault{}
	printPeers(&b, ps)
	if strings.Contains(b.String(), "GROUP FAULT") {
		t.Errorf("a group fault line without one:\n%s", b.String())
	}
}
