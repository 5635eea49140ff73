//go:build e2e

package e2e

import (
	"strings"
	"testing"
	"time"
)

//e2e:nodes 2

// TestDoctorPeersDown: with node 2's rdmad stopped, node 1 reports it down
// and `rdmactl doctor` on node 1 fails its peers check, naming node 2 and
// the fix, and exits 3. rdmad on node 2 is started again at the end, and
// the test waits until node 1 sees it up (later tests need it).
func TestDoctorPeersDown(t *testing.T) {
	other := peersOther(t)
	peersWait(t, 1, other, "up", 90*time.Second)
	r, _ := doctorRun(t)
	if v, msg := r.verdict("peers"); v != "ok" || !strings.Contains(msg, "peers are up") {
		t.Errorf("with node 2 up: doctor peers check %s (%s), want ok", v, msg)
	}

	mustRun(t, "vmnode", "2", "systemctl", "stop", "rdmad")
	t.Cleanup(func() {
		if _, err := run("vmnode", "2", "systemctl", "start", "rdmad"); err != nil {
			t.Errorf("restart rdmad on node 2: %v", err)
			return
		}
		peersWait(t, 1, other, "up", 90*time.Second)
	})
	peersWait(t, 1, other, "down", 30*time.Second)

	r, code := doctorRun(t)
	var fix string
	for _, c := range r.Checks {
		if c.ID == "peers" {
			fix = c.Fix
		}
	}
	v, msg := r.verdict("peers")
	if v != "fail" || !strings.Contains(msg, "peers down: "+other) {
		t.Errorf("with node 2 stopped: doctor peers check %s (%s), want fail naming %s", v, msg, other)
	}
	for _, want := range []string{"UDP 4791", "[probe] port", "rdmactl peers"} {
		if !strings.Contains(fix, want) {
			t.Errorf("peers fix %q lacks %q", fix, want)
		}
	}
	if code != 3 || r.Worst != "fail" {
		t.Errorf("doctor exit %d, worst %s with a failing peers check; want 3, fail", code, r.Worst)
	}
	// The human form says the same.
	out, err := run("rdmactl", "doctor", "--", "--interval", "0")
	if err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("rdmactl doctor with node 2 stopped: %v, want exit status 3", err)
	}
	if !strings.Contains(out, "[FAIL] peers") || !strings.Contains(out, other) {
		t.Errorf("rdmactl doctor output lacks the failing peers check naming %s:\n%s", other, out)
	}

	// Back up: the check passes again.
	mustRun(t, "vmnode", "2", "systemctl", "start", "rdmad")
	peersWait(t, 1, other, "up", 90*time.Second)
	r, _ = doctorRun(t)
	if v, msg := r.verdict("peers"); v != "ok" {
		t.Errorf("after node 2 restarted: doctor peers check %s (%s), want ok", v, msg)
	}
}
