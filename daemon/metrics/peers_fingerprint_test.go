package metrics

import (
	"strings"
	"testing"

	"github.com/rdmad/rdmad/client/apitype"
)

// TestPeerFingerprintMismatches counts peers per mismatching field (a peer
// mismatching on two paths counts once), and every field reads 0 when no
// peer mismatches on it.
func TestPeerFingerprintMismatches(t *testing.T) {
	mtu := apitype.Mismatch{Field: "mtu", Local: "1500", Peer: "4200", Severity: apitype.SeverityMust}
	snap := &apitype.Snapshot{Peers: apitype.Peers{
		Ports: []apitype.PeerPort{{Key: "rxe0/1"}},
		Peers: []apitype.Peer{
			{Name: "192.0.2.17", State: apitype.PeerUp, Mismatches: []apitype.Mismatch{mtu, mtu, {Field: "firmware", Local: "1", Peer: "2", Severity: apitype.SeverityInfo}}},
			{Name: "192.0.2.18", State: apitype.PeerUp, Mismatches: []apitype.Mismatch{mtu}},
			{Name: "192.0.2.19", State: apitype.PeerUp, FingerprintUnknown: true},
		},
	}}
	out := scrapeSnapshot(t, snap)
	for _, want := range []string{
		`rdmad_peer_fingerprint_mismatches{field="mtu"} 2`,
		`rdmad_peer_fingerprint_mismatches{field="firmware"} 1`,
		`rdmad_peer_fingerprint_mismatches{field="pfc"} 0`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("scrape lacks %s:\n%s", want, out)
		}
	}
}
