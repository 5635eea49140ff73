//go:build e2e

package e2e

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"
)

// RDMA netlink policies on Soft-RoCE (issue #28 item 1): [policy.rdma]
// adaptive_moderation turns CQ DIM on for rxe0, as `rdma dev show` reports
// it, and comes back after the device is deleted and added again.

// rdmaTarget returns the state of the rdma target of policy on object.
func rdmaTarget(t *testing.T, policy, object string) string {
	t.Helper()
	out, _ := run("rdmactl", "--json", "status") // exit 3 while degraded
	var s struct {
		Policy struct {
			Policies []struct {
				Name    string `json:"name"`
				Targets []struct {
					Kind, Object, State, Error string
				} `json:"targets"`
			} `json:"policies"`
		} `json:"policy"`
	}
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("rdmactl --json status: %v", err)
	}
	for _, p := range s.Policy.Policies {
		for _, tg := range p.Targets {
			if p.Name == policy && tg.Kind == "rdma" && tg.Object == object {
				return tg.State + " " + tg.Error
			}
		}
	}
	return "absent"
}

func TestRDMAAdaptiveModeration(t *testing.T) {
	peersOther(t)
	healthDiag(t)
	waitActive(t)
	// Last of the cleanups: later tests need rxe0 back and its peer up.
	t.Cleanup(func() { waitHealthy(t, 120*time.Second) })
	// rdma(8) prints the setting with its details (-d).
	var lastShow string
	dimOn := func() bool {
		out, err := run("rdma", "-d", "dev", "show", "rxe0")
		lastShow = strings.TrimSpace(out)
		return err == nil && strings.Contains(out, "adaptive-moderation on")
	}
	mustRun(t, "rdma", "dev", "set", "rxe0", "adaptive-moderation", "off")
	const dropin = "/etc/rdmad/rdmad.d/60-e2e-rdma.toml"
	if err := os.WriteFile(dropin, []byte("[[policy]]\nname = \"e2e-rdma\"\ndevices = [\"rxe0\"]\n[policy.rdma]\nadaptive_moderation = true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.Remove(dropin)
		run("rdmactl", "reload")
		run("rdma", "dev", "set", "rxe0", "adaptive-moderation", "off")
	})
	mustRun(t, "rdmactl", "reload")
	waitFor(t, 30*time.Second, "adaptive moderation on for rxe0", func() (bool, string) {
		st := rdmaTarget(t, "e2e-rdma", "rxe0")
		return dimOn() && (strings.HasPrefix(st, "in-sync") || strings.HasPrefix(st, "applied")), st + "; rdma -d dev show: " + lastShow
	})
	// Gone with the device, back with it: rdmad reapplies it.
	mustRun(t, "rdma", "link", "del", "rxe0")
	t.Cleanup(func() {
		if _, err := run("rdma", "dev", "show", "rxe0"); err != nil {
			run("rdma", "link", "add", "rxe0", "type", "rxe", "netdev", "eth0")
		}
	})
	mustRun(t, "rdma", "link", "add", "rxe0", "type", "rxe", "netdev", "eth0")
	waitFor(t, 30*time.Second, "adaptive moderation on again after rdma link add", func() (bool, string) {
		return dimOn(), rdmaTarget(t, "e2e-rdma", "rxe0") + "; rdma -d dev show: " + lastShow
	})
}
