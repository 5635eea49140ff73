package kmsg

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rdmad/rdmad/client/apitype"
)

// testDevices: two mlx5 functions of one NIC, a Soft-RoCE device on a
// veth (eth1, no parent device) and one on a virtio netdev (eth2), siw on
// another virtio netdev, an IPoIB port.
var testDevices = []Device{
	{Name: "mlx5_0", PCI: "0000:03:00.0", Netdevs: []string{"ens1f0np0"}, Ifindexes: []int{4}, Driver: "mlx5_core"},
	{Name: "mlx5_1", PCI: "0000:03:00.1", Netdevs: []string{"ens1f1np1"}, Ifindexes: []int{5}, Driver: "mlx5_core"},
	{Name: "rxe0", Netdevs: []string{"eth1"}, Ifindexes: []int{3}, Virtual: []bool{true}},
	{Name: "rxe1", Netdevs: []string{"eth2"}, Ifindexes: []int{6}},
	{Name: "siw0", Netdevs: []string{"eth3"}, Ifindexes: []int{7}},
	{Name: "mlx4_0", PCI: "0000:81:00.0", Netdevs: []string{"ib0"}},
}

type matchCase struct {
	name         string
	in           string
	device, patt string // "" when no fault
}

func runMatch(t *testing.T, tests []matchCase, userspace bool) {
	t.Helper()
	ix := newIndex(testDevices)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := ParseRecord([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			h, ok := ix.match(&r, userspace)
			device, patt := h.device, h.pattern
			if !ok || h.class == ClassNoise {
				device, patt = "", "" // noise is no fault
			}
			if device != tt.device || patt != tt.patt {
				t.Errorf("%q: fault on %q pattern %q, want %q %q", tt.in, device, patt, tt.device, tt.patt)
			}
		})
	}
}

