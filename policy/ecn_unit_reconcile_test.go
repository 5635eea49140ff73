package policy

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/policy/ecn"
)

// A fakeECNUnit stands in for rdmad-ecn@.service: it writes the files of
// its tree (unless fail or noop says otherwise) and records each start.
type fakeECNUnit struct {
	root  string
	calls []string
	fail  error
	noop  bool // "succeeds" without writing
}

func (u *fakeECNUnit) start(nd string, w ecn.Want) error {
	u.calls = append(u.calls, nd+" "+string(ecn.FormatWant(w)))
	if u.fail != nil {
		return u.fail
	}
	if u.noop {
		return nil
	}
	_, err := ecn.New(ecn.Options{Root: u.root}).Apply(nd, w)
	return err
}

// readOnlyECN makes r's own ecn writes fail as under rdmad.service (EROFS,
// wrapped as ecn.Apply wraps it) and gives it u as its unit.
func readOnlyECN(r *Reconciler, u *fakeECNUnit) {
	r.ecnApply = func(nd string, _ ecn.Want) ([]string, error) {
		return nil, fmt.Errorf("ecn: %s: write 1 to /sys/class/net/%s/ecn/roce_np/enable/3: %w", nd, nd, unix.EROFS)
	}
	r.ecnUnit = u.start
	r.ecnUnitFailed = map[string]ecnUnitAttempt{}
}

// TestECNThroughUnit: where rdmad's write fails with EROFS the unit writes,
// the files are read back, and the target is applied.
func TestECNThroughUnit(t *testing.T) {
	root := ecnTree(t, []int{}, []int{})
	r := ecnReconciler(root)
	u := &fakeECNUnit{root: root}
	readOnlyECN(r, u)
	decl := Declared{Rules: []Rule{{Name: "fabric", Netdevs: []string{"lo"}, ECN: &ECNRule{NP: []int{3}, RP: []int{3}}}}}

	// A diff never starts the unit.
	if cs, _ := r.Pass(decl, nil, nil, false); len(cs) != 1 || len(u.calls) != 0 {
		t.Fatalf("diff: changes %+v, unit calls %q", cs, u.calls)
	}
	_, ps := r.Pass(decl, nil, nil, true)
	if tg := ecnTarget(t, ps); tg.State != apitype.Applied || tg.Actual != "np=3 rp=3" || tg.Error != "" {
		t.Errorf("through the unit: %+v", tg)
	}
	if want := []string{"lo np=3\nrp=3\n"}; !slices.Equal(u.calls, want) {
		t.Errorf("unit calls %q, want %q", u.calls, want)
	}
	if s := observeLo(t, root); !slices.Equal(s.NP, []int{3}) || !slices.Equal(s.RP, []int{3}) {
		t.Errorf("files after the unit: %+v", s)
	}
	// In sync: no further start.
	_, ps = r.Pass(decl, nil, nil, true)
	if tg := ecnTarget(t, ps); tg.State != apitype.InSync || len(u.calls) != 1 {
		t.Errorf("next pass: %+v, unit calls %q", tg, u.calls)
	}
}

// TestECNUnitFailsOncePerChange: a unit that fails is started once per
// change, not at every pass; its error names the unit; a change of the
// policy (or a reload) tries again.
func TestECNUnitFailsOncePerChange(t *testing.T) {
	root := ecnTree(t, []int{}, []int{})
	r := ecnReconciler(root)
	u := &fakeECNUnit{root: root, fail: errors.New("rdmad-ecn@lo.service: job result \"failed\" (see journalctl -u rdmad-ecn@lo.service)")}
	readOnlyECN(r, u)
	decl := Declared{Rules: []Rule{{Name: "fabric", Netdevs: []string{"lo"}, ECN: &ECNRule{NP: []int{3}}}}}
	for i := 0; i < 5; i++ {
		_, ps := r.Pass(decl, nil, nil, true)
		tg := ecnTarget(t, ps)
		if tg.State != apitype.TargetError || !strings.Contains(tg.Error, "rdmad-ecn@lo.service") || !strings.Contains(tg.Error, "journalctl -u rdmad-ecn@lo.service") {
			t.Errorf("pass %d: %+v, want an error naming the unit", i, tg)
		}
	}
	if len(u.calls) != 1 {
		t.Errorf("unit started %d times in 5 passes, want once: %q", len(u.calls), u.calls)
	}
	// What is wanted changes: one more start.
	decl.Rules[0].ECN = &ECNRule{NP: []int{4}}
	r.Pass(decl, nil, nil, true)
	r.Pass(decl, nil, nil, true)
	if len(u.calls) != 2 {
		t.Errorf("after the policy changed: %d starts, want 2", len(u.calls))
	}
	// A reload forgets; the unit works now.
	u.fail = nil
	r.Forget()
	_, ps := r.Pass(decl, nil, nil, true)
	if tg := ecnTarget(t, ps); tg.State != apitype.Applied || len(u.calls) != 3 {
		t.Errorf("after Forget: %+v, %d starts", tg, len(u.calls))
	}
}

