package doctor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon/state"
	"golang.org/x/sys/unix"
)

const fixture = "../inventory/testdata/roce-ib"

// pcieFixture has RDMA devices on the PCIe paths of real servers
// (inventory/testdata/mkfixture.sh describes each).
const pcieFixture = "../inventory/testdata/pcie"

// tree copies the inventory's fake sysfs into a temporary root (symlinks
// kept) and writes files (path relative to the root -> content) over it.
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	err := filepath.WalkDir(fixture, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(fixture, p)
		dst := filepath.Join(root, rel)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, dst)
		case d.IsDir():
			return os.MkdirAll(dst, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	write(t, root, files)
	return root
}

func write(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(root, name)
		if body == "" {
			if err := os.RemoveAll(p); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// devRoot returns a /dev with real character devices for the fixture's
// uverbs0 and uverbs1 (the numbers of /dev/null: only the type matters).
func devRoot(t *testing.T, names ...string) string {
	t.Helper()
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "infiniband"), 0o755)
	for _, n := range names {
		if err := unix.Mknod(filepath.Join(root, "infiniband", n), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
			t.Skipf("mknod needs CAP_MKNOD, which this test lacks: %v", err)
		}
	}
	return root
}

func addrs(m map[string][]string) func(string) ([]netip.Addr, error) {
	return func(nd string) ([]netip.Addr, error) {
		ss, ok := m[nd]
		if !ok {
			return nil, errors.New("no such device")
		}
		var out []netip.Addr
		for _, s := range ss {
			out = append(out, netip.MustParseAddr(s))
		}
		return out, nil
	}
}

// peersSnap is a snapshot whose peers component is comp, with peers.
// clockPeer is an up peer whose clock rdmad measured off by offset ± err
// over n exchanges.
func clockPeer(name string, offset, err time.Duration, n int) apitype.Peer {
	p := peerAt(name, apitype.PeerUp)
	p.ClockOffset, p.ClockOffsetError, p.ClockSamples = offset, err, n
	return p
}

func peersSnap(comp apitype.Component, peers ...apitype.Peer) *apitype.Snapshot {
	s := snapWith()
	s.Components = map[string]apitype.Component{"peers": comp}
	s.Peers = apitype.Peers{Configured: len(peers), Peers: peers}
	return s
}

// daemonComponent is a component as the daemon records it
// (state.SetComponent): a disabled or unavailable one's text is its Reason,
// an error's its Error.
func daemonComponent(st, text string) apitype.Component {
	var err error
	if text != "" {
		err = errors.New(text)
	}
	var s apitype.Snapshot
	state.SetComponent(&s, "c", st, err, time.Now())
	return s.Components["c"]
}

func peerAt(name, st string) apitype.Peer {
	return apitype.Peer{Name: name, State: st, Paths: []apitype.PeerPath{{Local: "rxe0/1", State: st}}}
}

func snapWith(targets ...apitype.Target) *apitype.Snapshot {
	return &apitype.Snapshot{Version: "t", State: apitype.Running, PID: 4242,
		Policy: apitype.PolicyState{Policies: []apitype.PolicyStatus{{Name: "fabric", Mode: "enforce", Targets: targets}}}}
}

// ecnSnap is a snapshot whose policy enables PFC on priority 3 of
// ens1f0np0, whose ECN state is np and rp.
func ecnSnap(np, rp []int) *apitype.Snapshot {
	s := snapWith(apitype.Target{Kind: "qos", Object: "ens1f0np0", Desired: "trust=dscp pfc=3", Actual: "trust=dscp pfc=3", State: apitype.InSync})
	s.ECN = []apitype.NetdevECN{{Netdev: "ens1f0np0", NP: np, RP: rp}}
	return s
}

func limits(memlock string) string {
	return "Limit                     Soft Limit           Hard Limit           Units     \n" +
		"Max open files            1024                 524288               files     \n" +
		"Max locked memory         " + memlock + "            bytes     \n"
}

func timex(status int32, maxerr int64, st int) func(*unix.Timex) (int, error) {
	return func(tx *unix.Timex) (int, error) {
		tx.Status, tx.Maxerror = status, maxerr
		return st, nil
	}
}

// bump returns a Wait that adds to counter files between the two reads.
func bump(root string, files map[string]string) func(context.Context, time.Duration) error {
	return func(context.Context, time.Duration) error {
		for name, body := range files {
			if err := os.WriteFile(filepath.Join(root, name), []byte(body+"\n"), 0o644); err != nil {
				return err
			}
		}
		return nil
	}
}

const (
	mlx5p1 = "sys/class/infiniband/mlx5_0/ports/1"
	rxep1  = "sys/class/infiniband/rxe0/ports/1"
)

