// Package layout holds the test that keeps docs/ARCHITECTURE.md's arrows pointing
// down: policy and verbs know nothing of the daemon or of each other, the
// daemon's transports share daemon/service rather than import each other, the
// probe control plane (probe) knows nothing of the verbs binding, and the
// wire types (client/apitype, which cmd/rdmactl's deps test keeps a leaf)
// may be used by every layer.
package layout

import (
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const mod = "github.com/rdmad/rdmad/"

// rules: the packages under each prefix must not depend on any package
// under the forbidden prefixes, except the allowed ones; with tests, their
// tests must not either.
var rules = []struct {
	pkgs      string
	forbidden []string
	allowed   []string
	tests     bool
}{
	{"policy/...", []string{"daemon", "verbs", "cmd", "client", "doctor"}, nil, false},
	// verbs/peer implements probe.Transport with probe/ud's values, and
	// verbs/bw speaks probe/wire's messages: both leaves, below the probe
	// manager, which verbs never imports.
	{"verbs/...", []string{"daemon", "policy", "cmd", "doctor", "probe"}, []string{"probe/ud", "probe/wire"}, false},
	// The probe control plane never imports the cgo binding, not even
	// in its tests: what it needs of verbs state (a port's active MTU)
	// the daemon injects.
	{"probe/...", []string{"daemon", "policy", "verbs", "cmd", "doctor", "inventory"}, nil, true},
	// Its leaves import nothing of the module but internal leaves.
	{"probe/ud", []string{"daemon", "policy", "verbs", "cmd", "client", "doctor", "inventory", "probe"}, []string{"probe/ud"}, false},
	{"probe/wire", []string{"daemon", "policy", "verbs", "cmd", "client", "doctor", "inventory", "probe"}, []string{"probe/wire"}, false},
	{"inventory/...", []string{"daemon", "policy", "verbs", "cmd", "doctor"}, nil, false},
	{"doctor/...", []string{"daemon", "policy", "verbs", "cmd"}, nil, false},
	{"client/...", []string{"daemon", "policy", "verbs", "cmd", "doctor", "inventory", "probe"}, nil, false},
	{"internal/...", []string{"daemon", "policy", "verbs", "cmd", "client", "doctor", "inventory", "probe"}, nil, false},
	{"health/...", []string{"client", "daemon", "policy", "verbs", "cmd", "doctor", "inventory", "internal", "probe"}, nil, false},
	// The kernel log follower is a self-contained source the daemon
	// wires in: it knows no other daemon package.
	{"daemon/kmsg/...", []string{"daemon", "policy", "verbs", "cmd", "doctor", "inventory", "probe"}, nil, false},
	// The transports (the socket API, D-Bus) share the service contract
	// (daemon/service), never each other's code; the watch stream follows
	// the store's read side and knows neither transport; the contract
	// knows none of them.
	{"daemon/api/...", []string{"daemon/bus"}, nil, false},
	{"daemon/bus/...", []string{"daemon/api"}, nil, false},
	{"daemon/watch/...", []string{"daemon/api", "daemon/bus"}, nil, false},
	{"daemon/service/...", []string{"daemon/api", "daemon/bus", "daemon/watch"}, nil, false},
}

func TestArrowsPointDown(t *testing.T) {
	for _, r := range rules {
		out, err := exec.Command("go", "list", "-deps", "-test="+strconv.FormatBool(r.tests), "-f", "{{.ImportPath}}", mod+r.pkgs).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", r.pkgs, err)
		}
		for _, p := range strings.Fields(string(out)) {
			rel, ok := strings.CutPrefix(p, mod)
			if !ok || rel == "client/apitype" {
				// The wire types are a leaf that every layer may use.
				continue
			}
			if slices.Contains(r.allowed, rel) {
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
