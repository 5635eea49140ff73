package health

import (
	"strings"
	"testing"

	"github.com/rdmad/rdmad/client/apitype"
)

// eight is a node of eight HCAs, mlx5_0..mlx5_7 on 0000:1N:00.0, one port
// each.
func eight() *apitype.Snapshot {
	s := node()
	s.Devices = nil
	for i := range 8 {
		s.Devices = append(s.Devices, apitype.Device{Name: "mlx5_" + string(rune('0'+i)), PCI: "0000:1" + string(rune('0'+i)) + ":00.0",
			Uverbs: "/dev/infiniband/uverbs" + string(rune('0'+i)), Ports: []apitype.Port{{Port: 1, State: "ACTIVE", PhysState: "LinkUp"}}})
	}
	return s
}

func without(s *apitype.Snapshot, name string) *apitype.Snapshot {
	var devs []apitype.Device
	for _, d := range s.Devices {
		if d.Name != name {
			devs = append(devs, d)
		}
	}
	s.Devices = devs
	return s
}

func rails(n int) []ExpectedDevice {
	var x []ExpectedDevice
	for i := range n {
		x = append(x, ExpectedDevice{Name: "mlx5_" + string(rune('0'+i)), Rail: "rail" + string(rune('0'+i))})
	}
	return x
}

