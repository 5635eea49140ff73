package kmsg

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rdmad/rdmad/client/apitype"
)

// testDevices: two mlx5 functions of one NIC, a Soft-RoCE device on eth1,
// an IPoIB port.
var testDevices = []Device{
	{Name: "mlx5_0", PCI: "0000:03:00.0", Netdevs: []string{"ens1f0np0"}, Ifindexes: []int{4}},
	{Name: "mlx5_1", PCI: "0000:03:00.1", Netdevs: []string{"ens1f1np1"}, Ifindexes: []int{5}},
	{Name: "rxe0", Netdevs: []string{"eth1"}, Ifindexes: []int{3}},
	{Name: "mlx4_0", PCI: "0000:81:00.0", Netdevs: []string{"ib0"}},
}

func TestMatch(t *testing.T) {
	ix := newIndex(testDevices)
	tests := []struct {
		name         string
		in           string
		device, patt string // "" when no fault
	}{
		// Named by the DEVICE field.
		{"ibdev dev_err", "3,1,1,-;infiniband rxe0: test fault\n SUBSYSTEM=infiniband\n DEVICE=+infiniband:rxe0\n", "rxe0", "err"},
		{"pci dev_err, no catalog", "3,1,1,-;mlx5_core 0000:03:00.0: mlx5_cmd_init: something failed\n SUBSYSTEM=pci\n DEVICE=+pci:0000:03:00.0\n", "mlx5_0", "err"},
		{"pci field of the other function", "3,1,1,-;mlx5_core 0000:03:00.1: oops\n SUBSYSTEM=pci\n DEVICE=+pci:0000:03:00.1\n", "mlx5_1", "err"},
		{"netdev by ifindex", "3,1,1,-;something bad\n SUBSYSTEM=net\n DEVICE=n3\n", "rxe0", "err"},
		// Named in the text only.
		{"echo to /dev/kmsg", "11,1,1,-;infiniband rxe0: test fault abc\n", "rxe0", "err"},
		{"rxe without parent", "3,1,1,-;rxe0: bad things\n", "rxe0", "err"},
		{"netdev word", "3,1,1,-;eth1: tx timeout\n", "rxe0", "err"},
		{"netdev in parentheses", "3,1,1,-;bond0: (slave eth1): link failure\n", "rxe0", "err"},
		{"device:port", "3,1,1,-;mlx5_0:1 port error\n", "mlx5_0", "err"},
		// Not ours.
		{"another ibdev", "11,1,1,-;infiniband rxe1: test fault\n DEVICE=+infiniband:rxe1\n", "", ""},
		{"another pci function", "3,1,1,-;nvme 0000:03:00.2: failed\n SUBSYSTEM=pci\n DEVICE=+pci:0000:03:00.2\n", "", ""},
		{"eth10 is not eth1", "3,1,1,-;eth10: tx timeout\n", "", ""},
		{"eth1.100 is not eth1", "3,1,1,-;eth1.100: tx timeout\n", "", ""},
		{"rxe01 is not rxe0", "3,1,1,-;rxe01: bad\n", "", ""},
		{"neth1 is not eth1", "3,1,1,-;neth1: bad\n", "", ""},
		{"pci address prefix", "3,1,1,-;pci 0000:03:00.01: bad\n", "", ""},
		{"warning without pattern", "4,1,1,-;mlx5_core 0000:03:00.0: just a warning\n DEVICE=+pci:0000:03:00.0\n", "", ""},
		{"info without pattern", "6,1,1,-;infiniband rxe0: set active\n DEVICE=+infiniband:rxe0\n", "", ""},
		{"daemon facility", "27,1,1,-;systemd[1]: failed: rxe0\n", "", ""},
		// The catalog.
		{"mlx5 miss count", "3,1,1,-;mlx5_core 0000:03:00.0: poll_health:852:(pid 0): device's health compromised - reached miss count\n DEVICE=+pci:0000:03:00.0\n", "mlx5_0", "mlx5-health"},
		{"mlx5 health buffer at warning", "4,1,1,-;mlx5_core 0000:03:00.1: print_health_info:425:(pid 912): Health issue observed, High temperature, severity(4) WARNING:\n DEVICE=+pci:0000:03:00.1\n", "mlx5_1", "mlx5-health"},
		{"mlx5 syndrome line", "3,1,1,-;mlx5_core 0000:03:00.0: print_health_info:458:(pid 0): synd 0x8: unrecoverable hardware error\n DEVICE=+pci:0000:03:00.0\n", "mlx5_0", "mlx5-health"},
		{"mlx5 fatal sensor", "3,1,1,-;mlx5_core 0000:03:00.0: poll_health:813:(pid 0): Fatal error 1 detected\n DEVICE=+pci:0000:03:00.0\n", "mlx5_0", "mlx5-fw-fatal"},
		{"mlx5 command timeout at warning", "4,1,1,-;mlx5_core 0000:03:00.0: wait_func:964:(pid 112): ENABLE_HCA(0x104) timeout. Will cause a leak of a command resource\n DEVICE=+pci:0000:03:00.0\n", "mlx5_0", "mlx5-cmd-timeout"},
		{"mlx5 no done completion", "4,1,1,-;mlx5_core 0000:03:00.0: wait_func_handle_exec_timeout:1159:(pid 72061): cmd[0]: ACCESS_REG(0x805) No done completion\n DEVICE=+pci:0000:03:00.0\n", "mlx5_0", "mlx5-cmd-timeout"},
		{"mlx5 command failed", "3,1,1,-;mlx5_core 0000:03:00.0: mlx5_cmd_out_err:838:(pid 5): CREATE_QP(0x500) op_mod(0x0) failed, status bad parameter(0x3), syndrome (0x5ab1c2), err(-22)\n DEVICE=+pci:0000:03:00.0\n", "mlx5_0", "mlx5-cmd-failed"},
		{"AER on the NIC", "3,1,1,-;mlx5_core 0000:03:00.0: PCIe Bus Error: severity=Uncorrected (Non-Fatal), type=Transaction Layer, (Requester ID)\n DEVICE=+pci:0000:03:00.0\n", "mlx5_0", "pcie-aer"},
		{"AER root port names the NIC, info", "6,1,1,-;pcieport 0000:00:01.0: AER: Uncorrected (Fatal) error received: 0000:03:00.1\n DEVICE=+pci:0000:00:01.0\n", "mlx5_1", "pcie-aer"},
		{"AER root port, new wording", "6,1,1,-;pcieport 0000:00:01.0: AER: Uncorrectable (Non-Fatal) error message received from 0000:03:00.0\n DEVICE=+pci:0000:00:01.0\n", "mlx5_0", "pcie-aer"},
		{"AER corrected is not a fault", "4,1,1,-;mlx5_core 0000:03:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)\n DEVICE=+pci:0000:03:00.0\n", "", ""},
		{"AER root port names another device", "6,1,1,-;pcieport 0000:00:01.0: AER: Uncorrected (Fatal) error received: 0000:05:00.0\n DEVICE=+pci:0000:00:01.0\n", "", ""},
		{"mlx5e link down, info", "6,1,1,-;mlx5_core 0000:03:00.0 ens1f0np0: Link down\n DEVICE=+pci:0000:03:00.0\n", "mlx5_0", "link-down"},
		{"NIC Link is Down on the rxe netdev", "6,1,1,-;e1000e 0000:00:19.0 eth1: NIC Link is Down\n DEVICE=+pci:0000:00:19.0\n", "rxe0", "link-down"},
		{"link down of a representor is not the port's", "6,1,1,-;mlx5_core 0000:03:00.0 pf0vf1: Link down\n DEVICE=+pci:0000:03:00.0\n", "", ""},
		{"link down of another netdev", "6,1,1,-;e1000e 0000:00:19.0 eth0: NIC Link is Down\n DEVICE=+pci:0000:00:19.0\n", "", ""},
		{"link up is not a fault", "6,1,1,-;mlx5_core 0000:03:00.0 ens1f0np0: Link up\n DEVICE=+pci:0000:03:00.0\n", "", ""},
		{"ibdev fatal at warning", "4,1,1,-;infiniband mlx4_0: catastrophic error detected\n DEVICE=+infiniband:mlx4_0\n", "mlx4_0", "rdma-fatal"},
		{"debug never", "7,1,1,-;infiniband rxe0: fatal\n", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := ParseRecord([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			device, patt, ok := ix.match(&r)
			if !ok {
				device, patt = "", ""
			}
			if device != tt.device || patt != tt.patt {
				t.Errorf("%q: fault on %q pattern %q, want %q %q", tt.in, device, patt, tt.device, tt.patt)
			}
		})
	}
}

// TestMatchNoAlloc: a record that names no device costs no allocation.
func TestMatchNoAlloc(t *testing.T) {
	ix := newIndex(testDevices)
	r, _ := ParseRecord([]byte("3,1,1,-;nvme 0000:05:00.0: I/O 12 QID 3 timeout, aborting at 12:34:56\n DEVICE=+pci:0000:05:00.0\n"))
	if n := testing.AllocsPerRun(100, func() { ix.identify(&r) }); n != 0 {
		t.Errorf("identify allocates %v times, want 0", n)
	}
}

// TestCatalogNames: names are unique, lower case and not "err".
func TestCatalogNames(t *testing.T) {
	seen := map[string]bool{PatternErr: true}
	for _, p := range Catalog {
		if seen[p.Name] || p.Name == "" || p.MaxPriority < 0 || p.MaxPriority > 6 {
			t.Errorf("catalog entry %q (max priority %d): duplicate, empty or out of range", p.Name, p.MaxPriority)
		}
		for _, c := range p.Name {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				t.Errorf("catalog name %q: want lower case, digits and '-'", p.Name)
			}
		}
		seen[p.Name] = true
	}
}

func TestDevicesOf(t *testing.T) {
	got := DevicesOf([]apitype.Device{
		{Name: "mlx5_0", Parent: "0000:03:00.0", Ports: []apitype.Port{{Port: 1, Netdev: "rdmad-no-such-netdev"}}},
		{Name: "rxe0", Ports: []apitype.Port{{Port: 1, Netdev: "lo"}, {Port: 2, Netdev: "lo"}, {Port: 3}}},
	})
	want := []Device{
		{Name: "mlx5_0", PCI: "0000:03:00.0", Netdevs: []string{"rdmad-no-such-netdev"}, Ifindexes: []int{0}},
		// The loopback device is interface 1 in every namespace.
		{Name: "rxe0", Netdevs: []string{"lo"}, Ifindexes: []int{1}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("DevicesOf (-want +got):\n%s", diff)
	}
}