// TestECNUnitVerifies: a unit that exits 0 without the files changing is
// reported as an error (read back), not as applied.
func TestECNUnitVerifies(t *testing.T) {
	root := ecnTree(t, []int{}, []int{})
	r := ecnReconciler(root)
	u := &fakeECNUnit{root: root, noop: true}
	readOnlyECN(r, u)
	decl := Declared{Rules: []Rule{{Name: "fabric", Netdevs: []string{"lo"}, ECN: &ECNRule{RP: []int{1, 2}}}}}
	_, ps := r.Pass(decl, nil, nil, true)
	tg := ecnTarget(t, ps)
	if tg.State != apitype.TargetError || !strings.Contains(tg.Error, "files read rp=none, not rp=1,2") {
		t.Errorf("unit that wrote nothing: %+v", tg)
	}
	r.Pass(decl, nil, nil, true)
	if len(u.calls) != 1 {
		t.Errorf("%d starts, want 1", len(u.calls))
	}
}

// TestECNNoFallbackWithoutEROFS: outside the sandbox (no EROFS) the unit is
// never used, and with no unit configured an EROFS stays an error with a
// hint.
func TestECNNoFallbackWithoutEROFS(t *testing.T) {
	root := ecnTree(t, []int{}, []int{})
	r := ecnReconciler(root)
	u := &fakeECNUnit{root: root}
	r.ecnUnit = u.start
	decl := Declared{Rules: []Rule{{Name: "fabric", Netdevs: []string{"lo"}, ECN: &ECNRule{NP: []int{3}}}}}
	_, ps := r.Pass(decl, nil, nil, true)
	if tg := ecnTarget(t, ps); tg.State != apitype.Applied || len(u.calls) != 0 {
		t.Errorf("writable sysfs: %+v, unit calls %q (want none)", tg, u.calls)
	}

	r2 := ecnReconciler(ecnTree(t, []int{}, []int{}))
	readOnlyECN(r2, u)
	r2.ecnUnit = nil
	_, ps = r2.Pass(decl, nil, nil, true)
	if tg := ecnTarget(t, ps); tg.State != apitype.TargetError || !strings.Contains(tg.Error, "read-only file system") {
		t.Errorf("EROFS without a unit: %+v", tg)
	}
	// Another error than EROFS does not start the unit.
	r3 := ecnReconciler(ecnTree(t, []int{}, []int{}))
	r3.ecnApply = func(string, ecn.Want) ([]string, error) { return nil, fmt.Errorf("x: %w", unix.EINVAL) }
	u3 := &fakeECNUnit{}
	r3.ecnUnit = u3.start
	r3.Pass(decl, nil, nil, true)
	if len(u3.calls) != 0 {
		t.Errorf("EINVAL started the unit: %q", u3.calls)
	}
}

// TestECNUnitNotStartedRetries: a start that created no job (no system bus
// yet, at boot) is tried again at the next pass, not held until a change.
func TestECNUnitNotStartedRetries(t *testing.T) {
	root := ecnTree(t, []int{}, []int{})
	r := ecnReconciler(root)
	u := &fakeECNUnit{root: root, fail: fmt.Errorf("%w: start rdmad-ecn@lo.service: connect to the system bus: no such file", ecn.ErrNotStarted)}
	readOnlyECN(r, u)
	decl := Declared{Rules: []Rule{{Name: "fabric", Netdevs: []string{"lo"}, ECN: &ECNRule{NP: []int{3}}}}}
	for i := 0; i < 3; i++ {
		_, ps := r.Pass(decl, nil, nil, true)
		if tg := ecnTarget(t, ps); tg.State != apitype.TargetError || !strings.Contains(tg.Error, "system bus") {
			t.Errorf("pass %d without a bus: %+v", i, tg)
		}
	}
	if len(u.calls) != 3 {
		t.Errorf("%d starts in 3 passes without a bus, want 3", len(u.calls))
	}
	// The bus is up: the next pass applies.
	u.fail = nil
	_, ps := r.Pass(decl, nil, nil, true)
	if tg := ecnTarget(t, ps); tg.State != apitype.Applied {
		t.Errorf("with the bus: %+v", tg)
	}
}
