package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
)

// netns is a private network namespace made for one test.
type netns struct {
	t    *testing.T
	name string
}

func newNetns(t testing.TB) *netns {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root (CI runs as root)")
	}
	name := fmt.Sprintf("rdmadt%d", time.Now().UnixNano()%1e9)
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	return &netns{name: name}
}

func (n *netns) ip(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"-n", n.name}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip -n %s %s: %v %s", n.name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func (n *netns) mtu(t testing.TB, ifname string) int {
	t.Helper()
	b, err := exec.Command("ip", "netns", "exec", n.name, "cat", "/sys/class/net/"+ifname+"/mtu").Output()
	if err != nil {
		t.Fatalf("read MTU of %s: %v", ifname, err)
	}
	v, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return v
}

// startIn runs rdmad inside the namespace.
func startIn(t testing.TB, ns *netns, config string) *node {
	t.Helper()
	return launch(t, []string{"ip", "netns", "exec", ns.name}, config)
}

type policyStatus struct {
	Policy struct {
		Policies []struct {
			Name    string `json:"name"`
			Mode    string `json:"mode"`
			Targets []struct {
				Kind    string `json:"kind"`
				Object  string `json:"object"`
				Desired string `json:"desired"`
				Actual  string `json:"actual"`
				State   string `json:"state"`
				Error   string `json:"error"`
				Applies int    `json:"applies"`
				Drifts  int    `json:"drifts"`
			} `json:"targets"`
		} `json:"policies"`
	} `json:"policy"`
}

func (n *node) policy(t *testing.T) policyStatus {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, "rdmactl"), "--socket", n.socket, "--json", "status")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, _ := cmd.Output()
	var s policyStatus
	if err := json.Unmarshal(out, &s); err != nil {
		t.Fatalf("status --json: %v\n%s%s", err, out, stderr.String())
	}
	return s
}

// TestPolicyMTUContract is the contract of the policy issue: rdmad inside a
// network namespace keeps MTU 4200 on the veths its policy matches.
func TestPolicyMTUContract(t *testing.T) {
	ns := newNetns(t)
	ns.ip(t, "link", "add", "rdt0", "type", "veth", "peer", "name", "other0")
	ns.ip(t, "link", "add", "rdt1", "type", "veth", "peer", "name", "other1")
	n := startIn(t, ns, `
[[policy]]
name = "fabric"
netdevs = ["rdt*"]
mtu = 4200
`)
	eventually(t, "MTU 4200 on rdt0 and rdt1", func() bool { return ns.mtu(t, "rdt0") == 4200 && ns.mtu(t, "rdt1") == 4200 })
	if m := ns.mtu(t, "other0"); m != 1500 {
		t.Errorf("non-matching other0 has MTU %d, want it left at 1500", m)
	}

	// An outside change is reverted.
	ns.ip(t, "link", "set", "rdt0", "mtu", "1500")
	eventually(t, "rdt0 reverted to 4200", func() bool { return ns.mtu(t, "rdt0") == 4200 })

	// A matching netdev created later gets the policy.
	ns.ip(t, "link", "add", "rdt7", "type", "veth", "peer", "name", "other7")
	eventually(t, "rdt7 set to 4200", func() bool { return ns.mtu(t, "rdt7") == 4200 })
	if m := ns.mtu(t, "other7"); m != 1500 {
		t.Errorf("other7 has MTU %d, want 1500", m)
	}

	var s policyStatus
	eventually(t, "status to list the targets in sync", func() bool {
		s = n.policy(t)
		if len(s.Policy.Policies) != 1 || len(s.Policy.Policies[0].Targets) != 3 {
			return false
		}
		for _, tg := range s.Policy.Policies[0].Targets {
			if tg.State != "in-sync" {
				return false
			}
		}
		return true
	})
	p := s.Policy.Policies[0]
	var objs []string
	for _, tg := range p.Targets {
		objs = append(objs, tg.Object)
		if tg.Kind != "mtu" || tg.Desired != "4200" || tg.Actual != "4200" {
			t.Errorf("target %+v", tg)
		}
		if tg.Object == "rdt0" && (tg.Applies < 2 || tg.Drifts < 2) {
			t.Errorf("rdt0 was applied twice (start, revert); counters %+v", tg)
		}
	}
	sort.Strings(objs)
	if p.Name != "fabric" || p.Mode != "enforce" || strings.Join(objs, ",") != "rdt0,rdt1,rdt7" {
		t.Errorf("policy %s/%s targets %v", p.Name, p.Mode, objs)
	}

	// A deleted netdev leaves the status.
	ns.ip(t, "link", "del", "rdt7")
	eventually(t, "rdt7 to leave the status", func() bool {
		s = n.policy(t)
		return len(s.Policy.Policies[0].Targets) == 2
	})

	// rdmactl policy diff is empty when in sync.
	out, _, code := n.ctl("policy", "diff")
	if code != 0 || !strings.Contains(out, "in sync with the policies") {
		t.Errorf("policy diff in sync (exit %d): %s", code, out)
	}
}

