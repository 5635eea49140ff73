//go:build e2e

package e2e

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestDBusProbe probes the other node of the two-node bed through
// org.rdmad.Agent1.Probe on the VM's real system bus, with the packaged
// policy file, and reads the Peers property.
func TestDBusProbe(t *testing.T) {
	dbusReady(t)
	other := peersOther(t)
	peersWait(t, 1, other, "up", 90*time.Second)

	// busctl prints the signature, then state, rtt_ns, loss_percent, reason:
	// stds "up" 38000 0 ""
	out := strings.TrimSpace(mustRun(t, "busctl", "--system", "call", dbusName, dbusPath, dbusIface, "Probe", "s", other))
	f := strings.Fields(out)
	if len(f) != 5 || f[0] != "stds" || f[1] != `"up"` || f[4] != `""` {
		t.Fatalf("busctl call Probe %s = %q, want stds \"up\" <rtt_ns> <loss> \"\"", other, out)
	}
	if rtt, err := strconv.ParseUint(f[2], 10, 64); err != nil || rtt == 0 || rtt > uint64(time.Second) {
		t.Errorf("Probe %s: rtt_ns %q, want a round trip between 0 and 1 s", other, f[2])
	}
	if loss, err := strconv.ParseFloat(f[3], 64); err != nil || loss < 0 || loss > 100 {
		t.Errorf("Probe %s: loss_percent %q, want 0..100", other, f[3])
	}

	peers := dbusGet(t, "Peers")
	if !strings.HasPrefix(peers, "a(sssssttd) ") || !strings.Contains(peers, `"`+other+`"`) || !strings.Contains(peers, `"up"`) {
		t.Errorf("Peers = %s, want %s listed up", peers, other)
	}

	// An address that is not a configured peer: rdmad's error, which says
	// what to do.
	if out, err := run("busctl", "--system", "call", dbusName, dbusPath, dbusIface, "Probe", "s", "198.51.100.9"); err == nil ||
		!strings.Contains(err.Error(), "not a configured peer") {
		t.Errorf("busctl call Probe 198.51.100.9 = %q, %v; want \"not a configured peer\"", out, err)
	}
	// Only root may probe: the installed policy refuses nobody.
	if out, err := dbusAsNobody("call", dbusName, dbusPath, dbusIface, "Probe", "s", other); err == nil ||
		!strings.Contains(err.Error(), "Access denied") {
		t.Errorf("busctl call Probe as nobody: %q, %v; want access denied", out, err)
	}
	// rdmad still serves after the refused calls.
	if got := dbusGet(t, "State"); got != `s "running"` {
		t.Errorf("State after the refused probes = %s, want %s", got, `s "running"`)
	}
}
