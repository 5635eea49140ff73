package state

import (
	"slices"
	"testing"

	"github.com/rdmad/rdmad/client/apitype"
)

func snap(devs ...apitype.Device) *apitype.Snapshot { return &apitype.Snapshot{Devices: devs} }

func dev(name string, ports ...apitype.Port) apitype.Device {
	return apitype.Device{Name: name, Ports: ports}
}

func port(n int, st, phys string) apitype.Port {
	return apitype.Port{Port: n, State: st, PhysState: phys}
}

// TestCompareDevicesAndLinks: one comparison gives the devices that came and
// went and every port whose state or physical state moved, a new device's
// ports included (the journal's device and port lines, the watch stream's
// link events and D-Bus LinkChanged all read it).
func TestCompareDevicesAndLinks(t *testing.T) {
	prev := snap(
		dev("mlx5_0", port(1, "ACTIVE", "LinkUp"), port(2, "ACTIVE", "LinkUp")),
		dev("mlx5_1", port(1, "ACTIVE", "LinkUp")),
	)
	next := snap(
		dev("mlx5_0", port(1, "ACTIVE", "LinkUp"), port(2, "DOWN", "Disabled")),
		dev("rxe0", port(1, "ACTIVE", "LinkUp")),
	)
	d := Compare(prev, next)
	want := []DeviceChange{{Name: "mlx5_1"}, {Name: "rxe0", Added: true, Ports: 1}}
	if !slices.Equal(d.Devices, want) {
		t.Errorf("devices: got %+v, want %+v", d.Devices, want)
	}
	var keys []string
	for _, c := range d.Links {
		keys = append(keys, c.Key())
	}
	if !slices.Equal(keys, []string{"mlx5_0/2", "mlx5_1/1", "rxe0/1"}) {
		t.Fatalf("links: got %v", keys)
	}
	if c := d.Links[0]; c.Old == nil || c.New == nil || c.Old.State != "ACTIVE" || c.New.PhysState != "Disabled" {
		t.Errorf("mlx5_0/2: got old %+v new %+v", c.Old, c.New)
	}
	if c := d.Links[1]; c.Old == nil || c.New != nil {
		t.Errorf("mlx5_1/1 vanished with its device: got old %+v new %+v", c.Old, c.New)
	}
	if c := d.Links[2]; c.Old != nil || c.New == nil {
		t.Errorf("rxe0/1 came with its device: got old %+v new %+v", c.Old, c.New)
	}
	if d.Empty() {
		t.Error("Empty() with changes")
	}

	// Only the physical state moving is a change; nothing moving is none.
	phys := Compare(next, snap(
		dev("mlx5_0", port(1, "ACTIVE", "LinkUp"), port(2, "DOWN", "Polling")),
		dev("rxe0", port(1, "ACTIVE", "LinkUp")),
	))
	if len(phys.Links) != 1 || phys.Links[0].Key() != "mlx5_0/2" || len(phys.Devices) != 0 {
		t.Errorf("physical state only: got links %+v devices %+v", phys.Links, phys.Devices)
	}
	if same := Compare(next, next); !same.Empty() {
		t.Errorf("a snapshot against itself: %+v", same)
	}
}
