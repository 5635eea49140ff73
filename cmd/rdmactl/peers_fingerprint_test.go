package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
)

// TestPrintMismatches: a MISMATCH line per differing field with both values
// and ports; JSON has mismatches [] (never null) and fingerprint_unknown.
func TestPrintMismatches(t *testing.T) {
	ps := apitype.Peers{Ports: []apitype.PeerPort{{Key: "rxe0/1"}}, Configured: 2, Peers: []apitype.Peer{
		{Name: "192.0.2.17", State: apitype.PeerUp, Since: time.Now(), WireVersion: 2,
			Fingerprint: &apitype.Fingerprint{Ports: []apitype.FingerprintPort{{Key: "rxe0/1", MTU: 4200}}},
			Mismatches: []apitype.Mismatch{
				{Field: "mtu", Local: "1500", Peer: "4200", Severity: apitype.SeverityMust, LocalPort: "rxe0/1", PeerPort: "rxe0/1"},
				{Field: "firmware", Local: "1.0", Peer: "1.1", Severity: apitype.SeverityInfo, LocalPort: "rxe0/1", PeerPort: "rxe0/1"},
			}},
		{Name: "192.0.2.18", State: apitype.PeerUp, Since: time.Now(), WireVersion: 1, FingerprintUnknown: true},
	}}
	var b bytes.Buffer
	printPeers(&b, ps)
	out := b.String()
	for _, want := range []string{
		"MISMATCH 192.0.2.17: mtu 1500 here (rxe0/1), 4200 on the peer (rxe0/1)\n",
		"MISMATCH 192.0.2.17: firmware 1.0 here (rxe0/1), 1.1 on the peer (rxe0/1) (informational)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "MISMATCH 192.0.2.18") {
		t.Errorf("a peer with an unknown fingerprint has a MISMATCH line:\n%s", out)
	}
	j, err := json.Marshal(ps)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(j), `"fingerprint":null,"fingerprint_unknown":true,"mismatches":[]`) {
		t.Errorf("JSON of the old peer: want fingerprint null, fingerprint_unknown true, mismatches []:\n%s", j)
	}
}

// TestPrintFingerprintUnknown: a peer that answers without a fingerprint
// (an rdmad that predates them) is named as such, not only "v1" in the WIRE
// column; a peer that has not answered yet, or that sent its fingerprint,
// is not.
func TestPrintFingerprintUnknown(t *testing.T) {
	ps := apitype.Peers{Ports: []apitype.PeerPort{{Key: "rxe0/1"}}, Configured: 4, Peers: []apitype.Peer{
		{Name: "192.0.2.17", State: apitype.PeerUp, Since: time.Now(), WireVersion: 2, Fingerprint: &apitype.Fingerprint{}},
		{Name: "192.0.2.18", State: apitype.PeerUp, Since: time.Now(), WireVersion: 1, FingerprintUnknown: true},
		{Name: "192.0.2.19", State: apitype.PeerUp, Since: time.Now(), WireVersion: 2, FingerprintUnknown: true},
		{Name: "192.0.2.20", State: apitype.PeerDown, Since: time.Now(), FingerprintUnknown: true},
	}}
	var b bytes.Buffer
	printPeers(&b, ps)
	out := b.String()
	for _, want := range []string{
		"FINGERPRINT UNKNOWN: 192.0.2.18 answers without a fingerprint (wire v1): an rdmad that predates fingerprints; its MTU, link layer, RoCE, QoS, firmware and driver are not compared until it is upgraded\n",
		"FINGERPRINT UNKNOWN: 192.0.2.19 answers without a fingerprint (wire v2): an rdmad that predates fingerprints",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, name := range []string{"192.0.2.17", "192.0.2.20"} {
		if strings.Contains(out, "FINGERPRINT UNKNOWN: "+name) {
			t.Errorf("%s is named as a peer without a fingerprint:\n%s", name, out)
		}
	}
}
