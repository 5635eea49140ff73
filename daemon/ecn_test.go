package daemon

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon/state"
	"github.com/rdmad/rdmad/inventory"
)

// TestRefreshECN: the inventory refresh fills the snapshot's ECN state for
// the RoCE netdevs that have mlx5's ecn files (ens1f0np0 here), and leaves
// out those without (eth0, Soft-RoCE's netdev) and non-RoCE ones (ib0).
func TestRefreshECN(t *testing.T) {
	root := t.TempDir()
	copyTree(t, "../inventory/testdata/roce-ib", root)
	for _, pt := range []string{"roce_np", "roce_rp"} {
		dir := filepath.Join(root, "sys/class/net/ens1f0np0/ecn", pt, "enable")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for p := 0; p < 8; p++ {
			v := "0\n"
			if p == 3 || (pt == "roce_np" && p == 5) {
				v = "1\n"
			}
			os.WriteFile(filepath.Join(dir, fmt.Sprint(p)), []byte(v), 0o644)
		}
	}
	d := &Daemon{inv: inventory.Reader{Root: root}, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		store: state.NewStore(apitype.Snapshot{State: apitype.Running})}
	d.refresh("test")
	want := []apitype.NetdevECN{{Netdev: "ens1f0np0", NP: []int{3, 5}, RP: []int{3}}}
	if diff := cmp.Diff(want, d.store.Load().ECN); diff != "" {
		t.Errorf("snapshot ECN (-want +got):\n%s", diff)
	}
	// The driver resets it: the next refresh shows it.
	os.WriteFile(filepath.Join(root, "sys/class/net/ens1f0np0/ecn/roce_np/enable/5"), []byte("0\n"), 0o644)
	d.refresh("test")
	if got := d.store.Load().ECN; len(got) != 1 || !cmp.Equal(got[0].NP, []int{3}) {
		t.Errorf("after np 5 went off: %+v", got)
	}
	// No ecn files anywhere: [] (not null).
	os.RemoveAll(filepath.Join(root, "sys/class/net/ens1f0np0/ecn"))
	d.refresh("test")
	if got := d.store.Load().ECN; got == nil || len(got) != 0 {
		t.Errorf("without ecn files: %#v, want []", got)
	}
}