// TestDeviceMissing: a node that lost one of eight HCAs is not healthy
// (#39 item 2): by the count, by name with its rail, by PCI address (with
// the function's driver when the function is there), by a PCI function
// without its device when nothing is declared; and extra devices, ports
// missing, and what [health] ignore leaves out.
func TestDeviceMissing(t *testing.T) {
	lost := apitype.PCIFunction{Address: "0000:13:00.0", Vendor: "0x15b3", Device: "0x1021", Class: "0x020700", Driver: "mlx5_core"}
	for _, tc := range []struct {
		name    string
		snap    *apitype.Snapshot
		expect  Expect
		status  string
		reason  string
		objects []string
		msg     []string
	}{
		{name: "eight of eight", snap: eight(), expect: Expect{Count: 8, Devices: rails(8), Ports: 1},
			status: apitype.ConditionOK, reason: "DevicesAsExpected", msg: []string{"8 RDMA devices, as [health.expect] declares"}},
		{name: "nothing declared", snap: eight(), status: apitype.ConditionOK, reason: "NoFunctionWithoutDevice"},
		{name: "count", snap: without(eight(), "mlx5_3"), expect: Expect{Count: 8},
			status: apitype.ConditionProblem, reason: "ExpectedDeviceMissing", msg: []string{"7 of 8 RDMA devices present", "dmesg"}},
		{name: "by name and rail", snap: without(eight(), "mlx5_3"), expect: Expect{Count: 8, Devices: rails(8)},
			status: apitype.ConditionProblem, reason: "ExpectedDeviceMissing", objects: []string{"mlx5_3"},
			msg: []string{"mlx5_3 (rail3) is missing", "7 of 8 RDMA devices present"}},
		{name: "by PCI, function there", snap: func() *apitype.Snapshot {
			s := without(eight(), "mlx5_3")
			s.FunctionsWithoutDevice = []apitype.PCIFunction{lost}
			return s
		}(), expect: Expect{Devices: []ExpectedDevice{{PCI: "0000:13:00.0", Rail: "rail3"}}},
			status: apitype.ConditionProblem, reason: "ExpectedDeviceMissing", objects: []string{"0000:13:00.0"},
			msg: []string{"0000:13:00.0 (rail3) is missing: its PCI function has no RDMA device: 0000:13:00.0 (0x15b3:0x1021, driver mlx5_core)"}},
		{name: "by PCI, gone from the bus", snap: without(eight(), "mlx5_3"), expect: Expect{Devices: []ExpectedDevice{{PCI: "0000:13:00.0"}}},
			status: apitype.ConditionProblem, reason: "ExpectedDeviceMissing", msg: []string{"no RDMA adapter answers at that PCI address (lspci -D -s 0000:13:00.0)"}},
		{name: "function without device, nothing declared", snap: func() *apitype.Snapshot {
			s := without(eight(), "mlx5_3")
			s.FunctionsWithoutDevice = []apitype.PCIFunction{lost, {Address: "0000:4e:00.0", Vendor: "0x15b3", Device: "0x101d", Class: "0x020000"}}
			return s
		}(), status: apitype.ConditionProblem, reason: "FunctionWithoutRDMADevice", objects: []string{"0000:13:00.0", "0000:4e:00.0"},
			msg: []string{"PCI function 0000:13:00.0 (0x15b3:0x1021, driver mlx5_core) has no RDMA device", "0000:4e:00.0 (0x15b3:0x101d, no driver bound)"}},
		{name: "function ignored", snap: func() *apitype.Snapshot {
			s := without(eight(), "mlx5_3")
			s.FunctionsWithoutDevice = []apitype.PCIFunction{lost}
			return s
		}(), expect: Expect{Ignore: []string{"0000:13:00.0"}}, status: apitype.ConditionOK},
		{name: "extra", snap: func() *apitype.Snapshot {
			s := eight()
			s.Devices = append(s.Devices, apitype.Device{Name: "rxe0"})
			return s
		}(), expect: Expect{Count: 8, Devices: rails(8)}, status: apitype.ConditionProblem, reason: "UnexpectedDevice",
			objects: []string{"rxe0"}, msg: []string{"9 RDMA devices, expect 8 (not listed: rxe0)"}},
		{name: "extra ignored", snap: func() *apitype.Snapshot {
			s := eight()
			s.Devices = append(s.Devices, apitype.Device{Name: "rxe0"})
			return s
		}(), expect: Expect{Count: 8, Ignore: []string{"rxe0"}}, status: apitype.ConditionOK},
		{name: "ports", snap: eight(), expect: Expect{Ports: 2, Devices: []ExpectedDevice{{Name: "mlx5_0", Ports: 1, Rail: "r0"}}},
			status: apitype.ConditionProblem, reason: "PortsMissing", objects: []string{"mlx5_1", "mlx5_2"},
			msg: []string{"mlx5_1 has 1 ports, expect 2", "and 3 more"}},
		{name: "ignored device not counted as present", snap: eight(), expect: Expect{Count: 8, Ignore: []string{"mlx5_7"}},
			status: apitype.ConditionProblem, reason: "ExpectedDeviceMissing", msg: []string{"7 of 8"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := Evaluate(Input{Snap: tc.snap, Now: t0, Expect: tc.expect, Flaps: map[string]FlapState{}})
			c := cond(t, h, apitype.CondDeviceMissing)
			if c.Status != tc.status || (tc.reason != "" && c.Reason != tc.reason) {
				t.Fatalf("%s %s: %s, want %s %s", c.Status, c.Reason, c.Message, tc.status, tc.reason)
			}
			for _, m := range tc.msg {
				if !strings.Contains(c.Message, m) {
					t.Errorf("message %q lacks %q", c.Message, m)
				}
			}
			for _, o := range tc.objects {
				found := false
				for _, got := range c.Objects {
					found = found || got == o
				}
				if !found {
					t.Errorf("objects %v lack %s", c.Objects, o)
				}
			}
			if tc.status == apitype.ConditionProblem && h.Healthy {
				t.Error("the node is healthy with DeviceMissing a problem")
			}
		})
	}
}

func TestDeviceMissingInventoryUnknown(t *testing.T) {
	s := eight()
	s.Components[apitype.ComponentInventory] = apitype.Component{State: apitype.Error, Error: "sysfs: EIO"}
	c := cond(t, Evaluate(Input{Snap: s, Now: t0, Expect: Expect{Count: 9}}), apitype.CondDeviceMissing)
	if c.Status != apitype.ConditionUnknown {
		t.Errorf("unreadable inventory: %+v, want unknown", c)
	}
}
