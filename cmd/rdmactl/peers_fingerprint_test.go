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
