// Package layout holds the test that keeps docs/ARCHITECTURE.md's arrows pointing
// down: policy and verbs know nothing of the daemon or of each other, the
// probe control plane (probe) knows nothing of the verbs binding, and the
// wire types (client/apitype, which cmd/rdmactl's deps test keeps a leaf)
// may be used by every layer.
package layout

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const mod = "github.com/rdmad/rdmad/"

// rules: the packages under each prefix must not depend on any package
// under the forbidden prefixes, except the allowed ones.
var rules = []struct {
	pkgs      string
	forbidden []string
	allowed   []string
}{
	{"policy/...", []string{"daemon", "verbs", "cmd", "client", "doctor"}, nil},
	// verbs/peer implements probe.Transport with probe/ud's values, and
	// verbs/bw speaks probe/wire's messages: both leaves, below the probe
	// manager, which verbs never imports.
	{"verbs/...", []string{"daemon", "policy", "cmd", "doctor", "probe"}, []string{"probe/ud", "probe/wire"}},
	// The probe control plane never imports the cgo binding: what it
	// needs of verbs state (a port's active MTU) the daemon injects.
	{"probe/...", []string{"daemon", "policy", "verbs", "cmd", "doctor", "inventory"}, nil},
	// Its leaves import nothing of the module but internal leaves.
	{"probe/ud", []string{"daemon", "policy", "verbs", "cmd", "client", "doctor", "inventory", "probe"}, []string{"probe/ud"}},
	{"probe/wire", []string{"daemon", "policy", "verbs", "cmd", "client", "doctor", "inventory", "probe"}, []string{"probe/wire"}},
	{"inventory/...", []string{"daemon", "policy", "verbs", "cmd", "doctor"}, nil},
	{"doctor/...", []string{"daemon", "policy", "verbs", "cmd"}, nil},
	{"client/...", []string{"daemon", "policy", "verbs", "cmd", "doctor", "inventory", "probe"}, nil},
	{"internal/...", []string{"daemon", "policy", "verbs", "cmd", "client", "doctor", "inventory", "probe"}, nil},
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
			if slices.Contains(r.allowed, rel) {
				continue
			}
			for _, f := range r.forbidden {
				if rel == f || strings.HasPrefix(rel, f+"/") {
					t.Errorf("%s depends on %s: the arrow points %s", r.pkgs, rel, "up or sideways; see docs/ARCHITECTURE.md")
				}
			}
		}
	}
}
