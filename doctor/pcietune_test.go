package doctor

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A cfgCap is one capability of a configuration space fixture: at off,
// with id, and registers (offset within the capability -> 16-bit value).
type cfgCap struct {
	off  int
	id   uint16
	regs map[int]uint16
}

// cfgSpace lays out a function's configuration space as the kernel's
// sysfs config file gives it to root (4096 bytes, little endian):
// vendor, device, class (0x020000), the standard capabilities linked from
// 0x34 in the order given, and the extended ones from 0x100.
func cfgSpace(vendor, device uint16, class uint32, caps, ext []cfgCap) []byte {
	b := make([]byte, pciCfgSpaceExp)
	le := binary.LittleEndian
	le.PutUint16(b[0:], vendor)
	le.PutUint16(b[2:], device)
	le.PutUint32(b[8:], class<<8|0x01) // revision 01
	if class>>8 == 0x0604 {
		b[0x0e] = 1 // type 1 header: a bridge (switch port, root port)
	}
	if len(caps) > 0 {
		le.PutUint16(b[pciStatus:], pciStatusCapList)
		b[pciCapList] = byte(caps[0].off)
	}
	for i, c := range caps {
		b[c.off] = byte(c.id)
		if i+1 < len(caps) {
			b[c.off+1] = byte(caps[i+1].off)
		}
		for o, v := range c.regs {
			le.PutUint16(b[c.off+o:], v)
		}
	}
	for i, c := range ext {
		next := 0
		if i+1 < len(ext) {
			next = ext[i+1].off
		}
		le.PutUint32(b[c.off:], uint32(next)<<20|1<<16|uint32(c.id))
		for o, v := range c.regs {
			le.PutUint16(b[c.off+o:], v)
		}
	}
	return b
}

// connectX is a ConnectX-6 Dx PF (15b3:101d) laid out as lspci -vvv shows
// one: capabilities [60] Express Endpoint, [48] VPD, [9c] MSI-X, [c0]
// Vendor Specific, [40] Power Management; extended [100] AER, [150] ARI,
// [180] SR-IOV, [1c0] Secondary PCI Express, [230] ACS. devctl is the
// Device Control register: 0x2930 is "RlxdOrd+ ExtTag+ NoSnoop+
// MaxPayload 256 bytes, MaxReadReq 512 bytes", what many BIOSes leave.
func connectX(devctl uint16) []byte {
	return cfgSpace(0x15b3, 0x101d, 0x020000,
		[]cfgCap{{off: 0x60, id: pciCapIDExp, regs: map[int]uint16{2: 0x0002, pciExpDevCtl: devctl}},
			{off: 0x48, id: 0x03}, {off: 0x9c, id: 0x11}, {off: 0xc0, id: 0x09}, {off: 0x40, id: 0x01}},
		[]cfgCap{{off: 0x100, id: 0x0001}, {off: 0x150, id: 0x000e}, {off: 0x180, id: 0x0010}, {off: 0x1c0, id: 0x0019},
			{off: 0x230, id: pciExtCapIDACS, regs: map[int]uint16{4: 0x0000}}})
}

// switchPort is a PLX PEX 8747 downstream port (10b5:8747, a PCI bridge)
// as lspci -vvv shows one: [40] Power Management, [48] MSI, [68] Express
// Downstream Port, [a4] Subsystem; extended [100] Device Serial Number,
// [138] Power Budgeting, [148] Virtual Channel, [f24] ACS with ACSCap
// 0x7f (all seven). acsctl is the ACS Control register: 0x1d is
// "SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl-
// DirectTrans-", what the kernel sets when an IOMMU is on.
func switchPort(acsctl uint16) []byte {
	return cfgSpace(0x10b5, 0x8747, 0x060400,
		[]cfgCap{{off: 0x40, id: 0x01}, {off: 0x48, id: 0x05}, {off: 0x68, id: pciCapIDExp, regs: map[int]uint16{2: 0x0162, pciExpDevCtl: 0x2027}}, {off: 0xa4, id: 0x0d}},
		[]cfgCap{{off: 0x100, id: 0x0003}, {off: 0x138, id: 0x0004}, {off: 0x148, id: 0x0002},
			{off: 0xf24, id: pciExtCapIDACS, regs: map[int]uint16{4: 0x007f, pciACSCtrl: acsctl}}})
}

