//go:build e2e

package e2e

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestServiceActive checks that the installed rdmad.service is running
// under systemd: active (for Type=notify, after READY=1) with a main PID.
func TestServiceActive(t *testing.T) {
	requireVM(t)
	u := waitActive(t)
	if u.SubState != "running" || u.MainPID == 0 {
		t.Errorf("rdmad.service: want SubState running with a MainPID, got %+v", u)
	}
	t.Logf("rdmad.service: %+v", u)
	enabled, err := run("systemctl", "is-enabled", "rdmad.service")
	if got := strings.TrimSpace(enabled); got != "enabled" {
		t.Errorf("systemctl is-enabled rdmad.service = %q (%v), want enabled", got, err)
	}
}

// TestStatusRxe checks that `rdmactl status --json` shows rxe0 as the kernel
// has it: port 1 ACTIVE over eth0, and the RoCE v2 GIDs of sysfs, among them
// the node's IPv4-mapped address.
func TestStatusRxe(t *testing.T) {
	requireVM(t)
	waitActive(t)
	// Earlier tests remove and re-add rxe0; the parts that use it (pool,
	// probes, peer probes) come back within seconds, not at once.
	var s Status
	waitFor(t, 30*time.Second, "every component ok and rdmad running", func() (bool, string) {
		s = mustStatus(t)
		if s.State != "running" {
			return false, fmt.Sprintf("state %q; components %+v", s.State, s.Components)
		}
		for name, c := range s.Components {
			// disabled is a configuration choice (e.g. no peers), not a fault.
			if c.State != "ok" && c.State != "disabled" {
				return false, fmt.Sprintf("component %s: state %q, error %q; want ok (or disabled)", name, c.State, c.Error)
			}
		}
		return true, ""
	})
	d, ok := s.device("rxe0")
	if !ok {
		t.Fatalf("status lists no rxe0; devices: %+v", s.Devices)
	}
	p, ok := d.port(1)
	if !ok {
		t.Fatalf("rxe0 has no port 1; ports: %+v", d.Ports)
	}
	want := Port{Port: 1, State: "ACTIVE", PhysState: "LinkUp", LinkLayer: "Ethernet", Netdev: "eth0"}
	got := p
	got.GIDs = nil
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("rxe0 port 1 (-want +got):\n%s", diff)
	}
	if guid := sysfsString(t, "/sys/class/infiniband/rxe0/node_guid"); d.NodeGUID != guid {
		t.Errorf("rxe0 node_guid = %q, want %q (sysfs)", d.NodeGUID, guid)
	}

	// The reported GIDs must be what the kernel has at those indices ...
	kernel := sysfsGIDs(t, "rxe0", 1)
	byIndex := map[int]GID{}
	for _, g := range kernel {
		byIndex[g.Index] = g
	}
	for _, g := range p.GIDs {
		kg, ok := byIndex[g.Index]
		if !ok {
			t.Errorf("status GID %+v: index %d is empty in sysfs", g, g.Index)
			continue
		}
		if diff := cmp.Diff(kg, normalizeGID(t, g)); diff != "" {
			t.Errorf("GID index %d (-sysfs +status):\n%s", g.Index, diff)
		}
	}
	// ... and include every RoCE v2 GID of the kernel, the node's
	// IPv4-mapped address among them.
	if diff := cmp.Diff(roceV2(kernel), roceV2(normalizeGIDs(t, p.GIDs))); diff != "" {
		t.Errorf("RoCE v2 GIDs of rxe0/1 (-sysfs +status):\n%s", diff)
	}
	mapped := netip.AddrFrom16(netip.MustParseAddr(nodeAddr(t)).As16()).String()
	found := false
	for _, g := range p.GIDs {
		if g.Type == "RoCE v2" && normalizeGID(t, g).GID == mapped && g.Netdev == "eth0" {
			found = true
		}
	}
	if !found {
		t.Errorf("no RoCE v2 GID %s on eth0 in rxe0/1; GIDs: %+v", mapped, p.GIDs)
	}
}

