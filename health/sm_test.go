package health

import (
	"slices"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/client/apitype"
)

// ibNode is node() with an InfiniBand device whose port reads as port as
// sysfs gives it (state, phys_state, lid, sm_lid).
func ibNode(state, phys string, lid, smlid int) *apitype.Snapshot {
	s := node()
	s.Devices = append(s.Devices, apitype.Device{Name: "mlx5_0", Uverbs: "/dev/infiniband/uverbs1", Ports: []apitype.Port{
		{Port: 1, State: state, PhysState: phys, LinkLayer: "InfiniBand", Netdev: "ib0", LID: lid, SMLID: smlid, RateGbps: 200}}})
	return s
}

func TestEvaluateSubnetManager(t *testing.T) {
	for _, tt := range []struct {
		name   string
		snap   *apitype.Snapshot
		status string
		reason string
		msg    string
	}{
		{"no SM: INIT, LID 0, SM LID 0", ibNode("INIT", "LinkUp", 0, 0), apitype.ConditionProblem, "NoSubnetManager",
			"mlx5_0/1 (ib0) is INIT with LID 0x0 and SM LID 0x0: no subnet manager; start opensm on one node of the subnet"},
		{"INIT after the SM left", ibNode("INIT", "LinkUp", 0x12, 0x1), apitype.ConditionProblem, "NoSubnetManager", "mlx5_0/1 (ib0) is INIT"},
		{"SM present", ibNode("ACTIVE", "LinkUp", 0x12, 0x1), apitype.ConditionOK, "SubnetManagerPresent", "1 InfiniBand port(s)"},
		{"link down is PortDown's", ibNode("DOWN", "Polling", 0, 0), apitype.ConditionOK, "SubnetManagerPresent", ""},
		{"RoCE only", node(), apitype.ConditionOK, "NoInfiniBandPorts", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := evaluator{in: Input{Snap: tt.snap}, s: tt.snap}
			c := e.subnetManager()
			if c.Type != apitype.CondSubnetManager || c.Status != tt.status || c.Reason != tt.reason || !strings.Contains(c.Message, tt.msg) {
				t.Errorf("got %+v\nwant %s %s, message with %q", c, tt.status, tt.reason, tt.msg)
			}
			if tt.status == apitype.ConditionProblem && !slices.Equal(c.Objects, []string{"mlx5_0/1"}) {
				t.Errorf("objects %v, want [mlx5_0/1]", c.Objects)
			}
		})
	}
	// An ignored port ([health] ignore) is not judged.
	s := ibNode("INIT", "LinkUp", 0, 0)
	e := evaluator{in: Input{Snap: s, Expect: Expect{Ignore: []string{"mlx5_0/1"}}}, s: s}
	if c := e.subnetManager(); c.Status != apitype.ConditionOK {
		t.Errorf("ignored port: %+v, want ok", c)
	}
	// Before the inventory is read nothing is known.
	s = ibNode("INIT", "LinkUp", 0, 0)
	s.Components = map[string]apitype.Component{}
	e = evaluator{in: Input{Snap: s}, s: s}
	if c := e.subnetManager(); c.Status != apitype.ConditionUnknown {
		t.Errorf("inventory not read: %+v, want unknown", c)
	}
}