// h100 is an H100 SXM5 (10de:2330, a 3D controller).
func h100() []byte {
	return cfgSpace(0x10de, 0x2330, 0x030200, []cfgCap{{off: 0x60, id: 0x01}, {off: 0x68, id: 0x05}, {off: 0x78, id: pciCapIDExp}}, nil)
}

// gpuNode lays out the PCIe tree of an 8-GPU server's slot in sysfs: root
// port 0000:00:01.0, a switch (upstream 0000:01:00.0, downstream
// 0000:02:00.0 and 0000:02:01.0) with an H100 at 0000:03:00.0 and the
// ConnectX (mlx5_0, an InfiniBand port) at 0000:04:00.0 below it, and a
// second H100 at 0000:81:00.0 below root port 0000:80:01.0. configs
// overrides the config files (address -> bytes; nil removes one).
func gpuNode(t *testing.T, configs map[string][]byte) string {
	t.Helper()
	root := t.TempDir()
	fns := map[string]string{
		"0000:00:01.0": "pci0000:00/0000:00:01.0",
		"0000:01:00.0": "pci0000:00/0000:00:01.0/0000:01:00.0",
		"0000:02:00.0": "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0",
		"0000:02:01.0": "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0",
		"0000:03:00.0": "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0",
		"0000:04:00.0": "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0",
		"0000:80:01.0": "pci0000:80/0000:80:01.0",
		"0000:81:00.0": "pci0000:80/0000:80:01.0/0000:81:00.0",
	}
	cfg := map[string][]byte{
		"0000:00:01.0": cfgSpace(0x8086, 0x352a, 0x060400, nil, nil),
		"0000:01:00.0": switchPort(0),
		"0000:02:00.0": switchPort(0),
		"0000:02:01.0": switchPort(0),
		"0000:03:00.0": h100(),
		"0000:04:00.0": connectX(0x5930),
		"0000:80:01.0": cfgSpace(0x8086, 0x352a, 0x060400, nil, nil),
		"0000:81:00.0": h100(),
	}
	for a, b := range configs {
		cfg[a] = b
	}
	files := map[string]string{}
	for a, p := range fns {
		d := "sys/devices/" + p + "/"
		b := cfg[a]
		if len(b) >= 12 {
			files[d+"vendor"] = fmt.Sprintf("0x%04x", binary.LittleEndian.Uint16(b))
			files[d+"class"] = fmt.Sprintf("0x%02x%02x%02x", b[11], b[10], b[9])
		}
		files[d+"numa_node"] = "0"
		files[d+"local_cpulist"] = "0-31"
	}
	files["sys/devices/system/node/node0/cpulist"] = "0-31"
	ib := "sys/class/infiniband/mlx5_0/"
	files[ib+"node_type"] = "1: CA"
	files[ib+"ports/1/state"] = "4: ACTIVE"
	files[ib+"ports/1/phys_state"] = "5: LinkUp"
	files[ib+"ports/1/link_layer"] = "InfiniBand"
	files[ib+"ports/1/lid"] = "0x12"
	files[ib+"ports/1/sm_lid"] = "0x1"
	write(t, root, files)
	for a, p := range fns {
		dir := filepath.Join(root, "sys/devices", p)
		if b := cfg[a]; b != nil {
			if err := os.WriteFile(filepath.Join(dir, "config"), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		link := filepath.Join(root, "sys/bus/pci/devices", a)
		os.MkdirAll(filepath.Dir(link), 0o755)
		if err := os.Symlink("../../../devices/"+p, link); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("../../../devices/"+fns["0000:04:00.0"], filepath.Join(root, ib, "device")); err != nil {
		t.Fatal(err)
	}
	return root
}

func TestConfigSpaceDecode(t *testing.T) {
	for _, tt := range []struct {
		devctl uint16
		want   int
	}{{0x2930, 512}, {0x5930, 4096}, {0x0010, 128}, {0x1020, 256}, {0x3000, 1024}, {0x4000, 2048}} {
		c := pciConfig{addr: "0000:04:00.0", b: connectX(tt.devctl)}
		if got, err := c.maxReadReq(); err != nil || got != tt.want {
			t.Errorf("DevCtl %#04x: MaxReadReq %d, %v; want %d", tt.devctl, got, err, tt.want)
		}
	}
	c := pciConfig{addr: "0000:02:01.0", b: switchPort(0x1d)}
	ctl, has, err := c.acsControl()
	if err != nil || !has || ctl != 0x1d {
		t.Fatalf("acsControl = %#x, %v, %v; want 0x1d, true", ctl, has, err)
	}
	if got, want := acsString(ctl), "SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-"; got != want {
		t.Errorf("acsString = %q, want lspci's %q", got, want)
	}
	if _, has, err := (pciConfig{b: h100()}).acsControl(); has || err != nil {
		t.Errorf("a function without extended capabilities: has ACS %v, %v", has, err)
	}
	// What an unprivileged reader gets: the 64-byte header.
	short := pciConfig{addr: "0000:04:00.0", b: connectX(0x2930)[:64]}
	if _, err := short.maxReadReq(); err == nil || !strings.Contains(err.Error(), "needs root") {
		t.Errorf("64-byte config: %v, want an error saying it needs root", err)
	}
	// A function without extended space (conventional PCI, virtio) reads
	// 256 bytes even as root: no ACS, and no error.
	if _, has, err := (pciConfig{b: switchPort(0x1d)[:pciCfgSpaceSize]}).acsControl(); has || err != nil {
		t.Errorf("256-byte config: has ACS %v, %v; want none and no error", has, err)
	}
	if _, _, err := (pciConfig{addr: "0000:02:01.0", b: switchPort(0x1d)[:64]}).acsControl(); err == nil || !strings.Contains(err.Error(), "needs root") {
		t.Errorf("64-byte config: %v, want an error saying it needs root", err)
	}
	// A capability chain that loops ends.
	loop := connectX(0x2930)
	loop[0x40+1] = 0x48
	if _, err := (pciConfig{b: loop}).capability(0x05); err != nil {
		t.Errorf("looping chain: %v", err)
	}
}

func TestPCIeTuningChecks(t *testing.T) {
	short := connectX(0x2930)[:64]
	for _, tt := range []struct {
		name    string
		check   func(*Env) Result
		configs map[string][]byte
		files   map[string]string
		verdict string
		message string
		fix     string
	}{
		{"MaxReadReq 512", checkMaxReadReq, map[string][]byte{"0000:04:00.0": connectX(0x2930)}, nil,
			Fail, "mlx5_0 (0000:04:00.0): MaxReadReq 512 bytes, below 4096", "setpci -s 0000:04:00.0 CAP_EXP+8.w=5000:7000"},
		{"MaxReadReq 4096", checkMaxReadReq, nil, nil, OK, "mlx5_0 (0000:04:00.0): MaxReadReq 4096 bytes", ""},
		{"MaxReadReq unprivileged", checkMaxReadReq, map[string][]byte{"0000:04:00.0": short}, nil,
			Skip, "mlx5_0 (0000:04:00.0): could not run: 0000:04:00.0: configuration space truncated: sysfs gave 64 bytes", ""},

		{"ACS redirect between NIC and GPU", checkACS, map[string][]byte{"0000:02:01.0": switchPort(0x1d), "0000:02:00.0": switchPort(0x1d)}, nil,
			Fail, "mlx5_0 (0000:04:00.0) and GPU 0000:03:00.0 below 0000:01:00.0: ACS redirects peer-to-peer traffic up to the root complex (0000:02:01.0 ACSCtl: SrcValid+ TransBlk- ReqRedir+ CmpltRedir+",
			"setpci -s 0000:02:01.0 ECAP_ACS+6.w=0000; setpci -s 0000:02:00.0 ECAP_ACS+6.w=0000"},
		{"ACS source validation only", checkACS, map[string][]byte{"0000:02:01.0": switchPort(pciACSSV)}, nil,
			OK, "mlx5_0 (0000:04:00.0) and GPU 0000:03:00.0 below 0000:01:00.0: no ACS redirect", ""},
		{"ACS on the shared upstream port is not judged", checkACS, map[string][]byte{"0000:01:00.0": switchPort(0x1d)}, nil,
			OK, "no ACS redirect on the ports between them", ""},
		{"ACS unprivileged", checkACS, map[string][]byte{"0000:02:01.0": switchPort(0x1d)[:64], "0000:02:00.0": switchPort(0x1d)[:64]}, nil,
			Skip, "could not run: 0000:02:01.0: configuration space truncated", ""},
		{"GPU below another root port only", checkACS, map[string][]byte{"0000:02:01.0": switchPort(0x1d), "0000:03:00.0": cfgSpace(0x8086, 0x0b60, 0x010802, nil, nil)}, nil,
			OK, "mlx5_0 (0000:04:00.0): shares no PCIe switch with a GPU", ""},
		{"no GPU", checkACS, map[string][]byte{"0000:03:00.0": cfgSpace(0x8086, 0x0b60, 0x010802, nil, nil), "0000:81:00.0": cfgSpace(0x8086, 0x0b60, 0x010802, nil, nil)}, nil,
			Skip, "no NVIDIA GPU on PCI", ""},

		{"NUMA unknown on two nodes", checkNUMA, nil, map[string]string{"sys/devices/system/node/node1/cpulist": "32-63",
			"sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0/numa_node": "-1"},
			Warn, "mlx5_0 (0000:04:00.0): NUMA node unknown (numa_node -1) on a machine of 2 NUMA nodes", "ACPI SRAT"},
		{"NUMA known", checkNUMA, nil, map[string]string{"sys/devices/system/node/node1/cpulist": "32-63",
			"sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0/numa_node":     "1",
			"sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0/local_cpulist": "32-63"},
			OK, "mlx5_0 (0000:04:00.0): NUMA node 1 (CPUs 32-63)", ""},
		{"NUMA -1 on one node", checkNUMA, nil, map[string]string{
			"sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0/numa_node": "-1"},
			OK, "one NUMA node on this machine", ""},

		{"GPUs without peermem", checkGPUDirect, nil, map[string]string{"sys/module/nvidia/version": "550.54.15"},
			Warn, "2 NVIDIA GPU(s) (0000:03:00.0, 0000:81:00.0) but neither nvidia_peermem nor nv_peer_mem is loaded", "modprobe nvidia_peermem"},
		{"GPUs with peermem", checkGPUDirect, nil, map[string]string{"sys/module/nvidia/version": "550.54.15", "sys/module/nvidia_peermem/refcnt": "0"},
			OK, "nvidia_peermem is loaded", ""},
		{"GPUs without the driver", checkGPUDirect, nil, nil, Warn, "the NVIDIA driver is not loaded", "modprobe nvidia"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			root := gpuNode(t, tt.configs)
			write(t, root, tt.files)
			r := tt.check(&Env{SysRoot: root})
			if r.Verdict != tt.verdict || !strings.Contains(r.Message, tt.message) || !strings.Contains(r.Fix, tt.fix) {
				t.Errorf("got %+v\nwant %s, message with %q, fix with %q", r, tt.verdict, tt.message, tt.fix)
			}
		})
	}
}

// TestPCIeTuningSoftwareDevices: rxe has no PCI function, so the PCIe
// tuning checks have nothing to judge on a Soft-RoCE node.
func TestPCIeTuningSoftwareDevices(t *testing.T) {
	root := tree(t, map[string]string{"sys/class/infiniband/mlx5_0": "", "sys/class/infiniband/mlx4_0": ""})
	for _, c := range []func(*Env) Result{checkMaxReadReq, checkACS, checkNUMA, checkGPUDirect} {
		if r := c(&Env{SysRoot: root}); r.Verdict != Skip {
			t.Errorf("rxe0 only: %+v, want skip", r)
		}
	}
}

// TestACSBothPortsOfANIC: the two functions of a dual-port NIC below one
// switch port both cross it, and both are named.
func TestACSBothPortsOfANIC(t *testing.T) {
	root := gpuNode(t, map[string][]byte{"0000:02:01.0": switchPort(0x1d)})
	fn := "devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.1"
	ib := "sys/class/infiniband/mlx5_1/"
	write(t, root, map[string]string{"sys/" + fn + "/vendor": "0x15b3", "sys/" + fn + "/class": "0x020700",
		ib + "node_type": "1: CA", ib + "ports/1/state": "4: ACTIVE", ib + "ports/1/phys_state": "5: LinkUp", ib + "ports/1/link_layer": "InfiniBand"})
	if err := os.WriteFile(filepath.Join(root, "sys", fn, "config"), connectX(0x5930), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../../"+fn, filepath.Join(root, ib, "device")); err != nil {
		t.Fatal(err)
	}
	r := checkACS(&Env{SysRoot: root})
	for _, want := range []string{"mlx5_0 (0000:04:00.0) and GPU 0000:03:00.0 below 0000:01:00.0: ACS redirects", "mlx5_1 (0000:04:00.1) and GPU 0000:03:00.0 below 0000:01:00.0: ACS redirects"} {
		if r.Verdict != Fail || !strings.Contains(r.Message, want) {
			t.Errorf("got %+v\nwant fail with %q", r, want)
		}
	}
}
