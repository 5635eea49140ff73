package inventory

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rdmad/rdmad/client/apitype"
)

// TestFunctionsWithoutDevice reads testdata/lost (mkfixture.sh says what
// each function is): the ConnectX whose mlx5_ib failed and the one no
// driver took are lost; a VF, a ConnectX held by vfio-pci, an E810
// without RDMA beside one with it (ice switches RDMA per function), an
// E810 whose RDMA device is on its auxiliary device and the bridges are
// not.
func TestFunctionsWithoutDevice(t *testing.T) {
	r := Reader{Root: "testdata/lost"}
	devs, err := r.Read()
	if err != nil {
		t.Fatal(err)
	}
	pci := map[string]string{}
	for _, d := range devs {
		pci[d.Name] = d.PCI
	}
	if want := map[string]string{"irdma0": "0000:81:00.0", "mlx5_0": "0000:17:00.0", "mlx5_1": "0000:2a:00.0"}; !cmp.Equal(pci, want) {
		t.Errorf("devices' PCI functions %v, want %v", pci, want)
	}
	got := r.FunctionsWithoutDevice(devs)
	want := []apitype.PCIFunction{
		{Address: "0000:3d:00.0", Vendor: "0x15b3", Device: "0x1021", Class: "0x020700", Driver: "mlx5_core"},
		{Address: "0000:4e:00.0", Vendor: "0x15b3", Device: "0x101d", Class: "0x020000"},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("functions without a device (-want +got):\n%s", d)
	}
	// mlx5_0 gone as well: its function is lost too, by the same driver
	// rule (mlx5_1 still has its device).
	var without0 []apitype.Device
	for _, d := range devs {
		if d.Name != "mlx5_0" {
			without0 = append(without0, d)
		}
	}
	if got := r.FunctionsWithoutDevice(without0); len(got) != 3 || got[0].Address != "0000:17:00.0" {
		t.Errorf("without mlx5_0: %+v, want 0000:17:00.0 first of three", got)
	}
	// Every ConnectX device gone: the InfiniBand-class functions and the
	// unbound ConnectX still count; mlx5_core has no device left to vouch
	// that it makes them, but the class says what they are.
	if got := r.FunctionsWithoutDevice(nil); len(got) != 4 {
		t.Errorf("without devices: %+v, want the 4 ConnectX functions", got)
	}
}

func TestFunctionsWithoutDeviceNoPCIBus(t *testing.T) {
	for _, root := range []string{"testdata/roce-ib", "testdata/empty", "testdata/absent"} {
		r := Reader{Root: root}
		devs, _ := r.Read()
		if got := r.FunctionsWithoutDevice(devs); got != nil {
			t.Errorf("%s: %+v, want none (no sys/bus/pci)", root, got)
		}
	}
	// A software device on a NIC's function does not vouch for it.
	r := Reader{Root: "testdata/pcie"}
	devs, err := r.Read()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		if d.Name == "rxe0" && d.PCI != "" {
			t.Errorf("rxe0's PCI function %q, want none (it is software)", d.PCI)
		}
		if d.Name == "virt0" && d.PCI != "" {
			t.Errorf("virt0's PCI function %q, want none", d.PCI)
		}
	}
}
