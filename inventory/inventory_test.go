package inventory

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rdmad/rdmad/client/apitype"
)

var update = flag.Bool("update", false, "rewrite golden files")

func TestReadFixture(t *testing.T) {
	devs, err := Reader{Root: "testdata/roce-ib"}.Read()
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.MarshalIndent(devs, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "roce-ib.golden.json")
	if *update {
		if err := os.WriteFile(golden, append(got, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), string(got)+"\n"); diff != "" {
		t.Errorf("inventory of testdata/roce-ib (-want +got):\n%s", diff)
	}
}

// TestReadFixtureFacts spells out the facts the golden file must hold, so a
// careless -update cannot bless a wrong reading.
func TestReadFixtureFacts(t *testing.T) {
	devs, err := Reader{Root: "testdata/roce-ib"}.Read()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]apitype.Device{}
	for _, d := range devs {
		byName[d.Name] = d
	}
	if len(devs) != 3 {
		t.Fatalf("got %d devices, want mlx4_0, mlx5_0, rxe0", len(devs))
	}
	mlx5 := byName["mlx5_0"]
	if mlx5.Parent != "0000:03:00.0" || mlx5.Uverbs != "/dev/infiniband/uverbs0" || mlx5.NodeType != "CA" {
		t.Errorf("mlx5_0 identity = parent %q uverbs %q type %q", mlx5.Parent, mlx5.Uverbs, mlx5.NodeType)
	}
	p1 := mlx5.Ports[0]
	wantGIDs := []apitype.GID{
		{Index: 0, GID: "fe80::ba59:9fff:fed4:e2a0", Type: "RoCE v1", Netdev: "ens1f0np0"},
		{Index: 1, GID: "fe80::ba59:9fff:fed4:e2a0", Type: "RoCE v2", Netdev: "ens1f0np0"},
		{Index: 2, GID: "::ffff:192.0.2.17", Type: "RoCE v2", Netdev: "ens1f0np0"},
	}
	if diff := cmp.Diff(wantGIDs, p1.GIDs); diff != "" {
		t.Errorf("mlx5_0/1 GIDs (-want +got):\n%s", diff)
	}
	if p1.State != "ACTIVE" || p1.PhysState != "LinkUp" || p1.Netdev != "ens1f0np0" || p1.RateGbps != 100 {
		t.Errorf("mlx5_0/1 = %+v", p1)
	}
	if _, ok := p1.Counters["port_rcv_errors"]; ok {
		t.Errorf("an unreadable counter was reported: %v", p1.Counters)
	}
	if p1.Counters["link_downed"] != 2 || p1.HWCounters["out_of_sequence"] != 7 {
		t.Errorf("counters = %v hw = %v", p1.Counters, p1.HWCounters)
	}
	if p2 := mlx5.Ports[1]; p2.State != "DOWN" || len(p2.GIDs) != 0 || p2.Netdev != "" {
		t.Errorf("mlx5_0/2 = %+v, want DOWN with no GIDs", p2)
	}
	ib := byName["mlx4_0"].Ports[0]
	if ib.Netdev != "ib0" || ib.LID != 0x1a || ib.SMLID != 1 || ib.GIDs[0].Type != "IB" {
		t.Errorf("mlx4_0/1 = %+v, want IPoIB ib0, LID 0x1a, IB GID", ib)
	}
	rxe := byName["rxe0"]
	if rxe.Parent != "" || rxe.Ports[0].Netdev != "eth0" || rxe.Ports[0].GIDs[1].GID != "::ffff:192.168.77.1" {
		t.Errorf("rxe0 = %+v", rxe)
	}
	wantPCIe := map[string]*apitype.PCIeLink{
		"mlx5_0": {Address: "0000:03:00.0", Speed: 16, Width: 16, MaxSpeed: 16, MaxWidth: 16, PathMaxSpeed: 16, PathMaxWidth: 16},
		// The x16 slot does not lower the x8 card's maximum.
		"mlx4_0": {Address: "0000:04:00.0", Speed: 8, Width: 8, MaxSpeed: 8, MaxWidth: 8, PathMaxSpeed: 8, PathMaxWidth: 8},
		"rxe0":   nil,
	}
	for name, want := range wantPCIe {
		if diff := cmp.Diff(want, byName[name].PCIe); diff != "" {
			t.Errorf("%s PCIe (-want +got):\n%s", name, diff)
		}
	}
	for _, p := range []struct {
		dev   string
		i     int
		width string
	}{{"mlx5_0", 0, "4X"}, {"mlx5_0", 1, "4X"}, {"mlx4_0", 0, "4X"}, {"rxe0", 0, "1X"}} {
		if got := byName[p.dev].Ports[p.i]; got.Width != p.width || got.NetdevSpeedMbps != 0 || got.Transitions != 0 {
			t.Errorf("%s/%d: width %q, netdev speed %d, transitions %d; want %s, 0 (no netdev speed file), 0 (the daemon counts)",
				p.dev, got.Port, got.Width, got.NetdevSpeedMbps, got.Transitions, p.width)
		}
	}
}

