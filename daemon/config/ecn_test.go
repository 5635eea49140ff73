package config

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rdmad/rdmad/policy"
)

// TestLoadECN: [policy.ecn] np and rp reach the policy and its rule, sorted,
// with absent (unmanaged) apart from [] (all disabled).
func TestLoadECN(t *testing.T) {
	p := write(t, map[string]string{"rdmad.toml": `
[[policy]]
name = "fabric"
netdevs = ["ens1f*"]
[policy.ecn]
np = [4, 3]
rp = [3]

[[policy]]
name = "np-off"
netdevs = ["eth*"]
mode = "observe"
[policy.ecn]
np = []
`})
	cfg, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&ECN{NP: []int{4, 3}, RP: []int{3}}, cfg.Policies[0].ECN); diff != "" {
		t.Errorf("fabric's ecn (-want +got):\n%s", diff)
	}
	got := cfg.Rules()
	want := []*policy.ECNRule{{NP: []int{3, 4}, RP: []int{3}}, {NP: []int{}}}
	for i, w := range want {
		if diff := cmp.Diff(w, got[i].ECN); diff != "" {
			t.Errorf("rule %d ecn (-want +got):\n%s", i, diff)
		}
	}
	if got[1].ECN.NP == nil || got[1].ECN.RP != nil {
		t.Errorf("np = [] must stay empty and rp absent nil: %#v", got[1].ECN)
	}
	if !got[1].Observe {
		t.Error("observe mode lost")
	}
}

func TestLoadECNErrors(t *testing.T) {
	for _, tt := range []struct {
		name, body string
		want       []string
	}{
		{"values", "[[policy]]\nname = \"p\"\nnetdevs = [\"x\"]\n[policy.ecn]\nnp = [3, 8, 3]\nrp = [-1]\n", []string{
			`D/rdmad.toml:5: policy "p".ecn.np: priority 8 is out of range; list the priorities 0-7 on which the notification point is enabled, e.g. np = [3] (the RoCE priority)`,
			`D/rdmad.toml:5: policy "p".ecn.np: priority 3 is listed twice; list each priority once, e.g. np = [3]`,
			`D/rdmad.toml:6: policy "p".ecn.rp: priority -1 is out of range; list the priorities 0-7 on which the reaction point is enabled, e.g. rp = [3] (the RoCE priority)`,
		}},
		{"empty table", "[[policy]]\nname = \"p\"\nnetdevs = [\"x\"]\n[policy.ecn]\n", []string{
			`D/rdmad.toml:4: policy "p".ecn: [policy.ecn] sets neither np nor rp; list the priorities DCQCN is enabled on, e.g. np = [3] and rp = [3], or remove the table`,
		}},
		{"unknown key", "[[policy]]\nname = \"p\"\nnetdevs = [\"x\"]\n[policy.ecn]\nnp = [3]\ncnp_dscp = 48\n", []string{
			`D/rdmad.toml:6: policy "p".ecn.cnp_dscp: unknown key; see rdmad.toml(5) for the keys rdmad knows`,
		}},
		{"wrong type", "[[policy]]\nname = \"p\"\nnetdevs = [\"x\"]\n[policy.ecn]\nnp = 3\n", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := write(t, map[string]string{"rdmad.toml": tt.body})
			_, err := Load(p)
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("Load: %v (%T), want config.Errors", err, err)
			}
			var got []string
			for _, e := range errs {
				got = append(got, strings.ReplaceAll(e.Error(), filepath.Dir(p), "D"))
			}
			if tt.want == nil {
				// The decoder's own wording; file, line and key are ours.
				if len(got) != 1 || !strings.HasPrefix(got[0], "D/rdmad.toml:5: ") || !strings.Contains(got[0], "np") {
					t.Errorf("errors %q, want one at D/rdmad.toml:5 naming np", got)
				}
				return
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}