func TestMatch(t *testing.T) {
	runMatch(t, []matchCase{
		// Named by the DEVICE property.
		{"ibdev dev_err", "3,1,1,-;infiniband rxe0: test fault\n SUBSYSTEM=infiniband\n DEVICE=+infiniband:rxe0\n", "rxe0", "err"},
		{"pci dev_err, no catalog", "3,1,1,-;mlx5_core 0000:03:00.0: mlx5_cmd_init: something failed\n SUBSYSTEM=pci\n DEVICE=+pci:0000:03:00.0\n", "mlx5_0", "err"},
		{"pci field of the other function", "3,1,1,-;mlx5_core 0000:03:00.1: oops\n SUBSYSTEM=pci\n DEVICE=+pci:0000:03:00.1\n", "mlx5_1", "err"},
		{"netdev by ifindex", "3,1,1,-;something bad\n SUBSYSTEM=net\n DEVICE=n3\n", "rxe0", "err"},
		{"ibdev_printk with a PCI parent", "4,1,1,-;mlx5_core 0000:03:00.0 mlx5_0: catastrophic error\n SUBSYSTEM=pci\n DEVICE=+pci:0000:03:00.0\n", "mlx5_0", "rdma-fatal"},
		{"ibdev_printk with a virtio parent", "3,1,1,-;virtio_net virtio1 siw0: failed\n SUBSYSTEM=virtio\n DEVICE=+virtio:virtio1\n", "siw0", "err"},
		{"netdev_printk, unregistering", "6,1,1,-;virtio_net virtio0 eth2 (unregistering): Link is Down\n SUBSYSTEM=virtio\n DEVICE=+virtio:virtio0\n", "rxe1", "link-down"},
		// The prefixes drivers write without a DEVICE property, at err.
		{"rxe's ibdev_printk (no parent)", "3,1,1,-;rxe0: rxe_newlink: already configured on eth1\n", "rxe0", "err"},
		{"rdma_rxe pr_err naming the netdev", "3,1,1,-;rdma_rxe: already configured on eth1\n", "rxe0", "err"},
		{"rdma_rxe pr_err naming the device", "3,1,1,-;rdma_rxe: rxe1: send failed\n", "rxe1", "err"},
		{"netdev without a parent", "3,1,1,-;eth1: tx timeout\n", "rxe0", "err"},
		{"netdev without a parent, unregistered", "3,1,1,-;eth1 (unregistered): tx timeout\n", "rxe0", "err"},
		{"dev_printk form without DEVICE", "3,1,1,-;infiniband mlx4_0: test fault\n", "mlx4_0", "err"},
		{"pci dev_printk form without DEVICE", "3,1,1,-;mlx5_core 0000:03:00.1: failed\n", "mlx5_1", "err"},
		{"netdev_printk form without DEVICE", "3,1,1,-;mlx5_core 0000:03:00.0 ens1f0np0: tx timeout\n", "mlx5_0", "err"},
		// Not ours.
		{"another ibdev", "3,1,1,-;infiniband rxe9: test fault\n DEVICE=+infiniband:rxe9\n", "", ""},
		{"another pci function", "3,1,1,-;nvme 0000:03:00.2: failed\n SUBSYSTEM=pci\n DEVICE=+pci:0000:03:00.2\n", "", ""},
		{"eth10 is not eth1", "3,1,1,-;eth10: tx timeout\n", "", ""},
		{"eth1.100 is not eth1", "3,1,1,-;eth1.100: tx timeout\n", "", ""},
		{"rxe01 is not rxe0", "3,1,1,-;rxe01: bad\n", "", ""},
		{"rdma_rxe eth10 is not eth1", "3,1,1,-;rdma_rxe: already configured on eth10\n", "", ""},
		{"pci address prefix", "3,1,1,-;pci 0000:03:00.01: bad\n", "", ""},
		{"warning without pattern", "4,1,1,-;mlx5_core 0000:03:00.0: just a warning\n DEVICE=+pci:0000:03:00.0\n", "", ""},
		{"info without pattern", "6,1,1,-;infiniband rxe0: set active\n DEVICE=+infiniband:rxe0\n", "", ""},
		{"daemon facility", "27,1,1,-;systemd[1]: failed: rxe0\n", "", ""},
		{"a name elsewhere in the text", "3,1,1,-;bond0: (slave eth1): link failure\n", "", ""},
		{"device:port in the text", "3,1,1,-;mlx5_0:1 port error\n", "", ""},
		{"a DEVICE of another device, our name in the text", "3,1,1,-;nvme 0000:05:00.0: mlx5_0 ens1f0np0 rxe0 failed\n DEVICE=+pci:0000:05:00.0\n", "", ""},
		{"bare netdev with a parent device", "3,1,1,-;eth2: tx timeout\n", "", ""},
		{"bare name of a PCI device", "3,1,1,-;mlx5_0: device's health compromised - reached miss count\n", "", ""},
		{"bare prefix below err", "4,1,1,-;rxe0: fatal error\n", "", ""},
		{"bare netdev link down at info", "6,1,1,-;eth1: Link down\n", "", ""},
		// The catalog.
		{"mlx5 miss count", "3,1,1,-;mlx5_core 0000:03:00.0: poll_health:852:(pid 0): device's health compromised - reached miss count\n DEVICE=+pci:0000:03:00.0\n", "mlx5_0", "mlx5-health"},
		{"mlx5 health buffer at warning", "4,1,1,-;mlx5_core 0000:03:00.1: print_health_info:425:(pid 912): Health issue observed, High temperature, severity(4) WARNING:\n DEVICE=+pci:0000:03:00.1\n", "mlx5_1", "mlx5-health"},
		{"mlx5 syndrome line", "3,1,1,-;mlx5_core 0000:03:00.0: print_health_info:458:(pid 0): synd 0x8: unrecoverable hardware error\n DEVICE=+pci:0000:03:00.0\n", "mlx5_0", "mlx5-health"},
		{"mlx5 fatal sensor", "3,1,1,-;mlx5_core 0000:03:00.0: poll_health:813:(pid 0): Fatal error 1 detected\n DEVICE=+pci:0000:03:00.0\n", "mlx5_0", "mlx5-fw-fatal"},
		{"mlx5 command timeout at warning", "4,1,1,-;mlx5_core 0000:03:00.0: wait_func:964:(pid 112): ENABLE_HCA(0x104) timeout. Will cause a leak of a command resource\n DEVICE=+pci:0000:03:00.0\n", "mlx5_0", "mlx5-cmd-timeout"},
		{"mlx5 no done completion", "4,1,1,-;mlx5_core 0000:03:00.0: wait_func_handle_exec_timeout:1159:(pid 72061): cmd[0]: ACCESS_REG(0x805) No done completion\n DEVICE=+pci:0000:03:00.0\n", "mlx5_0", "mlx5-cmd-timeout"},
		{"mlx5 command failed", "3,1,1,-;mlx5_core 0000:03:00.0: mlx5_cmd_out_err:838:(pid 5): CREATE_QP(0x500) op_mod(0x0) failed, status bad parameter(0x3), syndrome (0x5ab1c2), err(-22)\n DEVICE=+pci:0000:03:00.0\n", "mlx5_0", "mlx5-cmd-failed"},
		{"AER on the NIC", "3,1,1,-;mlx5_core 0000:03:00.0: PCIe Bus Error: severity=Uncorrected (Non-Fatal), type=Transaction Layer, (Requester ID)\n DEVICE=+pci:0000:03:00.0\n", "mlx5_0", "pcie-aer"},
		{"AER root port names the NIC, info", "6,1,1,-;pcieport 0000:00:01.0: AER: Uncorrected (Fatal) error received: 0000:03:00.1\n SUBSYSTEM=pci\n DEVICE=+pci:0000:00:01.0\n", "mlx5_1", "pcie-aer"},
		{"AER root port, new wording", "6,1,1,-;pcieport 0000:00:01.0: AER: Uncorrectable (Non-Fatal) error message received from 0000:03:00.0\n SUBSYSTEM=pci\n DEVICE=+pci:0000:00:01.0\n", "mlx5_0", "pcie-aer"},
		{"AER root port, new wording, no details", "6,1,1,-;pcieport 0000:00:01.0: AER: Multiple Uncorrectable (Fatal) error message received from 0000:03:00.1 (no details found\n SUBSYSTEM=pci\n DEVICE=+pci:0000:00:01.0\n", "mlx5_1", "pcie-aer"},
		{"AER root port, id form", "6,1,1,-;pcieport 0000:00:01.0: AER: Uncorrected (Non-Fatal) error received: id=0301\n SUBSYSTEM=pci\n DEVICE=+pci:0000:00:01.0\n", "mlx5_1", "pcie-aer"},
		{"AER root port, id of another device", "6,1,1,-;pcieport 0000:00:01.0: AER: Uncorrected (Non-Fatal) error received: id=0302\n SUBSYSTEM=pci\n DEVICE=+pci:0000:00:01.0\n", "", ""},
		{"AER root port without DEVICE", "6,1,1,-;pcieport 0000:00:01.0: AER: Uncorrected (Fatal) error received: 0000:03:00.1\n", "", ""},
		{"AER text of another port's DEVICE", "6,1,1,-;pcieport 0000:00:01.0: AER: Uncorrected (Fatal) error received: 0000:03:00.1\n SUBSYSTEM=pci\n DEVICE=+pci:0000:00:02.0\n", "", ""},
		{"AER corrected is not a fault", "4,1,1,-;mlx5_core 0000:03:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)\n DEVICE=+pci:0000:03:00.0\n", "", ""},
		{"AER root port names another device", "6,1,1,-;pcieport 0000:00:01.0: AER: Uncorrected (Fatal) error received: 0000:05:00.0\n DEVICE=+pci:0000:00:01.0\n", "", ""},
		{"mlx5e link down, info", "6,1,1,-;mlx5_core 0000:03:00.0 ens1f0np0: Link down\n DEVICE=+pci:0000:03:00.0\n", "mlx5_0", "link-down"},
		{"NIC Link is Down on the rxe netdev", "6,1,1,-;e1000e 0000:00:19.0 eth1: NIC Link is Down\n DEVICE=+pci:0000:00:19.0\n", "rxe0", "link-down"},
		{"link down of a representor is not the port's", "6,1,1,-;mlx5_core 0000:03:00.0 pf0vf1: Link down\n DEVICE=+pci:0000:03:00.0\n", "", ""},
		{"link down of another netdev", "6,1,1,-;e1000e 0000:00:19.0 eth0: NIC Link is Down\n DEVICE=+pci:0000:00:19.0\n", "", ""},
		{"link up is not a fault", "6,1,1,-;mlx5_core 0000:03:00.0 ens1f0np0: Link up\n DEVICE=+pci:0000:03:00.0\n", "", ""},
		{"ibdev fatal at warning", "4,1,1,-;infiniband mlx4_0: catastrophic error detected\n DEVICE=+infiniband:mlx4_0\n", "mlx4_0", "rdma-fatal"},
		{"debug never", "7,1,1,-;infiniband rxe0: fatal\n DEVICE=+infiniband:rxe0\n", "", ""},
	}, false)
}

