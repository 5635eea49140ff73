package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/client/apitype"
)

// TestPrintPeersAuth checks what `rdmactl peers` says about wire versions
// and the fleet key: a column per peer, and during a rollout a line for
// each peer that answers without the key.
func TestPrintPeersAuth(t *testing.T) {
	ps := apitype.Peers{Auth: "prefer", Peers: []apitype.Peer{
		{Name: "192.0.2.17", State: apitype.PeerUp, WireVersion: 2, Authenticated: true},
		{Name: "192.0.2.18", State: apitype.PeerUp, WireVersion: 1},
		{Name: "192.0.2.19", State: apitype.PeerDown},
	}}
	var b bytes.Buffer
	printPeers(&b, ps)
	out := b.String()
	for _, want := range []string{"WIRE", "v2+key", "v1 ", "UNAUTHENTICATED: 192.0.2.18 answers without the fleet key (wire v1)"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Count(out, "UNAUTHENTICATED") != 1 {
		t.Errorf("want one UNAUTHENTICATED line (not for the authenticated peer, nor one that never answered):\n%s", out)
	}
	ps.Auth = ""
	b.Reset()
	printPeers(&b, ps)
	if strings.Contains(b.String(), "UNAUTHENTICATED") {
		t.Errorf("without a fleet key nobody is flagged:\n%s", b.String())
	}
}
