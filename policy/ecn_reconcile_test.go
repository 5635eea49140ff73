package policy

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/policy/ecn"
)

// ecnTree is a sysfs root whose netdev lo (which every host has, so that
// the reconciler's own netdev list finds it) has mlx5's ecn files, np and
// rp enabled on the given priorities.
func ecnTree(t *testing.T, np, rp []int) string {
	t.Helper()
	root := t.TempDir()
	for _, pt := range []struct {
		name string
		on   []int
	}{{ecn.NP, np}, {ecn.RP, rp}} {
		dir := filepath.Join(root, "sys", "class", "net", "lo", "ecn", pt.name, "enable")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for p := 0; p < ecn.Priorities; p++ {
			v := "0\n"
			if slices.Contains(pt.on, p) {
				v = "1\n"
			}
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprint(p)), []byte(v), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return root
}

func ecnReconciler(root string) *Reconciler {
	return &Reconciler{log: slog.New(slog.NewTextHandler(io.Discard, nil)), now: time.Now,
		targets: map[string]entry{}, unsupported: map[string]int{}, ecn: ecn.New(ecn.Options{Root: root})}
}

func ecnTarget(t *testing.T, ps []apitype.PolicyStatus) apitype.Target {
	t.Helper()
	for _, p := range ps {
		for _, tg := range p.Targets {
			if tg.Kind == "ecn" && tg.Object == "lo" {
				return tg
			}
		}
	}
	t.Fatalf("no ecn target for lo in %+v", ps)
	return apitype.Target{}
}

func observeLo(t *testing.T, root string) ecn.State {
	t.Helper()
	s, err := ecn.New(ecn.Options{Root: root}).Observe("lo")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestECNEnforce(t *testing.T) {
	root := ecnTree(t, []int{3, 4}, nil)
	r := ecnReconciler(root)
	decl := Declared{Rules: []Rule{{Name: "fabric", Netdevs: []string{"lo"}, ECN: &ECNRule{NP: []int{3}, RP: []int{3}}}}}

	// The diff says what would change and changes nothing.
	cs, _ := r.Pass(decl, nil, nil, false)
	if len(cs) != 1 || cs[0].Kind != "ecn" || cs[0].Object != "lo" || cs[0].From != "np=3,4 rp=none" || cs[0].To != "np=3 rp=3" || cs[0].Action != "apply" {
		t.Fatalf("diff: %+v", cs)
	}
	if s := observeLo(t, root); !slices.Equal(s.NP, []int{3, 4}) || len(s.RP) != 0 {
		t.Fatalf("a diff wrote the files: %+v", s)
	}

	_, ps := r.Pass(decl, nil, nil, true)
	tg := ecnTarget(t, ps)
	if tg.State != apitype.Applied || tg.Desired != "np=3 rp=3" || tg.Actual != "np=3 rp=3" || tg.Applies != 1 || tg.Drifts != 1 {
		t.Errorf("enforce pass: %+v", tg)
	}
	if s := observeLo(t, root); !slices.Equal(s.NP, []int{3}) || !slices.Equal(s.RP, []int{3}) {
		t.Errorf("after the pass: %+v, want np [3] rp [3]", s)
	}

	// Reapplied when the driver forgets (a reset writes the defaults back).
	os.WriteFile(filepath.Join(root, "sys/class/net/lo/ecn/roce_rp/enable/3"), []byte("0\n"), 0o644)
	_, ps = r.Pass(decl, nil, &Scope{Netdevs: map[string]bool{"lo": true}}, true)
	if tg := ecnTarget(t, ps); tg.State != apitype.Applied || tg.Applies != 2 {
		t.Errorf("after drift: %+v", tg)
	}
	_, ps = r.Pass(decl, nil, nil, true)
	if tg := ecnTarget(t, ps); tg.State != apitype.InSync || tg.Applies != 2 {
		t.Errorf("in sync: %+v", tg)
	}

	// Only np managed: rp is neither shown nor touched.
	decl.Rules[0].ECN = &ECNRule{NP: []int{}}
	_, ps = r.Pass(decl, nil, nil, true)
	if tg := ecnTarget(t, ps); tg.Desired != "np=none" || tg.State != apitype.Applied {
		t.Errorf("np = []: %+v", tg)
	}
	if s := observeLo(t, root); len(s.NP) != 0 || !slices.Equal(s.RP, []int{3}) {
		t.Errorf("np = [] with rp unmanaged: %+v", s)
	}

	// The policy goes: so does its target.
	decl.Rules[0].ECN = nil
	decl.Rules[0].MTU = 0
	_, ps = r.Pass(decl, nil, nil, true)
	for _, p := range ps {
		for _, tg := range p.Targets {
			if tg.Kind == "ecn" {
				t.Errorf("ecn target left after the policy dropped it: %+v", tg)
			}
		}
	}
}

func TestECNObserve(t *testing.T) {
	root := ecnTree(t, nil, []int{3})
	r := ecnReconciler(root)
	decl := Declared{Rules: []Rule{{Name: "watch", Netdevs: []string{"lo"}, Observe: true, ECN: &ECNRule{NP: []int{3}, RP: []int{3}}}}}
	cs, ps := r.Pass(decl, nil, nil, true)
	tg := ecnTarget(t, ps)
	if tg.State != apitype.Drifted || tg.Actual != "np=none rp=3" || tg.Desired != "np=3 rp=3" || tg.Applies != 0 || tg.Drifts != 1 {
		t.Errorf("observe pass: %+v", tg)
	}
	if len(cs) != 1 || cs[0].Action != "report" {
		t.Errorf("observe changes: %+v", cs)
	}
	if s := observeLo(t, root); len(s.NP) != 0 {
		t.Errorf("observe mode wrote np: %+v", s)
	}
}

func TestECNUnsupported(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "sys", "class", "net", "lo"), 0o755)
	r := ecnReconciler(root)
	decl := Declared{Rules: []Rule{{Name: "fabric", Netdevs: []string{"lo"}, ECN: &ECNRule{NP: []int{3}}}}}
	for i := 0; i < 2; i++ {
		cs, ps := r.Pass(decl, nil, nil, true)
		tg := ecnTarget(t, ps)
		if tg.State != apitype.Unsupported || tg.Actual != "no ecn sysfs" || !strings.Contains(tg.Error, "lo") || len(cs) != 0 {
			t.Errorf("pass %d without ecn sysfs: %+v, changes %+v", i, tg, cs)
		}
	}
}

