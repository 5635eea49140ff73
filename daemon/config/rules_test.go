package config

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rdmad/rdmad/policy"
	"github.com/rdmad/rdmad/policy/qos"
)

// TestRules: every [[policy]] field reaches the rule the policy package
// resolves, and the mode decides Observe.
func TestRules(t *testing.T) {
	tos := 106
	c := Default()
	c.Policies = []Policy{
		{Name: "fabric", Netdevs: []string{"rdt*"}, Devices: []string{"mlx5_*"}, Mode: "enforce", MTU: 4200,
			QoS:  &QoS{Trust: "dscp", PFC: []int{3}, DSCPToPrio: map[int]int{26: 3}},
			RoCE: &RoCE{TOS: &tos, Mode: "v2"}},
		{Name: "watch", Netdevs: []string{"eth*"}, Mode: "observe", MTU: 9000},
	}
	want := []policy.Rule{
		{Name: "fabric", Netdevs: []string{"rdt*"}, Devices: []string{"mlx5_*"}, MTU: 4200,
			QoS:  &qos.Desired{Trust: "dscp", PFC: []int{3}, DSCPToPrio: map[int]int{26: 3}},
			RoCE: &policy.RoCERule{ToS: &tos, Mode: "v2"}},
		{Name: "watch", Netdevs: []string{"eth*"}, Observe: true, MTU: 9000},
	}
	if diff := cmp.Diff(want, c.Rules()); diff != "" {
		t.Errorf("Rules() (-want +got):\n%s", diff)
	}
}