// TestReadPCIe reads testdata/pcie, whose devices sit on the PCIe paths of
// real servers (mkfixture.sh describes each).
func TestReadPCIe(t *testing.T) {
	devs, err := Reader{Root: "testdata/pcie"}.Read()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]apitype.Device{}
	for _, d := range devs {
		byName[d.Name] = d
	}
	tests := []struct {
		dev       string
		want      *apitype.PCIeLink
		degraded  bool
		width     string
		speedMbps int
	}{
		// A Gen5 card in a Gen4 slot is expected at Gen4: the root port
		// limits the path.
		{"mlx5_0", &apitype.PCIeLink{Address: "0000:01:00.0", Speed: 16, Width: 16, MaxSpeed: 32, MaxWidth: 16,
			PathMaxSpeed: 16, PathMaxWidth: 16, Limit: "0000:00:01.0"}, false, "4X", 400000},
		{"mlx5_1", &apitype.PCIeLink{Address: "0000:02:00.0", Speed: 16, Width: 8, MaxSpeed: 16, MaxWidth: 16,
			PathMaxSpeed: 16, PathMaxWidth: 16}, true, "4X", 200000},
		// Its netdev's link is down: speed -1 is unknown.
		{"mlx5_2", &apitype.PCIeLink{Address: "0000:03:00.0", Speed: 8, Width: 16, MaxSpeed: 16, MaxWidth: 16,
			PathMaxSpeed: 16, PathMaxWidth: 16}, true, "2X", 0},
		// Three bridges up (switch downstream port, upstream port, root
		// port): the Gen3 downstream port limits; the switch's own x8
		// upstream link is not the NIC's.
		{"mlx5_3", &apitype.PCIeLink{Address: "0000:06:00.0", Speed: 8, Width: 16, MaxSpeed: 16, MaxWidth: 16,
			PathMaxSpeed: 8, PathMaxWidth: 16, Limit: "0000:05:08.0"}, false, "4X", 100000},
		// A VF has its PF's link.
		{"mlx5_4", &apitype.PCIeLink{Address: "0000:02:00.0", Speed: 16, Width: 8, MaxSpeed: 16, MaxWidth: 16,
			PathMaxSpeed: 16, PathMaxWidth: 16}, true, "4X", 200000},
		// Software and virtual devices have none, even with a device link
		// into a PCI function.
		{"rxe0", nil, false, "4X", 400000},
		{"virt0", nil, false, "", 0},
	}
	if len(devs) != len(tests) {
		t.Errorf("got %d devices, want %d", len(devs), len(tests))
	}
	for _, tt := range tests {
		d, ok := byName[tt.dev]
		if !ok {
			t.Errorf("%s missing", tt.dev)
			continue
		}
		if diff := cmp.Diff(tt.want, d.PCIe); diff != "" {
			t.Errorf("%s PCIe (-want +got):\n%s", tt.dev, diff)
		}
		if d.PCIe != nil && d.PCIe.Degraded() != tt.degraded {
			t.Errorf("%s: Degraded() = %v, want %v", tt.dev, d.PCIe.Degraded(), tt.degraded)
		}
		if p := d.Ports[0]; p.Width != tt.width || p.NetdevSpeedMbps != tt.speedMbps {
			t.Errorf("%s/1: width %q, netdev speed %d Mb/s; want %q, %d", tt.dev, p.Width, p.NetdevSpeedMbps, tt.width, tt.speedMbps)
		}
	}
}