// TestResolveECN: [policy.ecn] selects netdevs like the other netdev
// settings (also through a device's port), and the later policy wins.
func TestResolveECN(t *testing.T) {
	rules := []Rule{
		{Name: "a", Netdevs: []string{"ens*"}, ECN: &ECNRule{NP: []int{3}, RP: []int{3}}},
		{Name: "b", Devices: []string{"mlx5_1"}, ECN: &ECNRule{NP: []int{}}},
		{Name: "c", Netdevs: []string{"ens1f0"}, MTU: 9000},
	}
	d := Resolve(rules, []string{"ens1f0", "ens1f1", "eth0"}, []Port{{Device: "mlx5_1", Port: 1, Netdev: "ens1f1"}})
	if w := d.Netdevs["ens1f0"]; w.ECN == nil || !slices.Equal(w.ECN.NP, []int{3}) || w.ECNSrc.Policy != "a" || w.MTU != 9000 {
		t.Errorf("ens1f0: %+v", w)
	}
	if w := d.Netdevs["ens1f1"]; w.ECN == nil || w.ECN.NP == nil || len(w.ECN.NP) != 0 || w.ECN.RP != nil || w.ECNSrc.Policy != "b" {
		t.Errorf("ens1f1: %+v, want policy b's np = [] (later wins)", w)
	}
	if _, ok := d.Netdevs["eth0"]; ok {
		t.Error("eth0 selected")
	}
	if !slices.Equal(d.Matches["b"], []string{"ens1f1"}) {
		t.Errorf("matches of b: %v", d.Matches["b"])
	}
}