func TestPolicyObserveAndDiff(t *testing.T) {
	ns := newNetns(t)
	ns.ip(t, "link", "add", "rdt0", "type", "veth", "peer", "name", "other0")
	n := startIn(t, ns, `
[[policy]]
name = "watch"
netdevs = ["rdt0"]
mode = "observe"
mtu = 9000

[[policy]]
name = "dcb"
netdevs = ["rdt0"]
[policy.qos]
pfc = [3]
`)
	var s policyStatus
	eventually(t, "drift and unsupported to be reported", func() bool {
		s = n.policy(t)
		return len(s.Policy.Policies) == 2 && len(s.Policy.Policies[0].Targets) == 1 && len(s.Policy.Policies[1].Targets) == 1
	})
	mtu, q := s.Policy.Policies[0].Targets[0], s.Policy.Policies[1].Targets[0]
	if mtu.State != "drifted" || mtu.Actual != "1500" || mtu.Desired != "9000" {
		t.Errorf("observe-mode MTU target %+v, want drifted 1500 -> 9000", mtu)
	}
	if m := ns.mtu(t, "rdt0"); m != 1500 {
		t.Errorf("observe mode changed the MTU to %d", m)
	}
	if q.Kind != "qos" || q.State != "unsupported" || !strings.Contains(q.Error, "no DCB") {
		t.Errorf("QoS on veth: %+v, want unsupported", q)
	}

	out, _, code := n.ctl("policy", "diff")
	if code != 3 || !strings.Contains(out, "watch") || !strings.Contains(out, "1500") || !strings.Contains(out, "9000") || !strings.Contains(out, "report") {
		t.Errorf("policy diff (exit %d):\n%s", code, out)
	}
	out, _, code = n.ctl("--json", "policy", "apply")
	if code != 3 || !strings.Contains(out, `"drifted"`) {
		t.Errorf("policy apply with drift (exit %d): %s", code, out)
	}
	// Many link events on the unsupported device do not make rdmad ask
	// dcbnl again and again: the target stays the same and quiet.
	for i := 0; i < 20; i++ {
		ns.ip(t, "link", "set", "rdt0", "mtu", strconv.Itoa(1400+i))
	}
	time.Sleep(300 * time.Millisecond)
	s = n.policy(t)
	if got := s.Policy.Policies[1].Targets[0]; got.State != "unsupported" {
		t.Errorf("after link events QoS is %+v", got)
	}
	if got := s.Policy.Policies[0].Targets[0]; got.Actual != "1419" || got.State != "drifted" {
		t.Errorf("observe MTU after flips: %+v, want actual 1419", got)
	}
}

// TestPolicyOverridden is issue #27 item 3: an MTU that a later policy
// (later in the file, as a drop-in's is) sets on the same netdev is reported, in status
// (policy.overridden), `rdmactl status`, `policy diff` and the log, not
// dropped silently; the later one's value applies.
func TestPolicyOverridden(t *testing.T) {
	ns := newNetns(t)
	ns.ip(t, "link", "add", "rdt0", "type", "veth", "peer", "name", "other0")
	ns.ip(t, "link", "add", "rdt1", "type", "veth", "peer", "name", "other1")
	n := startIn(t, ns, "[[policy]]\nname = \"fabric\"\nnetdevs = [\"rdt*\"]\nmtu = 4200\n\n[[policy]]\nname = \"rack7\"\nnetdevs = [\"rdt1\"]\nmtu = 2000\n")
	eventually(t, "MTU 4200 on rdt0 and 2000 on rdt1", func() bool { return ns.mtu(t, "rdt0") == 4200 && ns.mtu(t, "rdt1") == 2000 })
	var s struct {
		Policy struct {
			Overridden []apitype.Override `json:"overridden"`
		} `json:"policy"`
	}
	out, _, _ := n.ctl("--json", "status")
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatal(err)
	}
	want := apitype.Override{Policy: "fabric", Kind: "mtu", Object: "rdt1", By: "rack7"}
	if len(s.Policy.Overridden) != 1 || s.Policy.Overridden[0] != want {
		t.Errorf("policy.overridden = %+v, want [%+v]", s.Policy.Overridden, want)
	}
	const line = `Policy "fabric"'s mtu of rdt1 is overridden by the later policy "rack7"`
	if out, _, _ := n.ctl("status"); !strings.Contains(out, line) {
		t.Errorf("rdmactl status does not say %q:\n%s", line, out)
	}
	if out, _, _ := n.ctl("policy", "diff"); !strings.Contains(out, line) {
		t.Errorf("rdmactl policy diff does not say %q:\n%s", line, out)
	}
	var diff apitype.DiffResult
	out, _, _ = n.ctl("--json", "policy", "diff")
	if err := json.Unmarshal([]byte(out), &diff); err != nil || len(diff.Overridden) != 1 || diff.Overridden[0] != want {
		t.Errorf("policy diff --json: %v\n%s", err, out)
	}
	if !strings.Contains(n.log.String(), "policy setting overridden by a later policy") {
		t.Errorf("the log does not report the override:\n%s", n.log)
	}
}