// TestMatchForged: the lines an unprivileged user can make the kernel log
// about a name of their choice are no fault of the device of that name.
// The first six are what this host's kernel (6.18) wrote when user nobody
// ran a crashing program named rxe0 and one named ens1f0np0, mounted
// tmpfs in a user namespace with the options mlx5_0 and rxe0 (unshare
// -Urm mount -t tmpfs -o mlx5_0 none /mnt), and crashed programs that had
// named themselves "rxe0: fatal" and "eth1: Link down" (prctl
// PR_SET_NAME): the kernel's facility, at info and err.
func TestMatchForged(t *testing.T) {
	runMatch(t, []matchCase{
		{"segfault of a program named rxe0", "6,340,34624919871,-;rxe0[25067]: segfault at 0 ip 0000555f69b79139 sp 00007ffcc458c810 error 6 in rxe0[1139,555f69b79000+1000] likely on CPU 1 (core 1, socket 0)\n", "", ""},
		{"segfault of a program named after the netdev", "6,342,34624943896,-;ens1f0np0[25069]: segfault at 0 ip 000056049236d139 sp 00007fff2bf380d0 error 6 in ens1f0np0[1139,56049236d000+1000] likely on CPU 1 (core 1, socket 0)\n", "", ""},
		{"tmpfs option mlx5_0", "3,344,34624980004,-;tmpfs: Unknown parameter 'mlx5_0'\n", "", ""},
		{"tmpfs option rxe0", "3,345,34625011118,-;tmpfs: Unknown parameter 'rxe0'\n", "", ""},
		{"segfault of a program named 'rxe0: fatal'", "6,346,34630792646,-;rxe0: fatal[25165]: segfault at 0 ip 000056376642c171 sp 00007ffd670be270 error 6 in named[1171,56376642c000+1000] likely on CPU 1 (core 1, socket 0)\n", "", ""},
		{"segfault of a program named 'eth1: Link down'", "6,348,34630808584,-;eth1: Link down[25167]: segfault at 0 ip 000055890efe5171 sp 00007ffe0d79ba00 error 6 in named[1171,55890efe5000+1000] likely on CPU 1 (core 1, socket 0)\n", "", ""},
		// mm's data limit warning starts with the process name too.
		{"VmData warning of a program named 'rxe0: fatal'", "4,1,1,-;rxe0: fatal (1234): VmData 1 exceed data ulimit 0. Update limits or use boot option ignore_rlimit_data.\n", "", ""},
		// Root wrote these to /dev/kmsg: facility user.
		{"userspace line in a driver's form", "11,1,1,-;infiniband rxe0: test fault\n", "", ""},
		{"userspace line naming the netdev", "11,1,1,-;eth1: tx timeout\n", "", ""},
		{"userspace line with a facility of 0 given", "11,1,1,-;<3>infiniband rxe0: x\n", "", ""},
		// A user's text with an escaped newline cannot add a DEVICE
		// property: the kernel escapes it (\x0a) in the message.
		{"escaped newline", "3,1,1,-;tmpfs: Unknown parameter 'x\\x0a DEVICE=+infiniband:rxe0'\n", "", ""},
		// A name that only the text carries.
		{"mlx5_0 without DEVICE from another source", "3,1,1,-;mlx5_0: health recovery failed\n", "", ""},
		{"netdev named inside another message", "3,1,1,-;audit: comm=\"eth1\" exe=\"/tmp/eth1\" sig=11 res=1\n", "", ""},
	}, false)
}

// TestMatchUserspace: with TrustUserspace (RDMAD_TEST_KMSG_USERSPACE=1),
// a line written to /dev/kmsg counts as the kernel's, by the same rules.
func TestMatchUserspace(t *testing.T) {
	runMatch(t, []matchCase{
		{"driver's form", "11,1,1,-;infiniband rxe0: test fault\n", "rxe0", "err"},
		{"bare netdev", "11,1,1,-;eth1: tx timeout\n", "rxe0", "err"},
		{"a name in the text still does not count", "11,1,1,-;test: rxe0 failed\n", "", ""},
		{"below err without DEVICE", "12,1,1,-;infiniband rxe0: fatal\n", "", ""},
		{"another facility", "27,1,1,-;infiniband rxe0: test fault\n", "", ""},
	}, true)
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
		{Name: "mlx5_0", PCI: "0000:03:00.0", Netdevs: []string{"rdmad-no-such-netdev"}, Ifindexes: []int{0}, Virtual: []bool{false}},
		// The loopback device is interface 1 in every namespace, and
		// has no parent device.
		{Name: "rxe0", Netdevs: []string{"lo"}, Ifindexes: []int{1}, Virtual: []bool{true}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("DevicesOf (-want +got):\n%s", diff)
	}
}
