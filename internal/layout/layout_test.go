// Package layout holds the test that keeps docs/ARCHITECTURE.md's arrows pointing
// down: policy and verbs know nothing of the daemon or of each other, the
// daemon's transports share daemon/service rather than import each other, and
// the wire types (client/apitype, which cmd/rdmactl's deps test keeps a
// leaf) may be used by every layer.
package layout

import (
	"os/exec"
	"strings"
	"testing"
)

const mod = "github.com/rdmad/rdmad/"

// rules: the packages under each prefix must not depend on any package
// under the forbidden prefixes.
var rules = []struct {
	pkgs      string
	forbidden []string
}{
	{"policy/...", []string{"daemon", "verbs", "cmd", "client", "doctor"}},
	{"verbs/...", []string{"daemon", "policy", "cmd", "doctor"}},
	{"inventory/...", []string{"daemon", "policy", "verbs", "cmd", "doctor"}},
	{"doctor/...", []string{"daemon", "policy", "verbs", "cmd"}},
	{"client/...", []string{"daemon", "policy", "verbs", "cmd", "doctor", "inventory"}},
	{"internal/...", []string{"daemon", "policy", "verbs", "cmd", "client", "doctor", "inventory"}},
	{"health/...", []string{"client", "daemon", "policy", "verbs", "cmd", "doctor", "inventory", "internal"}},
	// The kernel log follower is a self-contained source the daemon
	// wires in: it knows no other daemon package.
	{"daemon/kmsg/...", []string{"daemon", "policy", "verbs", "cmd", "doctor", "inventory"}},
	// The transports (the socket API, D-Bus) share the service contract
	// (daemon/service), never each other's code; the watch stream follows
	// the store's read side and knows neither transport; the contract
	// knows none of them.
	{"daemon/api/...", []string{"daemon/bus"}},
	{"daemon/bus/...", []string{"daemon/api"}},
	{"daemon/watch/...", []string{"daemon/api", "daemon/bus"}},
	{"daemon/service/...", []string{"daemon/api", "daemon/bus", "daemon/watch"}},
}

func TestArrowsPointDown(t *testing.T) {
	for _, r := range rules {
		out, err := exec.Command("go", "list", "-deps", "-test=false", "-f", "{{.ImportPath}}", mod+r.pkgs).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", r.pkgs, err)
		}
		for _, p := range strings.Fields(string(out)) {
			rel, ok := strings.CutPrefix(p, mod)
			if !ok || rel == "client/apitype" {
				// The wire types are a leaf that every layer may use.
				continue
			}
			if own := strings.TrimSuffix(r.pkgs, "/..."); rel == own || strings.HasPrefix(rel, own+"/") {
				continue // a package may use itself and its children
			}
			for _, f := range r.forbidden {
				if rel == f || strings.HasPrefix(rel, f+"/") {
					t.Errorf("%s depends on %s: the arrow points %s", r.pkgs, rel, "up or sideways; see docs/ARCHITECTURE.md")
				}
			}
		}
	}
}
