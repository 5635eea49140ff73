package main

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/client/apitype"
)

func inSync(object string) apitype.Target {
	return apitype.Target{Kind: "mtu", Object: object, Desired: "4200", Actual: "4200", State: apitype.InSync}
}

// TestPolicyDiffMatchesNothing: a policy whose globs select nothing on the
// node is named, not hidden behind "in sync"; the status's policy targets
// (a policy without any) say which.
func TestPolicyDiffMatchesNothing(t *testing.T) {
	fabric := apitype.PolicyStatus{Name: "fabric", Mode: "enforce", Targets: []apitype.Target{inSync("ens1f0")}}
	storage := apitype.PolicyStatus{Name: "storage", Mode: "enforce", Targets: []apitype.Target{}}
	gpu := apitype.PolicyStatus{Name: "gpu", Mode: "observe", Targets: []apitype.Target{}}
	change := apitype.Change{Policy: "fabric", Kind: "mtu", Object: "ens1f1", From: "1500", To: "4200", Action: "apply"}
	for _, tc := range []struct {
		name     string
		changes  []apitype.Change
		policies []apitype.PolicyStatus
		code     int
		want     []string
		not      []string
	}{
		{"one of two matches nothing", nil, []apitype.PolicyStatus{fabric, storage}, exitOK,
			[]string{"Nothing to change: every policy that matches something is in sync.", `Policy "storage" matches nothing on this node`, "ip link"},
			[]string{"Everything is in sync", `Policy "fabric"`}},
		{"none matches anything", nil, []apitype.PolicyStatus{storage, gpu}, exitOK,
			[]string{"no policy matches anything on this node", `Policy "storage" matches nothing`, `Policy "gpu" matches nothing`},
			[]string{"Everything is in sync"}},
		{"changes and one matches nothing", []apitype.Change{change}, []apitype.PolicyStatus{fabric, storage}, exitDegraded,
			[]string{"POLICY", "ens1f1", `Policy "storage" matches nothing`},
			[]string{"in sync"}},
		{"all match, in sync", nil, []apitype.PolicyStatus{fabric}, exitOK,
			[]string{"Everything is in sync with the policies.\n"},
			[]string{"matches nothing"}},
		{"no policy at all", nil, nil, exitOK,
			[]string{"No policy is declared"},
			[]string{"Everything is in sync", "POLICY"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock := fakeRdmad(t, map[string]http.HandlerFunc{
				"GET /v1/policy/diff": answer(t, diffResult(tc.changes, tc.policies)),
			})
			code, out, errs := rdmactl(t, "--socket", sock, "policy", "diff")
			if code != tc.code || errs != "" {
				t.Errorf("exit %d, stderr %q; want %d and nothing", code, errs, tc.code)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("policy diff lacks %q:\n%s", w, out)
				}
			}
			for _, w := range tc.not {
				if strings.Contains(out, w) {
					t.Errorf("policy diff says %q:\n%s", w, out)
				}
			}
		})
	}
}

// diffResult is rdmad's answer to GET /v1/policy/diff with the changes cs
// and the policies ps in force.
func diffResult(cs []apitype.Change, ps []apitype.PolicyStatus) apitype.DiffResult {
	r := apitype.DiffResult{Changes: cs}
	if cs == nil {
		r.Changes = []apitype.Change{} // as rdmad sends it
	}
	r.Policies, r.Unmatched = apitype.DiffPolicies(ps)
	return r
}

// TestPolicyDiffJSON: --json carries the policies that match nothing, as
// rdmad names them.
func TestPolicyDiffJSON(t *testing.T) {
	fabric := apitype.PolicyStatus{Name: "fabric", Mode: "enforce", Targets: []apitype.Target{inSync("ens1f0")}}
	storage := apitype.PolicyStatus{Name: "storage", Mode: "enforce", Targets: []apitype.Target{}}
	memlock := apitype.PolicyStatus{Name: "memlock", Mode: "enforce", Targets: []apitype.Target{{Kind: "memlock", Object: "rdmad", State: apitype.InSync}}}
	sock := fakeRdmad(t, map[string]http.HandlerFunc{
		"GET /v1/policy/diff": answer(t, diffResult(nil, []apitype.PolicyStatus{fabric, storage, memlock})),
	})
	code, out, errs := rdmactl(t, "--socket", sock, "--json", "policy", "diff")
	if code != exitOK || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	var got apitype.DiffResult
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !slices.Equal(got.Policies, []string{"fabric", "storage"}) || !slices.Equal(got.Unmatched, []string{"storage"}) || got.Changes == nil {
		t.Errorf("policy diff --json = %+v; want policies [fabric storage], unmatched [storage], changes []", got)
	}
}

// TestPolicyApplyNothingToDo: without policies, apply says so and prints no
// empty table; without changes, it says so and shows the targets.
func TestPolicyApplyNothingToDo(t *testing.T) {
	for _, tc := range []struct {
		name     string
		policies []apitype.PolicyStatus
		want     []string
		not      []string
	}{
		{"no policy", []apitype.PolicyStatus{}, []string{"No policy is declared: there is nothing to apply."}, []string{"POLICY", "KIND"}},
		{"in sync", []apitype.PolicyStatus{{Name: "fabric", Mode: "enforce", Targets: []apitype.Target{inSync("ens1f0")}}},
			[]string{"Nothing to apply: the pass found no difference.", "POLICY", "fabric  enforce  mtu   ens1f0  4200     4200    in-sync"},
			[]string{"FROM", "ACTION"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock := fakeRdmad(t, map[string]http.HandlerFunc{
				"POST /v1/policy/apply": answer(t, apitype.ApplyResult{Changes: []apitype.Change{}, Policy: apitype.PolicyState{Policies: tc.policies}}),
			})
			code, out, errs := rdmactl(t, "--socket", sock, "policy", "apply")
			if code != exitOK || errs != "" {
				t.Errorf("exit %d, stderr %q; want 0 and nothing", code, errs)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("policy apply lacks %q:\n%s", w, out)
				}
			}
			for _, w := range tc.not {
				if strings.Contains(out, w) {
					t.Errorf("policy apply prints %q:\n%s", w, out)
				}
			}
		})
	}
}
