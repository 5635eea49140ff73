package policy

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/policy/nicq"
	"github.com/rdmad/rdmad/policy/qos"
)

func TestResolve(t *testing.T) {
	tos := 106
	policies := []Rule{
		{Name: "fabric", Netdevs: []string{"rdt*"}, MTU: 4200},
		{Name: "by-device", Devices: []string{"mlx5_*"}, Observe: true, MTU: 9000,
			QoS: &qos.Desired{Trust: "dscp", PFC: []int{3}, DSCPToPrio: map[int]int{26: 3}}},
		{Name: "roce", Netdevs: []string{"ens1f1"}, RoCE: &RoCERule{ToS: &tos, Mode: "v2"}},
		{Name: "override", Netdevs: []string{"rdt1"}, MTU: 1500},
		{Name: "nothing", Netdevs: []string{"zz*"}, MTU: 1500},
		{Name: "queues", Netdevs: []string{"ens1f*"}, NIC: map[string]nicq.Values{"rings": {"rx": 4096, "tx": 4096}, "channels": {"combined": 8}}},
		{Name: "queues-late", Netdevs: []string{"ens1f1"}, NIC: map[string]nicq.Values{"rings": {"rx": 1024}}},
		{Name: "fw", Devices: []string{"mlx5_*"}, Firmware: ">=22.39.1002"},
	}
	netdevs := []string{"lo", "rdt0", "rdt1", "ens1f0", "ens1f1", "eth9"}
	ports := []Port{{"mlx5_0", 1, "ens1f0"}, {"mlx5_1", 1, "ens1f1"}, {"mlx4_0", 1, ""}}

	got := Resolve(policies, netdevs, ports)
	enforce := func(p string) Source { return Source{Policy: p} }
	observe := func(p string) Source { return Source{Policy: p, Observe: true} }
	q := &qos.Desired{Trust: "dscp", PFC: []int{3}, DSCPToPrio: map[int]int{26: 3}}
	want := Desired{
		Netdevs: map[string]NetdevWant{
			"rdt0": {MTU: 4200, MTUSrc: enforce("fabric")},
			"rdt1": {MTU: 1500, MTUSrc: enforce("override")}, // the later policy wins
			"ens1f0": {MTU: 9000, MTUSrc: observe("by-device"), QoS: q, QoSSrc: observe("by-device"), NIC: map[string]NICWant{
				"rings":    {Values: nicq.Values{"rx": 4096, "tx": 4096}, Src: enforce("queues")},
				"channels": {Values: nicq.Values{"combined": 8}, Src: enforce("queues")},
			}},
			// A later table replaces an earlier one as a whole.
			"ens1f1": {MTU: 9000, MTUSrc: observe("by-device"), QoS: q, QoSSrc: observe("by-device"), NIC: map[string]NICWant{
				"rings":    {Values: nicq.Values{"rx": 1024}, Src: enforce("queues-late")},
				"channels": {Values: nicq.Values{"combined": 8}, Src: enforce("queues")},
			}},
		},
		Ports: map[Port]PortWant{
			{"mlx5_1", 1, "ens1f1"}: {ToS: &tos, Mode: "v2", RoCESrc: enforce("roce"), RoCE: true},
		},
		Devices: map[string]DeviceWant{
			"mlx5_0": {Firmware: ">=22.39.1002", FirmwareSrc: enforce("fw")},
			"mlx5_1": {Firmware: ">=22.39.1002", FirmwareSrc: enforce("fw")},
		},
		Matches: map[string][]string{
			"queues":      {"ens1f0", "ens1f1"},
			"queues-late": {"ens1f1"},
			"fw":          {"mlx5_0", "mlx5_1"},
			"fabric":      {"rdt0", "rdt1"},
			"by-device":   {"ens1f0", "ens1f1"},
			"roce":        {"mlx5_1/1"},
			"override":    {"rdt1"},
			"nothing":     {},
		},
		// ... and the earlier one's setting is reported, not dropped.
		Overridden: []apitype.Override{{Policy: "fabric", Kind: "mtu", Object: "rdt1", By: "override"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Resolve (-want +got):\n%s", diff)
	}
}

func TestFormatQoS(t *testing.T) {
	for _, tt := range []struct {
		trust  string
		pfc    []int
		dscp   map[int]int
		pm, dm bool
		want   string
	}{
		{"dscp", []int{3, 4}, map[int]int{48: 6, 26: 3}, true, true, "trust=dscp pfc=3,4 dscp=26:3,48:6"},
		{"", nil, nil, true, false, "pfc=none"},
		{"pcp", nil, map[int]int{}, false, true, "trust=pcp dscp=none"},
	} {
		if got := FormatQoS(tt.trust, tt.pfc, tt.dscp, tt.pm, tt.dm); got != tt.want {
			t.Errorf("FormatQoS = %q, want %q", got, tt.want)
		}
	}
}