// TestStatusFollowsRdmaLink removes and re-creates rxe0 with rdma(8) and
// checks that the status follows within seconds, from kernel events, with
// no restart of rdmad.
func TestStatusFollowsRdmaLink(t *testing.T) {
	requireVM(t)
	before := waitActive(t)
	t.Cleanup(func() {
		// Leave rxe0 for the next test whatever happened here.
		if _, err := os.Stat("/sys/class/infiniband/rxe0"); err != nil {
			if _, err := run("rdma", "link", "add", "rxe0", "type", "rxe", "netdev", "eth0"); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
	})
	if _, ok := mustStatus(t).device("rxe0"); !ok {
		t.Fatal("status lists no rxe0 before the test")
	}

	// Under TCG a few seconds of event handling is already slow; the 5 min
	// resync cannot be what makes this pass. Polling goes on past the limit
	// so a failure says whether rdmad was slow or never noticed.
	const follow, patience = 10 * time.Second, 60 * time.Second
	mustRun(t, "rdma", "link", "del", "rxe0")
	took := waitFor(t, patience, "rxe0 gone from status", func() (bool, string) {
		s, err := status()
		if err != nil {
			return false, err.Error()
		}
		_, ok := s.device("rxe0")
		return !ok, fmt.Sprintf("devices %v", names(s))
	})
	if took > follow {
		t.Errorf("rdma link del rxe0: status followed after %v, want within %v (kernel events, not the resync)", took, follow)
	}

	mustRun(t, "rdma", "link", "add", "rxe0", "type", "rxe", "netdev", "eth0")
	took = waitFor(t, patience, "rxe0 back in status, port 1 ACTIVE with GIDs", func() (bool, string) {
		s, err := status()
		if err != nil {
			return false, err.Error()
		}
		d, ok := s.device("rxe0")
		if !ok {
			return false, fmt.Sprintf("devices %v", names(s))
		}
		p, ok := d.port(1)
		if !ok || p.State != "ACTIVE" || len(roceV2(p.GIDs)) == 0 {
			return false, fmt.Sprintf("rxe0 ports %+v", d.Ports)
		}
		return true, ""
	})
	if took > follow {
		t.Errorf("rdma link add rxe0: status followed after %v, want within %v (kernel events, not the resync)", took, follow)
	}

	after := showUnit(t)
	if after.MainPID != before.MainPID || after.NRestarts != before.NRestarts {
		t.Errorf("rdmad restarted while following rdma link del/add: before %+v, after %+v", before, after)
	}
}

// TestRestartAfterKill kills rdmad with SIGKILL and checks that systemd
// (Restart=on-failure) brings it back: a new main PID, active, answering.
func TestRestartAfterKill(t *testing.T) {
	requireVM(t)
	before := waitActive(t)
	if err := syscall.Kill(before.MainPID, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 rdmad (pid %d): %v", before.MainPID, err)
	}
	var after unit
	waitFor(t, 60*time.Second, "rdmad restarted by systemd", func() (bool, string) {
		after = showUnit(t)
		ok := after.ActiveState == "active" && after.MainPID != 0 && after.MainPID != before.MainPID
		return ok, fmt.Sprintf("%+v", after)
	})
	if after.NRestarts != before.NRestarts+1 {
		t.Errorf("NRestarts = %d, want %d (one restart)", after.NRestarts, before.NRestarts+1)
	}
	waitFor(t, 30*time.Second, "restarted rdmad lists rxe0", func() (bool, string) {
		s, err := status()
		if err != nil {
			return false, err.Error()
		}
		_, ok := s.device("rxe0")
		return ok, fmt.Sprintf("devices %v", names(s))
	})
}

func names(s Status) []string {
	var n []string
	for _, d := range s.Devices {
		n = append(n, d.Name)
	}
	return n
}

func sysfsString(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// sysfsGIDs reads the valid entries of a port's GID table, normalised like
// normalizeGID. It reads files directly: under TCG a process per entry of
// the 1024-entry table would take minutes.
func sysfsGIDs(t *testing.T, dev string, port int) []GID {
	t.Helper()
	dir := fmt.Sprintf("/sys/class/infiniband/%s/ports/%d", dev, port)
	entries, err := os.ReadDir(filepath.Join(dir, "gids"))
	if err != nil {
		t.Fatal(err)
	}
	var gids []GID
	for _, e := range entries {
		i, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(dir, "gids", e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		a, err := netip.ParseAddr(strings.TrimSpace(string(raw)))
		if err != nil {
			t.Fatalf("%s/gids/%d: %v", dir, i, err)
		}
		if a.IsUnspecified() {
			continue
		}
		// An entry can vanish between the two reads (EINVAL): skip it.
		typ, err := os.ReadFile(filepath.Join(dir, "gid_attrs", "types", e.Name()))
		if err != nil {
			continue
		}
		ndev, _ := os.ReadFile(filepath.Join(dir, "gid_attrs", "ndevs", e.Name()))
		gids = append(gids, GID{Index: i, GID: a.String(), Type: strings.TrimSpace(string(typ)), Netdev: strings.TrimSpace(string(ndev))})
	}
	sort.Slice(gids, func(i, j int) bool { return gids[i].Index < gids[j].Index })
	return gids
}

// normalizeGID rewrites g.GID in the canonical IPv6 text form, so
// "0000:...:ffff:c0a8:4d01" and "::ffff:192.168.77.1" compare equal.
func normalizeGID(t *testing.T, g GID) GID {
	t.Helper()
	a, err := netip.ParseAddr(g.GID)
	if err != nil {
		t.Errorf("GID %+v: %v", g, err)
		return g
	}
	g.GID = netip.AddrFrom16(a.As16()).String()
	return g
}

func normalizeGIDs(t *testing.T, gids []GID) []GID {
	t.Helper()
	out := make([]GID, 0, len(gids))
	for _, g := range gids {
		out = append(out, normalizeGID(t, g))
	}
	return out
}

// roceV2 returns the RoCE v2 entries of gids, sorted by index.
func roceV2(gids []GID) []GID {
	var v2 []GID
	for _, g := range gids {
		if g.Type == "RoCE v2" {
			v2 = append(v2, g)
		}
	}
	sort.Slice(v2, func(i, j int) bool { return v2[i].Index < v2[j].Index })
	return v2
}