func TestChecks(t *testing.T) {
	okAddrs := addrs(map[string][]string{"ens1f0np0": {"192.0.2.17", "fe80::ba59:9fff:fed4:e2a0"}, "eth0": {"192.168.77.1", "fe80::5054:ff:fe12:3401"}})
	tests := []struct {
		name    string
		check   string
		env     func(t *testing.T) *Env
		verdict string
		// message and fix must contain these.
		message, fix string
	}{
		{"daemon unreachable", "daemon", func(t *testing.T) *Env {
			return &Env{DaemonErr: errors.New("rdmad is not running")}
		}, Warn, "rdmad not reachable: rdmad is not running", "systemctl start rdmad"},
		{"daemon config error", "daemon", func(t *testing.T) *Env {
			s := snapWith()
			s.Config.Error = "rdmad.toml:3: daemon.x: unknown key\nrdmad.toml:4: y\n"
			return &Env{Snapshot: s}
		}, Fail, "configuration rejected, generation 0 stays in force: rdmad.toml:3: daemon.x: unknown key\nrdmad.toml:4: y", "rdmactl reload"},
		{"daemon component error", "daemon", func(t *testing.T) *Env {
			s := snapWith()
			s.Components = map[string]apitype.Component{"api": daemonComponent(apitype.OK, ""), "metrics": daemonComponent(apitype.Error, "listen: address in use")}
			return &Env{Snapshot: s}
		}, Fail, "component metrics: listen: address in use", "journalctl -u rdmad"},
		{"daemon ok", "daemon", func(t *testing.T) *Env { return &Env{Snapshot: snapWith()} }, OK, "rdmad t is running (pid 4242", ""},
		{"health without rdmad", "health", func(t *testing.T) *Env { return &Env{DaemonErr: errors.New("down")} }, Skip, "needs rdmad's verdict", ""},
		{"health problem and unknown", "health", func(t *testing.T) *Env {
			s := snapWith()
			s.Health = apitype.Health{Status: apitype.ConditionProblem, Conditions: []apitype.Condition{
				{Type: apitype.CondKernelFault, Status: apitype.ConditionUnknown, Reason: "KernelLogUnreadable", Message: "open /dev/kmsg: EPERM"},
				{Type: apitype.CondPortFlapping, Status: apitype.ConditionProblem, Reason: "PortFlapping", Message: "mlx5_0/1 went down 4 times in 10m0s"}}}
			return &Env{Snapshot: s}
		}, Fail, "PortFlapping problem (PortFlapping): mlx5_0/1 went down 4 times in 10m0s; KernelFault unknown (KernelLogUnreadable)", "docs/HEALTH.md (PortFlapping)"},
		{"health ok", "health", func(t *testing.T) *Env {
			s := snapWith()
			s.Health = apitype.Health{Healthy: true, Status: apitype.ConditionOK, Conditions: []apitype.Condition{
				{Type: apitype.CondPortDown, Status: apitype.ConditionOK}, {Type: apitype.CondKernelFault, Status: apitype.ConditionOK}}}
			return &Env{Snapshot: s}
		}, OK, "every condition is ok (PortDown, KernelFault)", ""},

		{"devices present", "devices", func(t *testing.T) *Env { return &Env{SysRoot: fixture} }, OK, "3 RDMA device(s): mlx4_0, mlx5_0, rxe0", ""},
		{"no devices, Mellanox NIC on PCI", "devices", func(t *testing.T) *Env {
			root := t.TempDir()
			write(t, root, map[string]string{
				"sys/bus/pci/devices/0000:03:00.0/class": "0x020000", "sys/bus/pci/devices/0000:03:00.0/vendor": "0x15b3",
				"sys/bus/pci/devices/0000:00:02.0/class": "0x030000", "sys/bus/pci/devices/0000:00:02.0/vendor": "0x8086",
			})
			return &Env{SysRoot: root}
		}, Fail, "PCI has 0000:03:00.0 (Mellanox Ethernet controller, RoCE capable)", "modprobe mlx5_ib"},
		// inventory/testdata/lost: two of three ConnectX-7s have their
		// device, the third and an unbound ConnectX have none.
		{"one of the HCAs lost", "devices", func(t *testing.T) *Env { return &Env{SysRoot: "../inventory/testdata/lost"} }, Fail,
			"3 RDMA device(s): irdma0, mlx5_0, mlx5_1; but PCI function(s) of RDMA adapters have no RDMA device: 0000:3d:00.0 (0x15b3:0x1021, driver mlx5_core), 0000:4e:00.0 (0x15b3:0x101d, no driver bound)",
			"dmesg | grep -e mlx5"},
		{"no devices, no NIC", "devices", func(t *testing.T) *Env { return &Env{SysRoot: t.TempDir()} }, Fail,
			"no InfiniBand or Mellanox Ethernet NIC on PCI", "rdma link add rxe0 type rxe netdev eth0"},

		{"uverbs module missing", "uverbs", func(t *testing.T) *Env {
			return &Env{SysRoot: fixture, DevRoot: devRoot(t, "uverbs0", "uverbs1")}
		}, Fail, "mlx4_0 has no verbs device", "modprobe ib_uverbs"},
		{"uverbs node missing", "uverbs", func(t *testing.T) *Env {
			root := tree(t, map[string]string{"sys/class/infiniband/mlx4_0": ""})
			return &Env{SysRoot: root, DevRoot: devRoot(t, "uverbs0")}
		}, Fail, "rxe0: /dev/infiniband/uverbs1 is missing", "udevadm trigger"},
		{"uverbs ok", "uverbs", func(t *testing.T) *Env {
			root := tree(t, map[string]string{"sys/class/infiniband/mlx4_0": ""})
			return &Env{SysRoot: root, DevRoot: devRoot(t, "uverbs0", "uverbs1")}
		}, OK, "mlx5_0: /dev/infiniband/uverbs0; rxe0: /dev/infiniband/uverbs1", ""},

		{"spare port down", "ports", func(t *testing.T) *Env { return &Env{SysRoot: fixture} }, Warn,
			"mlx5_0/2 is DOWN, physical state Disabled", "enable it"},
		{"no port active", "ports", func(t *testing.T) *Env {
			root := tree(t, map[string]string{
				"sys/class/infiniband/mlx4_0": "", "sys/class/infiniband/mlx5_0": "",
				rxep1 + "/state": "1: DOWN", rxep1 + "/phys_state": "3: Disabled",
			})
			return &Env{SysRoot: root}
		}, Fail, "rxe0/1 is DOWN, physical state Disabled (netdev eth0)", "ip link set eth0 up"},

		{"pcie ok", "pcie", func(t *testing.T) *Env { return &Env{SysRoot: fixture} }, OK,
			"mlx4_0 (0000:04:00.0): PCIe 8 GT/s x8, as its path allows; mlx5_0 (0000:03:00.0): PCIe 16 GT/s x16, as its path allows", ""},
		{"pcie slot of an older generation", "pcie", func(t *testing.T) *Env { return &Env{SysRoot: pcieFixture} }, Fail,
			"mlx5_0 (0000:01:00.0): PCIe 16 GT/s x16, as its path allows (limited by 0000:00:01.0); mlx5_1, mlx5_4 (0000:02:00.0)", ""},
		{"pcie degraded by width", "pcie", func(t *testing.T) *Env { return &Env{SysRoot: pcieFixture} }, Fail,
			"mlx5_1, mlx5_4 (0000:02:00.0): PCIe 16 GT/s x8, its path allows 16 GT/s x16",
			"reseat the card or move it to a x16 Gen4 slot; check `lspci -vv -s 0000:02:00.0` LnkSta"},
		{"pcie degraded by speed", "pcie", func(t *testing.T) *Env { return &Env{SysRoot: pcieFixture} }, Fail,
			"mlx5_2 (0000:03:00.0): PCIe 8 GT/s x16, its path allows 16 GT/s x16; mlx5_3 (0000:06:00.0): PCIe 8 GT/s x16, as its path allows (limited by 0000:05:08.0)",
			"check `lspci -vv -s 0000:03:00.0` LnkSta"},
		{"pcie degraded bridge limit named", "pcie", func(t *testing.T) *Env {
			root := tree(t, map[string]string{"sys/devices/pci0000:00/0000:00:02.0/max_link_speed": "8.0 GT/s PCIe",
				"sys/devices/pci0000:00/0000:00:02.0/0000:03:00.0/current_link_speed": "2.5 GT/s PCIe"})
			return &Env{SysRoot: root}
		}, Fail, "mlx5_0 (0000:03:00.0): PCIe 2.5 GT/s x16, its path allows 8 GT/s x16 (limited by 0000:00:02.0)", "a x16 Gen3 slot"},
		{"pcie software devices only", "pcie", func(t *testing.T) *Env {
			return &Env{SysRoot: tree(t, map[string]string{"sys/class/infiniband/mlx4_0": "", "sys/class/infiniband/mlx5_0": ""})}
		}, Skip, "no RDMA device on PCIe", ""},
		{"pcie no devices", "pcie", func(t *testing.T) *Env { return &Env{SysRoot: t.TempDir()} }, Skip, "no RDMA devices (see the devices check)", ""},

		{"gids cover addresses", "gid", func(t *testing.T) *Env { return &Env{SysRoot: fixture, Addrs: okAddrs} }, OK,
			"mlx5_0/1: 1 routable RoCE v2 GID(s) for ens1f0np0; rxe0/1: 1 routable RoCE v2 GID(s) for eth0", ""},
		{"address without gid", "gid", func(t *testing.T) *Env {
			return &Env{SysRoot: fixture, Addrs: addrs(map[string][]string{"ens1f0np0": {"192.0.2.17", "2001:db8::5"}, "eth0": {"192.168.77.1"}})}
		}, Fail, "mlx5_0/1: no RoCE v2 GID for 2001:db8::5 on ens1f0np0", "rdma link show"},
		{"address removed", "gid", func(t *testing.T) *Env {
			root := tree(t, map[string]string{rxep1 + "/gids/1": "0000:0000:0000:0000:0000:0000:0000:0000"})
			return &Env{SysRoot: root, Addrs: addrs(map[string][]string{"ens1f0np0": {"192.0.2.17"}, "eth0": {"fe80::5054:ff:fe12:3401"}})}
		}, Fail, "rxe0/1: eth0 has no IPv4 or global IPv6 address, so no routable RoCE v2 GID", "ip addr add <address>/<prefix> dev eth0"},

		{"mtu ok", "mtu", func(t *testing.T) *Env {
			return &Env{SysRoot: tree(t, map[string]string{"sys/class/net/ens1f0np0/mtu": "9000", "sys/class/net/eth0/mtu": "1500"})}
		}, OK, "mlx5_0/1: ens1f0np0 MTU 9000, RDMA MTU 4096; rxe0/1: eth0 MTU 1500, RDMA MTU 1024", ""},
		{"mtu wasted jumbo", "mtu", func(t *testing.T) *Env {
			return &Env{SysRoot: tree(t, map[string]string{"sys/class/net/ens1f0np0/mtu": "4000", "sys/class/net/eth0/mtu": "1500"})}
		}, Warn, "mlx5_0/1: jumbo MTU 4000 on ens1f0np0 gives an RDMA MTU of only 2048; 4192 would give 4096", "ip link set ens1f0np0 mtu 4192"},
		{"mtu too small", "mtu", func(t *testing.T) *Env {
			return &Env{SysRoot: tree(t, map[string]string{"sys/class/net/ens1f0np0/mtu": "9000", "sys/class/net/eth0/mtu": "1000"})}
		}, Warn, "rxe0/1: eth0 MTU 1000 gives an RDMA MTU of only 512", "ip link set eth0 mtu 1500"},
		{"mtu against policy", "mtu", func(t *testing.T) *Env {
			return &Env{SysRoot: tree(t, map[string]string{"sys/class/net/ens1f0np0/mtu": "1500", "sys/class/net/eth0/mtu": "1500"}),
				Snapshot: snapWith(apitype.Target{Kind: "mtu", Object: "ens1f0np0", Desired: "9000", Actual: "1500", State: apitype.Drifted})}
		}, Fail, `mlx5_0/1: ens1f0np0 has MTU 1500 but policy "fabric" wants 9000`, `set mode = "enforce" or ip link set ens1f0np0 mtu 9000`},

		{"pfc unmanaged", "pfc", func(t *testing.T) *Env { return &Env{Snapshot: snapWith()} }, Skip, "no [policy.qos] pfc", ""},
		{"pfc without daemon", "pfc", func(t *testing.T) *Env { return &Env{DaemonErr: errors.New("gone")} }, Skip, "rdmad not reachable (see the daemon check)", ""},
		{"pfc off", "pfc", func(t *testing.T) *Env {
			return &Env{Snapshot: snapWith(apitype.Target{Kind: "qos", Object: "ens1f0np0", Desired: "trust=dscp pfc=3", Actual: "trust=dscp pfc=none", State: apitype.Drifted})}
		}, Fail, `ens1f0np0: PFC is none, policy "fabric" wants 3`, "observe mode"},
		{"pfc unsupported", "pfc", func(t *testing.T) *Env {
			return &Env{Snapshot: snapWith(apitype.Target{Kind: "qos", Object: "veth0", Desired: "pfc=3", Actual: "no DCB", State: apitype.Unsupported})}
		}, Warn, "veth0: PFC cannot be set: the netdev has no DCB", "ECN/DCQCN"},
		{"pfc on", "pfc", func(t *testing.T) *Env {
			return &Env{Snapshot: snapWith(apitype.Target{Kind: "qos", Object: "ens1f0np0", Desired: "trust=dscp pfc=3", Actual: "trust=dscp pfc=3", State: apitype.InSync})}
		}, OK, `ens1f0np0: PFC 3 as policy "fabric" declares`, ""},
		{"trust pcp", "dscp-trust", func(t *testing.T) *Env {
			return &Env{Snapshot: snapWith(apitype.Target{Kind: "qos", Object: "ens1f0np0", Desired: "trust=dscp pfc=3", Actual: "trust=pcp pfc=3", State: apitype.TargetError, Error: "dcb: set trust on ens1f0np0: operation not permitted"})}
		}, Fail, "ens1f0np0: setting trust failed: dcb: set trust on ens1f0np0: operation not permitted", "rdmactl policy apply"},
		{"trust drifted", "dscp-trust", func(t *testing.T) *Env {
			return &Env{Snapshot: snapWith(apitype.Target{Kind: "qos", Object: "ens1f0np0", Desired: "trust=dscp", Actual: "trust=pcp", State: apitype.Drifted})}
		}, Fail, `ens1f0np0: trust is pcp, policy "fabric" wants dscp`, ""},

		{"ecn off on the RoCE priority", "ecn", func(t *testing.T) *Env {
			return &Env{SysRoot: fixture, Snapshot: ecnSnap([]int{3}, []int{4})}
		}, Warn, `ens1f0np0: ECN off on the RoCE priority 3 (PFC on it, policy "fabric"): rp (reaction point`, "[policy.ecn] np = [3] and rp = [3]"},
		{"ecn off in observe mode", "ecn", func(t *testing.T) *Env {
			s := ecnSnap(nil, nil)
			s.Policy.Policies[0].Targets = append(s.Policy.Policies[0].Targets,
				apitype.Target{Kind: "ecn", Object: "ens1f0np0", Desired: "np=3 rp=3", Actual: "np=none rp=none", State: apitype.Drifted})
			return &Env{SysRoot: fixture, Snapshot: s}
		}, Warn, "np (notification point: no CNPs are sent for ECN-marked packets), rp (reaction point", "observe mode"},
		{"ecn marks without CNPs", "ecn", func(t *testing.T) *Env {
			root := tree(t, map[string]string{mlx5p1 + "/hw_counters/" + ecnMarked: "10", mlx5p1 + "/hw_counters/" + cnpHandled: "5"})
			return &Env{SysRoot: root, Interval: time.Second, Snapshot: ecnSnap([]int{3}, []int{3}),
				Wait: bump(root, map[string]string{mlx5p1 + "/hw_counters/" + ecnMarked: "50"})}
		}, Warn, "mlx5_0/1 (ens1f0np0): np_ecn_marked_roce_packets +40 but np_cnp_sent +0, rp_cnp_handled +0 in 1s: ECN-marked packets arrive and no CNP goes back",
			"[policy.ecn] np = [<the RoCE priority>]"},
		{"ecn fine", "ecn", func(t *testing.T) *Env {
			root := tree(t, map[string]string{mlx5p1 + "/hw_counters/" + ecnMarked: "10"})
			return &Env{SysRoot: root, Interval: time.Second, Snapshot: ecnSnap([]int{3}, []int{3, 5}),
				Wait: bump(root, map[string]string{mlx5p1 + "/hw_counters/" + ecnMarked: "50", mlx5p1 + "/hw_counters/" + cnpSent: "52"})}
		}, OK, "ens1f0np0: ECN (np and rp) on the RoCE priority 3; mlx5_0/1 (ens1f0np0): congestion control answers: np_ecn_marked_roce_packets +40, np_cnp_sent +10 in 1s", ""},
		{"ecn quiet", "ecn", func(t *testing.T) *Env {
			root := tree(t, map[string]string{mlx5p1 + "/hw_counters/" + ecnMarked: "10"})
			return &Env{SysRoot: root, Interval: time.Second, DaemonErr: errors.New("gone"), Wait: bump(root, nil)}
		}, OK, "mlx5_0/1 (ens1f0np0): no ECN-marked packets in 1s (np_cnp_sent +0)", ""},
		{"ecn nothing to judge", "ecn", func(t *testing.T) *Env { return &Env{SysRoot: fixture, DaemonErr: errors.New("gone")} }, Skip,
			"rdmad not reachable, so the ECN state is unknown; no interval to compare the CNP counters over", ""},
		{"ecn not mlx5", "ecn", func(t *testing.T) *Env {
			s := ecnSnap(nil, nil)
			s.ECN = nil
			return &Env{SysRoot: fixture, Snapshot: s}
		}, Skip, "ens1f0np0 has no ECN state in rdmad (no /sys/class/net/ens1f0np0/ecn", ""},

		{"memlock low for rdmad", "memlock", func(t *testing.T) *Env {
			proc := t.TempDir()
			write(t, proc, map[string]string{"4242/limits": limits("65536                65536"), "self/limits": limits("unlimited            unlimited")})
			return &Env{ProcRoot: proc, Snapshot: snapWith(apitype.Target{Kind: "memlock", Object: "rdmad", Desired: "64MiB", Actual: "64KiB", State: apitype.TargetError})}
		}, Fail, "rdmad (pid 4242) may lock 64KiB, less than 64MiB ([memlock] daemon)", "LimitMEMLOCK=infinity"},
		{"memlock low for the user", "memlock-user", func(t *testing.T) *Env {
			proc := t.TempDir()
			write(t, proc, map[string]string{"4242/limits": limits("unlimited            unlimited"), "self/limits": limits("65536                65536")})
			return &Env{ProcRoot: proc, Snapshot: snapWith()}
		}, Warn, "you may lock 64KiB, less than 8MiB (the kernel default)", `[memlock] users = "unlimited"`},
		{"memlock skipped without daemon", "memlock", func(t *testing.T) *Env {
			return &Env{ProcRoot: t.TempDir()}
		}, Skip, "rdmad's limit not checked: rdmad not reachable", ""},
		{"memlock-user ok without daemon", "memlock-user", func(t *testing.T) *Env {
			proc := t.TempDir()
			write(t, proc, map[string]string{"self/limits": limits("8388608              8388608")})
			return &Env{ProcRoot: proc}
		}, OK, "you may lock 8MiB", ""},

		{"clock unsynchronised", "clock", func(t *testing.T) *Env { return &Env{Adjtimex: timex(unix.STA_UNSYNC, 16000000, unix.TIME_ERROR)} }, Warn,
			"not synchronised (STA_UNSYNC)", "systemd-timesyncd"},
		{"clock error large", "clock", func(t *testing.T) *Env { return &Env{Adjtimex: timex(0, 500000, unix.TIME_OK)} }, Warn,
			"maximum error is 500 ms", "chronyd"},
		{"clock ok", "clock", func(t *testing.T) *Env { return &Env{Adjtimex: timex(0, 2000, unix.TIME_OK)} }, OK, "synchronised, maximum error 2 ms", ""},

		{"qp errors rising", "qp-errors", func(t *testing.T) *Env {
			root := tree(t, nil)
			return &Env{SysRoot: root, Interval: time.Second, Wait: bump(root, map[string]string{mlx5p1 + "/hw_counters/out_of_sequence": "12"})}
		}, Warn, "mlx5_0/1: out_of_sequence +5 in 1s", "PFC/ECN"},
		{"qp errors steady", "qp-errors", func(t *testing.T) *Env {
			root := tree(t, nil)
			return &Env{SysRoot: root, Interval: time.Second, Wait: bump(root, map[string]string{mlx5p1 + "/hw_counters/np_cnp_sent": "99"})}
		}, OK, "2 counters steady over 1s", ""},
		{"qp errors without interval", "qp-errors", func(t *testing.T) *Env { return &Env{SysRoot: fixture} }, Skip, "--interval 0", ""},
		{"link errors rising", "link-errors", func(t *testing.T) *Env {
			root := tree(t, nil)
			return &Env{SysRoot: root, Interval: 2 * time.Second, Wait: bump(root, map[string]string{mlx5p1 + "/counters/symbol_error": "40", mlx5p1 + "/counters/link_downed": "3"})}
		}, Warn, "mlx5_0/1: symbol_error +40, link_downed +1 in 2s", "cable"},
		{"link errors steady", "link-errors", func(t *testing.T) *Env {
			root := tree(t, nil)
			return &Env{SysRoot: root, Interval: time.Second, Wait: bump(root, nil)}
		}, OK, "2 counters steady over 1s", ""},
		{"interrupted", "link-errors", func(t *testing.T) *Env {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return &Env{Ctx: ctx, SysRoot: fixture, Interval: time.Hour}
		}, Skip, "second counter read: context canceled", ""},

		{"pause storm", "packet-loss", func(t *testing.T) *Env {
			return netEnv(t, mlx5Net(nil), mlx5Net(map[string]uint64{"tx_pause_storm_error_events": 2}))
		}, Fail, "ens1f0np0: PAUSE STORM: tx_pause_storm_error_events +1 in 2s: the NIC sent pause frames until its timeout and stopped sending them", "a pause storm comes from a receiver that stopped draining"},
		{"pause storm building", "packet-loss", func(t *testing.T) *Env {
			return netEnv(t, mlx5Net(nil), mlx5Net(map[string]uint64{"tx_pause_storm_warning_events": 7}))
		}, Warn, "ens1f0np0: pause storm building: tx_pause_storm_warning_events +4 in 2s", "the switch's PFC watchdog"},
		{"priority paused heavily", "packet-loss", func(t *testing.T) *Env {
			return netEnv(t, mlx5Net(nil), mlx5Net(map[string]uint64{"rx_prio3_pause": 9100, "rx_prio3_pause_duration": 1_500_000}))
		}, Warn, "ens1f0np0: heavy pausing in 2s: priority 3 paused 60% of the time by the link partner, the network is congested (rx_prio3_pause +9000, rx_prio3_pause_duration +1.2s)",
			"check PFC on the RoCE priority"},
		{"discards rising", "packet-loss", func(t *testing.T) *Env {
			return netEnv(t, mlx5Net(nil), mlx5Net(map[string]uint64{"rx_discards_phy": 12, "rx_prio3_discards": 12}))
		}, Warn, "ens1f0np0: discards rising: rx_discards_phy +12, rx_prio3_discards +12 in 2s", "the switch's buffer and ECN settings"},
		{"pausing and discards steady", "packet-loss", func(t *testing.T) *Env {
			return netEnv(t, mlx5Net(nil), mlx5Net(map[string]uint64{"rx_prio3_pause": 110, "rx_prio3_pause_duration": 320_000, "tx_pause_frames": 50}))
		}, OK, "no pause storm, heavy pausing or discards over 2s (13 counters); eth0 has no pause or discard counters (its driver offers neither", ""},
		{"packet-loss without a counter reader", "packet-loss", func(t *testing.T) *Env {
			return &Env{SysRoot: fixture, Interval: time.Second, Wait: bump(fixture, nil)}
		}, Skip, "read on the host itself, not for a fixture tree", ""},

		{"peers without daemon", "peers", func(t *testing.T) *Env { return &Env{DaemonErr: errors.New("gone")} }, Skip, "rdmad not reachable", ""},
		{"peers not reported", "peers", func(t *testing.T) *Env { return &Env{Snapshot: snapWith()} }, Skip, "rdmad reports no peer probes", ""},
		{"peers disabled", "peers", func(t *testing.T) *Env {
			return &Env{Snapshot: peersSnap(daemonComponent(apitype.Disabled, "no [[peer]], [probe] peers_file or [probe] allow configured: nobody to probe or answer"))}
		}, Skip, "peer probes are disabled: no [[peer]], [probe] peers_file or [probe] allow configured: nobody to probe or answer", ""},
		{"peers switched off", "peers", func(t *testing.T) *Env { return &Env{Snapshot: peersSnap(apitype.Component{State: apitype.Disabled})} }, Skip,
			"peer probes are disabled: [probe] peers = false", ""},
		{"peers without verbs", "peers", func(t *testing.T) *Env {
			return &Env{Snapshot: peersSnap(daemonComponent(apitype.Unavailable, "verbs unavailable: no RDMA devices found"))}
		}, Skip, "peer probes are unavailable: verbs unavailable: no RDMA devices found", ""},
		{"peers unavailable without a reason", "peers", func(t *testing.T) *Env {
			return &Env{Snapshot: peersSnap(daemonComponent(apitype.Unavailable, ""))}
		}, Skip, "peer probes are unavailable: rdmad did not say why (see rdmactl status)", ""},
		{"peers in error", "peers", func(t *testing.T) *Env {
			return &Env{Snapshot: peersSnap(daemonComponent(apitype.Error, "peers: create probe QP on rxe0/1: cannot allocate memory"))}
		}, Skip, "peer probes are in error (see the daemon check): peers: create probe QP on rxe0/1: cannot allocate memory", ""},
		{"peers not probed yet", "peers", func(t *testing.T) *Env {
			return &Env{Snapshot: peersSnap(apitype.Component{State: apitype.OK}, peerAt("192.0.2.1", apitype.PeerUnknown))}
		}, Skip, "none of the 1 peers has been probed yet", ""},
		{"peers all up", "peers", func(t *testing.T) *Env {
			return &Env{Snapshot: peersSnap(apitype.Component{State: apitype.OK}, peerAt("192.0.2.1", apitype.PeerUp), peerAt("192.0.2.2", apitype.PeerUp), peerAt("192.0.2.3", apitype.PeerUnknown))}
		}, OK, "all 2 probed peers are up (1 not probed yet)", ""},
		{"peers degraded", "peers", func(t *testing.T) *Env {
			p := peerAt("192.0.2.2", apitype.PeerDegraded)
			p.Paths = []apitype.PeerPath{{Local: "rxe0/1", State: apitype.PeerDegraded, LossPct: 3, Samples: 100, RTTP99: 80 * time.Microsecond}}
			return &Env{Snapshot: peersSnap(apitype.Component{State: apitype.OK}, peerAt("192.0.2.1", apitype.PeerUp), p)}
		}, Warn, "1 of 2 peers degraded (loss or RTT p99 over [probe] loss_threshold or rtt_threshold): 192.0.2.2 (from rxe0/1: loss 3.0% of 100, RTT p99 80µs)", "PFC/ECN"},
		{"peers down", "peers", func(t *testing.T) *Env {
			a := peerAt("192.0.2.1", apitype.PeerDown)
			a.Reason = "control endpoint 192.0.2.1:18516 does not answer"
			s := peersSnap(apitype.Component{State: apitype.OK}, a, peerAt("192.0.2.2", apitype.PeerUp), peerAt("192.0.2.3", apitype.PeerDegraded))
			s.Peers.ControlPort = 18516
			return &Env{Snapshot: s}
		}, Fail, "1 of 3 peers down: 192.0.2.1 (control endpoint 192.0.2.1:18516 does not answer)", "UDP 4791 (RoCE v2) and UDP 18516 (the control endpoint, [probe] port)"},
		{"peers down, named up to three", "peers", func(t *testing.T) *Env {
			var ps []apitype.Peer
			for i := 1; i <= 5; i++ {
				ps = append(ps, peerAt(fmt.Sprintf("192.0.2.%d", i), apitype.PeerDown))
			}
			return &Env{Snapshot: peersSnap(apitype.Component{State: apitype.OK}, ps...)}
		}, Fail, "5 of 5 peers down: 192.0.2.1, 192.0.2.2, 192.0.2.3, and 2 more", "MTU"},
		{"peers down, local fault", "peers", func(t *testing.T) *Env {
			s := peersSnap(apitype.Component{State: apitype.OK}, peerAt("192.0.2.1", apitype.PeerDown), peerAt("192.0.2.2", apitype.PeerDown))
			s.Peers.Ports = []apitype.PeerPort{{Key: "rxe0/1", LocalFault: "all 2 peers are down from rxe0/1: suspect this port"}}
			return &Env{Snapshot: s}
		}, Fail, "LOCAL FAULT? all 2 peers are down from rxe0/1", "first check this node's rxe0/1"},
		{"peers down, group fault", "peers", func(t *testing.T) *Env {
			s := peersSnap(apitype.Component{State: apitype.OK}, peerAt("192.0.2.1", apitype.PeerDown), peerAt("192.0.2.2", apitype.PeerDown), peerAt("192.0.2.3", apitype.PeerUp))
			s.Peers.GroupFaults = []apitype.GroupFault{{Group: "tor-a", Reason: "all 2 peers of group tor-a are down"}}
			return &Env{Snapshot: s}
		}, Fail, "GROUP FAULT? all 2 peers of group tor-a are down", "switch and uplink of group tor-a"},

		{"fleet without daemon", "fleet", func(t *testing.T) *Env { return &Env{DaemonErr: errors.New("gone")} }, Skip, "rdmad not reachable", ""},
		{"fleet without peer probes", "fleet", func(t *testing.T) *Env { return &Env{Snapshot: peersSnap(apitype.Component{State: apitype.Disabled})} }, Skip,
			"no peer probes", ""},
		{"fleet of old peers", "fleet", func(t *testing.T) *Env {
			p := fpPeer("192.0.2.1", nil)
			p.Fingerprint, p.FingerprintUnknown, p.WireVersion = nil, true, 1
			return &Env{Snapshot: peersSnap(apitype.Component{State: apitype.OK}, p)}
		}, Skip, "no peer has sent its fingerprint yet (1 peers run an rdmad without fingerprints", ""},
		{"fleet agrees", "fleet", func(t *testing.T) *Env {
			old := fpPeer("192.0.2.2", nil)
			old.Fingerprint, old.FingerprintUnknown, old.WireVersion = nil, true, 2
			return &Env{Snapshot: peersSnap(apitype.Component{State: apitype.OK}, fpPeer("192.0.2.1", nil), old)}
		}, OK, "1 peers agree with this node's MTU, link layer, RoCE and QoS settings (1 peers run an rdmad without fingerprints", ""},
		{"fleet MTU mismatch", "fleet", func(t *testing.T) *Env {
			return &Env{Snapshot: peersSnap(apitype.Component{State: apitype.OK}, fpPeer("192.0.2.1", nil), fpPeer("192.0.2.2", []apitype.Mismatch{
				{Field: "mtu", Local: "1500", Peer: "4200", Severity: apitype.SeverityMust, LocalPort: "rxe0/1", PeerPort: "rxe0/1"},
				{Field: "firmware", Local: "1.0", Peer: "1.1", Severity: apitype.SeverityInfo, LocalPort: "rxe0/1", PeerPort: "rxe0/1"}}))}
		}, Warn, "MISMATCH 192.0.2.2: mtu 1500 here (rxe0/1) but 4200 on 192.0.2.2 (rxe0/1); versions differ (informational): 192.0.2.2: firmware 1.0", "[[policy]] mtu"},
		{"fleet firmware only", "fleet", func(t *testing.T) *Env {
			return &Env{Snapshot: peersSnap(apitype.Component{State: apitype.OK}, fpPeer("192.0.2.2", []apitype.Mismatch{
				{Field: "driver", Local: "mlx5_core", Peer: "mlx5_core 24.01", Severity: apitype.SeverityInfo, LocalPort: "mlx5_0/1", PeerPort: "mlx5_0/1"}}))}
		}, OK, "versions differ (informational): 192.0.2.2: driver mlx5_core here (mlx5_0/1) but mlx5_core 24.01 on 192.0.2.2", "upgrade firmware, driver, kernel and rdmad"},
		{"fleet PFC mismatch", "fleet", func(t *testing.T) *Env {
			return &Env{Snapshot: peersSnap(apitype.Component{State: apitype.OK}, fpPeer("192.0.2.3", []apitype.Mismatch{
				{Field: "pfc", Local: "3", Peer: "none", Severity: apitype.SeverityMust, LocalPort: "mlx5_0/1", PeerPort: "mlx5_1/1"}}))}
		}, Warn, "MISMATCH 192.0.2.3: pfc 3 here (mlx5_0/1) but none on 192.0.2.3 (mlx5_1/1)", "[[policy]] qos trust and pfc"},
		{"fleet rate mismatch", "fleet", func(t *testing.T) *Env {
			return &Env{Snapshot: peersSnap(apitype.Component{State: apitype.OK}, fpPeer("192.0.2.4", []apitype.Mismatch{
				{Field: "rate", Local: "200 Gb/s", Peer: "100 Gb/s", Severity: apitype.SeverityWarn, LocalPort: "mlx5_0/1", PeerPort: "mlx5_0/1"}}))}
		}, Warn, "MISMATCH 192.0.2.4: rate 200 Gb/s here (mlx5_0/1) but 100 Gb/s on 192.0.2.4", "min_rate makes rdmactl check report it as LinkDegraded"},
		{"clock-offset without daemon", "clock-offset", func(t *testing.T) *Env { return &Env{DaemonErr: errors.New("gone")} }, Skip, "rdmad not reachable", ""},
		{"clock-offset without peer probes", "clock-offset", func(t *testing.T) *Env {
			return &Env{Snapshot: peersSnap(apitype.Component{State: apitype.Disabled})}
		}, Skip, "no peer probes", ""},
		{"clock-offset of old peers", "clock-offset", func(t *testing.T) *Env {
			return &Env{Snapshot: peersSnap(apitype.Component{State: apitype.OK}, peerAt("192.0.2.1", apitype.PeerUp))}
		}, Skip, "no peer has sent clock timestamps yet", ""},
		{"clock-offset one message is no verdict", "clock-offset", func(t *testing.T) *Env {
			return &Env{Snapshot: peersSnap(apitype.Component{State: apitype.OK}, clockPeer("192.0.2.1", time.Hour, time.Microsecond, 1))}
		}, Skip, "1 peers have sent one clock sample so far", ""},
		{"clock-offset in step", "clock-offset", func(t *testing.T) *Env {
			return &Env{Snapshot: peersSnap(apitype.Component{State: apitype.OK}, clockPeer("192.0.2.1", 3*time.Millisecond, 100*time.Microsecond, 8),
				clockPeer("192.0.2.2", -90*time.Millisecond, 50*time.Microsecond, 3))}
		}, OK, "2 peers' clocks are within 100ms of this node's (the largest offset 90ms)", ""},
		{"clock-offset within the error bound", "clock-offset", func(t *testing.T) *Env {
			// 150 ms ± 60 ms may be 90 ms: not judged off.
			return &Env{Snapshot: peersSnap(apitype.Component{State: apitype.OK}, clockPeer("192.0.2.1", 150*time.Millisecond, 60*time.Millisecond, 4))}
		}, OK, "1 peers' clocks are within 100ms", ""},
		{"clock-offset peer ahead", "clock-offset", func(t *testing.T) *Env {
			return &Env{Snapshot: peersSnap(apitype.Component{State: apitype.OK}, clockPeer("192.0.2.1", 3*time.Second, 200*time.Microsecond, 2),
				clockPeer("192.0.2.2", time.Millisecond, 100*time.Microsecond, 8), clockPeer("192.0.2.3", 0, 100*time.Microsecond, 8))}
		}, Warn, "192.0.2.1's clock is 3s ahead of this node's (± 200µs)", "NTP"},
		{"clock-offset this node off", "clock-offset", func(t *testing.T) *Env {
			return &Env{Snapshot: peersSnap(apitype.Component{State: apitype.OK}, clockPeer("192.0.2.1", -2*time.Second, 200*time.Microsecond, 2),
				clockPeer("192.0.2.2", -2*time.Second, 100*time.Microsecond, 8), clockPeer("192.0.2.3", 0, 100*time.Microsecond, 8))}
		}, Warn, "192.0.2.1's clock is 2s behind this node's (± 200µs); 192.0.2.2's clock is 2s behind this node's (± 100µs); 2 of the 3 peers judged disagree with this node the same way: suspect this node's clock first", "chronyc tracking"},
		{"firmware older than the policy's", "firmware", func(t *testing.T) *Env {
			return &Env{Snapshot: snapWith(apitype.Target{Kind: "firmware", Object: "mlx5_0", Desired: ">=22.39.1002", Actual: "22.38.1900", State: apitype.Drifted})}
		}, Warn, `mlx5_0: firmware 22.38.1900, policy "fabric" expects >=22.39.1002`, "vendor's tool"},

		// The checks of issue #39 by their IDs; pcietune_test.go and
		// devnodes_test.go have the rest of their cases.
		{"umad node missing", "umad", func(t *testing.T) *Env {
			return &Env{SysRoot: tree(t, madFiles), DevRoot: devRoot(t, "issm1")}
		}, Fail, "mlx4_0/1: /dev/infiniband/umad1 is missing", "udevadm trigger"},
		{"rdma_ucm not loaded", "rdma-cm", func(t *testing.T) *Env {
			return &Env{SysRoot: fixture, DevRoot: devRoot(t)}
		}, Fail, "no rdma_cm device", "modprobe rdma_ucm"},
		{"InfiniBand port without a subnet manager", "sm", func(t *testing.T) *Env { return &Env{SysRoot: tree(t, noSM)} },
			Fail, "mlx4_0/1 (ib0): no subnet manager", "opensm"},
		{"MaxReadReq 512", "pcie-mrr", func(t *testing.T) *Env {
			return &Env{SysRoot: gpuNode(t, map[string][]byte{"0000:04:00.0": connectX(0x2930)})}
		}, Fail, "MaxReadReq 512 bytes", "CAP_EXP+8.w=5000:7000"},
		{"ACS on between NIC and GPU", "pcie-acs", func(t *testing.T) *Env {
			return &Env{SysRoot: gpuNode(t, map[string][]byte{"0000:02:01.0": switchPort(0x1d)})}
		}, Fail, "ACS redirects peer-to-peer traffic", "ECAP_ACS+6.w=0000"},
		{"NUMA node unknown", "numa", func(t *testing.T) *Env {
			root := gpuNode(t, nil)
			write(t, root, map[string]string{"sys/devices/system/node/node1/cpulist": "32-63",
				"sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0/numa_node": "-1"})
			return &Env{SysRoot: root}
		}, Warn, "NUMA node unknown", "numactl"},
		{"GPUs without nvidia_peermem", "gpudirect", func(t *testing.T) *Env {
			root := gpuNode(t, nil)
			write(t, root, map[string]string{"sys/module/nvidia/version": "550.54.15"})
			return &Env{SysRoot: root}
		}, Warn, "neither nvidia_peermem nor nv_peer_mem is loaded", "modprobe nvidia_peermem"},
	}
	byID := map[string]Check{}
	all := append(append([]Check(nil), Checks...), CallerChecks...)
	for _, c := range all {
		byID[c.ID] = c
	}
	// Every check that can find a problem has a case that finds one.
	failing := map[string]bool{}
	for _, tt := range tests {
		if tt.verdict == Warn || tt.verdict == Fail {
			failing[tt.check] = true
		}
	}
	for _, c := range all {
		if !failing[c.ID] {
			t.Errorf("check %s has no warn or fail case in this table", c.ID)
		}
	}
	for _, tt := range tests {
		t.Run(tt.check+"/"+tt.name, func(t *testing.T) {
			c, ok := byID[tt.check]
			if !ok {
				t.Fatalf("no check %q", tt.check)
			}
			r := c.Run(tt.env(t))
			if r.Verdict != tt.verdict || !strings.Contains(r.Message, tt.message) || !strings.Contains(r.Fix, tt.fix) {
				t.Errorf("%s: got %s %q (fix %q)\nwant %s, message containing %q, fix containing %q", tt.check, r.Verdict, r.Message, r.Fix, tt.verdict, tt.message, tt.fix)
			}
			if (r.Verdict == Warn || r.Verdict == Fail) && r.Fix == "" {
				t.Errorf("%s: verdict %s without a fix", tt.check, r.Verdict)
			}
		})
	}
}

