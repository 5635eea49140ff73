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