// TestPCIeUnreadable: a function without link attributes (conventional
// PCI, or sysfs that does not say) has no link; one whose bridges say
// nothing keeps its own maxima.
func TestPCIeUnreadable(t *testing.T) {
	root := t.TempDir()
	fn := filepath.Join(root, "sys/devices/pci0000:00/0000:00:1c.0/0000:07:00.0")
	dev := filepath.Join(root, "sys/class/infiniband/qib0")
	for _, d := range []string{fn, dev} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("../../../devices/pci0000:00/0000:00:1c.0/0000:07:00.0", filepath.Join(dev, "device")); err != nil {
		t.Fatal(err)
	}
	if l := pcieLink(dev); l != nil {
		t.Errorf("function without link files: %+v, want nil", l)
	}
	for name, v := range map[string]string{"current_link_speed": "Unknown", "current_link_width": "0",
		"max_link_speed": "8.0 GT/s PCIe", "max_link_width": "4"} {
		if err := os.WriteFile(filepath.Join(fn, name), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want := &apitype.PCIeLink{Address: "0000:07:00.0", MaxSpeed: 8, MaxWidth: 4, PathMaxSpeed: 8, PathMaxWidth: 4}
	l := pcieLink(dev)
	if diff := cmp.Diff(want, l); diff != "" {
		t.Errorf("link (-want +got):\n%s", diff)
	}
	if l != nil && l.Degraded() {
		t.Errorf("an unknown current link counts as degraded: %+v", l)
	}
}

func TestParseLink(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want float64
	}{
		{"16.0 GT/s PCIe\n", 16}, {"32.0 GT/s PCIe", 32}, {"8.0 GT/s", 8}, {"8 GT/s", 8}, {"2.5 GT/s", 2.5},
		{"5.0 GT/s PCIe", 5}, {"64.0 GT/s PCIe", 64}, {"Unknown", 0}, {"Unknown speed", 0}, {"", 0}, {"16", 0},
		{"fast GT/s", 0}, {"-8 GT/s", 0}, {"8 Gb/s", 0},
	} {
		if got := parseLinkSpeed(tt.in); got != tt.want {
			t.Errorf("parseLinkSpeed(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
	for in, want := range map[string]int{"16\n": 16, "8": 8, "x4": 4, "0": 0, "": 0, "-1": 0, "wide": 0} {
		if got := parseLinkWidth(in); got != want {
			t.Errorf("parseLinkWidth(%q) = %d, want %d", in, got, want)
		}
	}
	for in, want := range map[string]string{
		"100 Gb/sec (4X EDR)": "4X", "10 Gb/sec (1X QDR)": "1X", "400 Gb/sec (4X NDR)": "4X", "300 Gb/sec (12X EDR)": "12X",
		"2.5 Gb/sec (1X SDR)": "1X", "25 Gb/sec (1X EDR)": "1X", "100 Gb/sec": "", "Unknown": "", "": "", "10 Gb/sec (X QDR)": "",
		"10 Gb/sec ()": "", "10 Gb/sec (4x QDR)": "", "10 Gb/sec (4X)": "4X",
	} {
		if got := rateWidth(in); got != want {
			t.Errorf("rateWidth(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestReadNoRDMA(t *testing.T) {
	for _, root := range []string{"testdata/empty", t.TempDir()} {
		devs, err := Reader{Root: root}.Read()
		if err != nil || len(devs) != 0 {
			t.Errorf("Read(%s) = %v, %v; want no devices and no error", root, devs, err)
		}
	}
}

func TestParseGID(t *testing.T) {
	for in, want := range map[string]string{
		"fe80:0000:0000:0000:0002:c903:0031:7b31": "fe80::2:c903:31:7b31",
		"0000:0000:0000:0000:0000:ffff:0a00:0001": "::ffff:10.0.0.1",
		"2001:0db8:0000:0000:0000:0000:0000:0001": "2001:db8::1",
	} {
		a, ok := parseGID(in)
		if !ok || a.String() != want {
			t.Errorf("parseGID(%q) = %v, %v; want %s", in, a, ok, want)
		}
	}
	for _, bad := range []string{"", "fe80::1", "zz80:0000:0000:0000:0002:c903:0031:7b31"} {
		if _, ok := parseGID(bad); ok {
			t.Errorf("parseGID(%q) accepted", bad)
		}
	}
}
