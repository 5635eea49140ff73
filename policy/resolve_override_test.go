package policy

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/policy/qos"
)

// TestResolveOverridden: a setting that a later policy sets on the same
// object is recorded (which policy, which kind and object, overridden by
// which), not dropped silently; a policy selecting an object twice does
// not override itself, and settings the later policy leaves alone stay
// the earlier one's.
func TestResolveOverridden(t *testing.T) {
	tos := 106
	rules := []Rule{
		{Name: "fabric", Netdevs: []string{"ens1f*"}, Devices: []string{"mlx5_0"}, MTU: 9000, QoS: &qos.Desired{Trust: "dscp"}, RoCE: &RoCERule{ToS: &tos}},
		{Name: "rack7", Netdevs: []string{"ens1f1"}, MTU: 4200, RoCE: &RoCERule{Mode: "v2"}},
	}
	ports := []Port{{Device: "mlx5_0", Port: 1, Netdev: "ens1f0"}, {Device: "mlx5_1", Port: 1, Netdev: "ens1f1"}}
	d := Resolve(rules, []string{"ens1f0", "ens1f1"}, ports)
	// rack7's [policy.roce] takes mlx5_1/1 (its netdev ens1f1) from
	// fabric, which selects ens1f* too; mlx5_0/1 stays fabric's.
	want := []apitype.Override{
		{Policy: "fabric", Kind: "mtu", Object: "ens1f1", By: "rack7"},
		{Policy: "fabric", Kind: "roce", Object: "mlx5_1/1", By: "rack7"},
	}
	if diff := cmp.Diff(want, d.Overridden); diff != "" {
		t.Errorf("overridden (-want +got):\n%s", diff)
	}
	if w := d.Netdevs["ens1f1"]; w.MTU != 4200 || w.QoSSrc.Policy != "fabric" {
		t.Errorf("ens1f1: %+v; want rack7's MTU and fabric's QoS", w)
	}
	if d := Resolve(rules[:1], []string{"ens1f0", "ens1f1"}, ports); len(d.Overridden) != 0 {
		t.Errorf("one policy overrides itself: %+v", d.Overridden)
	}
}