// TestEveryCheckHasIDAndTitle checks the table's shape: unique IDs, titles
// and a Run for every check.
func TestEveryCheckHasIDAndTitle(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range Checks {
		if c.ID == "" || c.Title == "" || c.Run == nil || seen[c.ID] {
			t.Errorf("check %+v: needs a unique ID, a title and Run", c)
		}
		seen[c.ID] = true
	}
}

func TestWorst(t *testing.T) {
	tests := []struct {
		verdicts []string
		want     string
	}{
		{nil, Skip},
		{[]string{Skip, OK}, OK},
		{[]string{OK, Warn, Skip}, Warn},
		{[]string{Fail, Warn, OK}, Fail},
	}
	for _, tt := range tests {
		var rs []apitype.DoctorCheck
		for _, v := range tt.verdicts {
			rs = append(rs, apitype.DoctorCheck{Verdict: v})
		}
		if got := Worst(rs); got != tt.want {
			t.Errorf("Worst(%v) = %s, want %s", tt.verdicts, got, tt.want)
		}
	}
}

// TestRunOnFixture runs the whole table on the fixture and checks that the
// counter interval is paid once, not once per rising check.
func TestRunOnFixture(t *testing.T) {
	waits := 0
	e := &Env{SysRoot: fixture, DevRoot: t.TempDir(), ProcRoot: t.TempDir(), DaemonErr: errors.New("not running"), Interval: time.Second,
		Wait:     func(context.Context, time.Duration) error { waits++; return nil },
		Adjtimex: timex(0, 1000, unix.TIME_OK), Addrs: addrs(nil)}
	rs := append(Run(e, Checks), Run(e, CallerChecks)...)
	var ids []string
	for _, r := range rs {
		ids = append(ids, r.ID)
	}
	want := []string{"daemon", "health", "devices", "uverbs", "umad", "rdma-cm", "ports", "sm", "pcie", "pcie-mrr", "pcie-acs", "numa", "gpudirect", "firmware", "gid", "mtu", "pfc", "dscp-trust", "ecn", "memlock", "qp-errors", "link-errors", "packet-loss", "peers", "fleet", "clock-offset", "memlock-user", "clock"}
	if diff := cmp.Diff(want, ids); diff != "" {
		t.Errorf("report order (-want +got):\n%s", diff)
	}
	if waits != 1 {
		t.Errorf("waited %d times for the counter interval, want 1", waits)
	}
	if got := Worst(rs); got != Fail {
		t.Errorf("worst verdict on the fixture with no /dev nodes = %s, want fail", got)
	}
}

// fpPeer is an up peer that sent its fingerprint, with mismatches ms.
func fpPeer(name string, ms []apitype.Mismatch) apitype.Peer {
	p := peerAt(name, apitype.PeerUp)
	p.WireVersion = 2
	p.Fingerprint = &apitype.Fingerprint{Ports: []apitype.FingerprintPort{{Key: "rxe0/1", MTU: 1500}}}
	p.Mismatches = ms
	return p
}
