package policy

import (
	"testing"

	"github.com/rdmad/rdmad/client/apitype"
)

// TestDriftsCountEvents: rdmad_policy_target_drifts_total counts drift
// events: an observed target that stays drifted pass after pass is one
// drift; it drifts again once it was in sync; every correction applied is
// one (#27 item 5).
func TestDriftsCountEvents(t *testing.T) {
	root := ecnTree(t, nil, []int{3})
	r := ecnReconciler(root)
	observe := Declared{Rules: []Rule{{Name: "watch", Netdevs: []string{"lo"}, Observe: true, ECN: &ECNRule{NP: []int{3}, RP: []int{3}}}}}
	for range 3 {
		r.Pass(observe, nil, nil, true)
	}
	_, ps := r.Pass(observe, nil, nil, true)
	if tg := ecnTarget(t, ps); tg.State != apitype.Drifted || tg.Drifts != 1 {
		t.Fatalf("four observe passes of a target that stays drifted: %+v; want drifted, 1 drift", tg)
	}
	// Enforce: the correction is a drift event of its own, and the
	// passes in sync after it count nothing.
	enforce := Declared{Rules: []Rule{{Name: "watch", Netdevs: []string{"lo"}, ECN: &ECNRule{NP: []int{3}, RP: []int{3}}}}}
	r.Pass(enforce, nil, nil, true)
	_, ps = r.Pass(enforce, nil, nil, true)
	if tg := ecnTarget(t, ps); tg.State != apitype.InSync || tg.Drifts != 2 || tg.Applies != 1 {
		t.Fatalf("after the correction and a pass in sync: %+v; want in-sync, 2 drifts, 1 apply", tg)
	}
	// The setting goes back behind rdmad's back (a fresh tree with np
	// off, the same targets): observed, a new drift.
	root2 := ecnTree(t, nil, []int{3})
	r3 := ecnReconciler(root2)
	r3.targets = r.targets
	r3.Pass(observe, nil, nil, true)
	_, ps = r3.Pass(observe, nil, nil, true)
	if tg := ecnTarget(t, ps); tg.State != apitype.Drifted || tg.Drifts != 3 {
		t.Errorf("drifted again after being in sync, over two passes: %+v; want drifted, 3 drifts", tg)
	}
}
