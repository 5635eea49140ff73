package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
)

// TestPrintPeerClock: the detail view of one peer shows its clock offset
// once the peer sent timestamps, and nothing before; the table of several
// peers stays as it was.
func TestPrintPeerClock(t *testing.T) {
	p := apitype.Peer{Name: "192.0.2.17", State: apitype.PeerUp, WireVersion: 2,
		ClockOffset: 3*time.Second + 1500*time.Microsecond, ClockOffsetError: 120 * time.Microsecond, ClockSamples: 3}
	var b bytes.Buffer
	printPeers(&b, apitype.Peers{Peers: []apitype.Peer{p}})
	if want := "CLOCK 192.0.2.17: +3.001500s ahead of this node's (± 120µs, best of 3 exchanges)"; !strings.Contains(b.String(), want) {
		t.Errorf("detail view lacks %q:\n%s", want, b.String())
	}
	b.Reset()
	printPeers(&b, apitype.Peers{Peers: []apitype.Peer{p, {Name: "192.0.2.18", State: apitype.PeerUp}}})
	if strings.Contains(b.String(), "CLOCK") {
		t.Errorf("the table of several peers shows a clock:\n%s", b.String())
	}
	p.ClockSamples = 0
	b.Reset()
	printPeers(&b, apitype.Peers{Peers: []apitype.Peer{p}})
	if strings.Contains(b.String(), "CLOCK") {
		t.Errorf("a peer without timestamps shows a clock:\n%s", b.String())
	}
}
