package config

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rdmad/rdmad/internal/size"
	"github.com/rdmad/rdmad/policy/memlock"
)

// write lays out a config directory: files maps a path relative to dir to
// its content. It returns the main file's path.
func write(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "rdmad.toml")
}

func TestLoadDefaults(t *testing.T) {
	p := write(t, map[string]string{"rdmad.toml": "# nothing set\n"})
	cfg, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.Files = []string{p}
	if len(cfg.MRPool.Classes) != 2 || !cfg.Probe.Loopback || cfg.Probe.LoopbackInterval.Duration != time.Second {
		t.Errorf("defaults: mrpool %+v probe %+v", cfg.MRPool, cfg.Probe)
	}
	if diff := cmp.Diff(want, cfg, cmpIgnoreSrc); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
}

func TestLoadFull(t *testing.T) {
	p := write(t, map[string]string{
		"rdmad.toml": `
[daemon]
socket = "/run/x/rdmad.sock"
log_level = "debug"
resync_interval = "1m"

[[policy]]
name = "fabric"
netdevs = ["ens1f*"]
mtu = 4200

[policy.qos]
trust = "dscp"
pfc = [3]
dscp_to_prio = { 26 = 3, 48 = 6 }

[policy.roce]
tos = 106
mode = "v2"

[memlock]
daemon = "unlimited"
users = "64MiB"
users_domain = "@rdma"

[[policy]]
name = "ib"
devices = ["mlx5_*"]
mode = "observe"
mtu = 4092
`,
		"rdmad.d/10-site.toml": `
[daemon]
log_level = "warn"

[[policy]]
name = "ib"
devices = ["mlx5_1"]
mtu = 2044
`,
		"rdmad.d/ignored.conf": "garbage that is not a drop-in",
	})
	cfg, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	tos := 106
	unlimited, mib64 := memlock.Unlimited, 64*size.MiB
	want := &Config{
		Daemon: Daemon{Socket: "/run/x/rdmad.sock", LogLevel: "warn", ResyncInterval: Duration{time.Minute}},
		Policies: []Policy{
			{Name: "fabric", Netdevs: []string{"ens1f*"}, Mode: "enforce", MTU: 4200,
				QoS: &QoS{Trust: "dscp", PFC: []int{3}, DSCPToPrio: map[int]int{26: 3, 48: 6},
					RawDSCPToPrio: map[string]int{"26": 3, "48": 6}},
				RoCE: &RoCE{TOS: &tos, Mode: "v2"}},
			{Name: "ib", Devices: []string{"mlx5_1"}, Mode: "enforce", MTU: 2044},
		},
		Memlock: Memlock{Daemon: &unlimited, Users: &mib64, UsersDomain: "@rdma", LimitsFile: memlock.DefaultLimitsPath},
		MRPool:  Default().MRPool,
		Probe:   Default().Probe,
		Health:  Default().Health,
		Files:   []string{p, filepath.Join(filepath.Dir(p), "rdmad.d", "10-site.toml")},
	}
	if diff := cmp.Diff(want, cfg, cmpIgnoreSrc); diff != "" {
		t.Errorf("merged config (-want +got):\n%s", diff)
	}
	if got := cfg.Policies[1].File(); !strings.HasSuffix(got, "10-site.toml") {
		t.Errorf("policy ib comes from %q, want the drop-in", got)
	}
}

func TestLoadPeers(t *testing.T) {
	p := write(t, map[string]string{
		"rdmad.toml": "[probe]\ngroup = \"tor-a\"\nallow = [\"10.1.0.0/16\"]\n[[peer]]\naddress = \"192.0.2.17\"\ngroup = \"tor-a\"\n[[peer]]\naddress = \"node-b.example\"\n",
		// Drop-ins add peers; the same address again replaces its group.
		"rdmad.d/50-vm-peers.toml": "[[peer]]\naddress = \"192.168.77.2\"\n[[peer]]\naddress = \"192.0.2.17\"\ngroup = \"tor-b\"\n",
	})
	cfg, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	want := []Peer{{Address: "192.0.2.17", Group: "tor-b"}, {Address: "node-b.example"}, {Address: "192.168.77.2"}}
	if diff := cmp.Diff(want, cfg.Peers, cmpIgnoreSrc); diff != "" {
		t.Errorf("peers (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}, cfg.Probe.Allow.Prefixes(), cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
		t.Errorf("allow (-want +got):\n%s", diff)
	}
	if cfg.Probe.Group != "tor-a" || cfg.Probe.Port != DefaultProbePort || !cfg.Probe.Peers {
		t.Errorf("probe = %+v; want group tor-a, default port, peers on", cfg.Probe)
	}
}

var cmpIgnoreSrc = cmp.FilterPath(func(p cmp.Path) bool { s := p.Last().String(); return s == ".src" || s == ".raw" }, cmp.Ignore())

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		want  []string // each error's text, with the temp dir replaced by D
	}{
		{
			name:  "unknown top-level key",
			files: map[string]string{"rdmad.toml": "\n[daemon]\nsockett = \"/x\"\n"},
			want:  []string{"D/rdmad.toml:3: daemon.sockett: unknown key; did you mean socket? (see rdmad.toml(5))"},
		},
		{
			name:  "unknown key in the second policy",
			files: map[string]string{"rdmad.toml": "[[policy]]\nname = \"a\"\nnetdevs = [\"x\"]\nmtu = 1500\n\n[[policy]]\nname = \"b\"\nnetdevs = [\"y\"]\nmtu = 1500\n[policy.qos]\npfcc = [3]\n"},
			want:  []string{"D/rdmad.toml:11: policy \"b\".qos.pfcc: unknown key; did you mean pfc? (see rdmad.toml(5))"},
		},
		{
			name:  "wrong type",
			files: map[string]string{"rdmad.toml": "[[policy]]\nname = \"a\"\nnetdevs = [\"x\"]\nmtu = \"big\"\n"},
			want:  []string{"D/rdmad.toml:4: policy \"a\".mtu: mtu must be an integer, not \"big\""},
		},
		{
			// The decoder names the last block's line for a key of an
			// array of tables; the error is the first block's.
			name:  "wrong type in the first of two policies",
			files: map[string]string{"rdmad.toml": "[[policy]]\nname = \"a\"\nmtu = \"1500\"\n\n[[policy]]\nname = \"b\"\nmtu = 9000\n"},
			want:  []string{"D/rdmad.toml:3: policy \"a\".mtu: mtu must be an integer, not \"1500\""},
		},
		{
			name:  "syntax error",
			files: map[string]string{"rdmad.toml": "[daemon]\nlog_level = \n"},
			want:  []string{"D/rdmad.toml:2: daemon.log_level: expected value but found '\\n' instead"},
		},
		{
			name:  "bad duration",
			files: map[string]string{"rdmad.toml": "[daemon]\nresync_interval = \"often\"\n"},
			want:  []string{"D/rdmad.toml:2: daemon.resync_interval: invalid duration \"often\": write it like \"30s\", \"5m\" or \"1h\""},
		},
		{
			name:  "bad values in a drop-in name the drop-in",
			files: map[string]string{"rdmad.toml": "", "rdmad.d/50-x.toml": "[daemon]\nlog_level = \"loud\"\nsocket = \"rel.sock\"\n"},
			want: []string{
				`D/rdmad.d/50-x.toml:3: daemon.socket: "rel.sock" is not an absolute path; use e.g. "/run/rdmad/rdmad.sock"`,
				`D/rdmad.d/50-x.toml:2: daemon.log_level: "loud" is not a log level; use debug, info, warn or error`,
			},
		},
		{
			name: "policy values",
			files: map[string]string{"rdmad.toml": `[[policy]]
name = "p"
netdevs = ["[x"]
mode = "sometimes"
mtu = 70000
[policy.qos]
trust = "cos"
pfc = [3, 3, 9]
dscp_to_prio = { 64 = 1 }
[policy.roce]
tos = 300
mode = "v3"
`},
			want: []string{
				`D/rdmad.toml:3: policy "p".netdevs: bad glob "[x": syntax error in pattern`,
				`D/rdmad.toml:4: policy "p".mode: "sometimes" is not a mode; use "enforce" (apply) or "observe" (report drift only)`,
				`D/rdmad.toml:5: policy "p".mtu: 70000 is out of range; use 68 to 65535 (the netdev's own limits are checked when applied)`,
				`D/rdmad.toml:7: policy "p".qos.trust: "cos" is not a trust mode; use "pcp" or "dscp"`,
				`D/rdmad.toml:8: policy "p".qos.pfc: priority 3 is listed twice; list each PFC priority once (pfc = [3], not the 8 flags of mlnx_qos)`,
				`D/rdmad.toml:8: policy "p".qos.pfc: priority 9 is out of range; list the priorities 0-7 that get PFC, e.g. pfc = [3]`,
				`D/rdmad.toml:9: policy "p".qos.dscp_to_prio.64: "64" is not a DSCP code point; use 0 to 63`,
				`D/rdmad.toml:11: policy "p".roce.tos: 300 is out of range; use 0 to 255 (e.g. 106 for DSCP 26 with ECN)`,
				`D/rdmad.toml:12: policy "p".roce.mode: "v3" is not a RoCE mode; use "v1" or "v2"`,
			},
		},
		{
			name:  "policy without name, selector or settings",
			files: map[string]string{"rdmad.toml": "# c\n[[policy]]\nmode = \"observe\"\n"},
			want: []string{
				`D/rdmad.toml:2: policy[0]: every [[policy]] needs a name (name = "fabric"); it identifies the policy in status and logs`,
				`D/rdmad.toml:2: policy[0]: selects nothing; set netdevs = ["ens1f*"] and/or devices = ["mlx5_*"]`,
				`D/rdmad.toml:2: policy[0]: manages nothing; set mtu, [policy.qos], [policy.ecn], [policy.roce], [policy.rdma], [policy.rings], [policy.channels], [policy.coalesce], firmware or min_rate`,
			},
		},
		{
			name:  "duplicate policy in one file",
			files: map[string]string{"rdmad.toml": "[[policy]]\nname = \"a\"\nnetdevs = [\"x\"]\nmtu = 1500\n[[policy]]\nname = \"a\"\nnetdevs = [\"y\"]\nmtu = 1500\n"},
			want:  []string{`D/rdmad.toml:6: policy "a".name: policy "a" is declared twice in this file (also at line 2); give each block its own name`},
		},
		{
			name:  "limits_file outside limits.d, or not *.conf",
			files: map[string]string{"rdmad.toml": "[memlock]\nlimits_file = \"/etc/rdmad/limits.conf\"\n", "rdmad.d/50-x.toml": "[memlock]\nlimits_file = \"/etc/security/limits.d/90-rdmad\"\n"},
			want: []string{
				`D/rdmad.d/50-x.toml:2: memlock.limits_file: "/etc/security/limits.d/90-rdmad" is not read by pam_limits, which reads only /etc/security/limits.d/*.conf; use e.g. "/etc/security/limits.d/90-rdmad.conf"`,
			},
		},
		{
			name:  "limits_file outside limits.d",
			files: map[string]string{"rdmad.toml": "[memlock]\nlimits_file = \"/etc/rdmad/limits.conf\"\n"},
			want: []string{
				`D/rdmad.toml:2: memlock.limits_file: "/etc/rdmad/limits.conf" is not read by pam_limits, which reads only /etc/security/limits.d/*.conf; use e.g. "/etc/security/limits.d/90-rdmad.conf"`,
			},
		},
		{
			name:  "unknown table and keys in the wrong table",
			files: map[string]string{"rdmad.toml": "[probes]\npeers = true\n[probe]\nlog_level = \"x\"\n[daemon]\nzzz = 1\n"},
			want: []string{
				"D/rdmad.toml:1: probes: unknown table; did you mean [probe]? (see rdmad.toml(5))",
				"D/rdmad.toml:4: probe.log_level: unknown key here; log_level is a key of [daemon] (see rdmad.toml(5))",
				"D/rdmad.toml:6: daemon.zzz: unknown key; see rdmad.toml(5) for the keys rdmad knows",
			},
		},
		{
			// A value error is reported beside the unknown keys, not
			// only once they are fixed.
			name:  "unknown keys and a bad value together",
			files: map[string]string{"rdmad.toml": "[probe]\nflows = 99\nbogus = 1\n"},
			want: []string{
				"D/rdmad.toml:3: probe.bogus: unknown key; see rdmad.toml(5) for the keys rdmad knows",
				"D/rdmad.toml:2: probe.flows: 99 is out of range; use 1 to 16 probe flows (UDP source ports) per path; default 4, 1 probes one ECMP path",
			},
		},
		{
			name:  "a key set twice",
			files: map[string]string{"rdmad.toml": "[probe]\npeer_interval = \"1s\"\nflows = 4\nflows = 2\n"},
			want:  []string{"D/rdmad.toml:4: probe.flows: set twice in this file: first at line 3; keep one of the two"},
		},
		{
			name:  "a table declared twice",
			files: map[string]string{"rdmad.toml": "[probe]\nflows = 2\n[probe]\nwindow = 3\n"},
			want:  []string{"D/rdmad.toml:3: probe: set twice in this file: first at line 1; keep one of the two"},
		},
		{
			// In the second block, not the first: the block is named.
			name:  "a key set twice in a policy block",
			files: map[string]string{"rdmad.toml": "[[policy]]\nname = \"a\"\nmtu = 4096\n[[policy]]\nname = \"b\"\nmtu = 4096\nmtu = 1024\n"},
			want:  []string{`D/rdmad.toml:7: policy "b".mtu: set twice in this file: first at line 6; keep one of the two`},
		},
		{
			name:  "mrpool and probe values",
			files: map[string]string{"rdmad.toml": "[mrpool]\nclasses = [{size = \"4KiB\", count = 0}, {size = \"2GiB\", count = 1}]\ncanary_interval = \"1ms\"\n[probe]\nloopback_interval = \"1ms\"\n"},
			want: []string{
				`D/rdmad.toml:2: mrpool.classes[0]: count 0 is out of range; use 1 to 1048576 (or remove the class)`,
				`D/rdmad.toml:2: mrpool.classes[1]: size 2GiB is out of range; use 64B to 1GiB`,
				`D/rdmad.toml:3: mrpool.canary_interval: 1ms is too short; use at least 1s`,
				`D/rdmad.toml:5: probe.loopback_interval: 1ms is out of range; use 10ms to 1h (default 1s)`,
			},
		},
		{
			name:  "peer probe values",
			files: map[string]string{"rdmad.toml": "[probe]\nport = 4791\nallow = []\npeer_interval = \"1s\"\npeer_timeout = \"2s\"\nmax_peers = 0\npeers_file = \"peers\"\nflows = 17\n[[peer]]\naddress = \"not a host\"\n[[peer]]\ngroup = \"tor a\"\naddress = \"192.0.2.1\"\n"},
			want: []string{
				`D/rdmad.toml:7: probe.peers_file: "peers" is not an absolute path; use e.g. "/etc/rdmad/peers"`,
				`D/rdmad.toml:2: probe.port: 4791 cannot be the control port; use 1 to 65535 except 4791 (RoCE v2's own port); default 18516`,
				`D/rdmad.toml:5: probe.peer_timeout: 2s is out of range; use 1ms up to peer_interval (1s)`,
				`D/rdmad.toml:6: probe.max_peers: 0 is out of range; use 1 to 4096`,
				`D/rdmad.toml:8: probe.flows: 17 is out of range; use 1 to 16 probe flows (UDP source ports) per path; default 4, 1 probes one ECMP path`,
				`D/rdmad.toml:10: peer[0].address: "not a host" is neither an IP address nor a host name`,
				`D/rdmad.toml:12: peer[1].group: "tor a" is not a group label; use 1 to 64 letters, digits and . _ - : / starting with a letter or digit, e.g. "tor-a"`,
			},
		},
		{
			name:  "probe allow",
			files: map[string]string{"rdmad.toml": "[probe]\nallow = [\"10.0.0.0/33\"]\n"},
			want:  []string{`D/rdmad.toml:2: probe.allow: "10.0.0.0/33" is not a network; write it as a CIDR, e.g. "10.0.0.0/16"`},
		},
		{
			name:  "memlock values",
			files: map[string]string{"rdmad.toml": "[memlock]\ndaemon = \"64MB\"\n"},
			want:  []string{`D/rdmad.toml:2: memlock.daemon: size "64MB": decimal unit "MB" is ambiguous; use MiB (binary, 1024-based)`},
		},
		{
			name: "metrics listen addresses",
			files: map[string]string{"rdmad.toml": "[metrics]\nlisten = \"10879\"\n",
				"rdmad.d/1.toml": "[metrics]\nlisten = \"127.0.0.1:http\"\n",
				"rdmad.d/2.toml": "[metrics]\nlisten = \"127.0.0.1:70000\"\n",
				"rdmad.d/3.toml": "[metrics]\nlisten = \"example.org:10879\"\n"},
			// Only the last file's value is in force, so only it is reported.
			want: []string{`D/rdmad.d/3.toml:2: metrics.listen: "example.org:10879" has host "example.org", which is not an IP address or localhost; write host:port, e.g. "127.0.0.1:10879" (or remove the key to serve metrics on the socket only)`},
		},
		{
			name:  "metrics listen without port",
			files: map[string]string{"rdmad.toml": "[metrics]\nlisten = \"127.0.0.1\"\n"},
			want:  []string{`D/rdmad.toml:2: metrics.listen: "127.0.0.1" is not host:port; write host:port, e.g. "127.0.0.1:10879" (or remove the key to serve metrics on the socket only)`},
		},
		{
			name:  "metrics listen port out of range",
			files: map[string]string{"rdmad.toml": "[metrics]\nlisten = \"[::1]:0\"\n"},
			want:  []string{`D/rdmad.toml:2: metrics.listen: "[::1]:0" has port "0"; use a number from 1 to 65535; write host:port, e.g. "127.0.0.1:10879" (or remove the key to serve metrics on the socket only)`},
		},
		{
			name:  "missing group",
			files: map[string]string{"rdmad.toml": "[daemon]\nadmin_group = \"no-such-group-rdmad\"\n"},
			want:  []string{`D/rdmad.toml:2: daemon.admin_group: group "no-such-group-rdmad" does not exist; create it (groupadd --system no-such-group-rdmad) or remove the key`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := write(t, tt.files)
			cfg, err := Load(p)
			if err == nil {
				t.Fatalf("Load succeeded with %+v; want errors", cfg)
			}
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("error %v (%T) is not config.Errors", err, err)
			}
			var got []string
			for _, e := range errs {
				got = append(got, strings.ReplaceAll(e.Error(), filepath.Dir(p), "D"))
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLoadMissingMain(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "rdmad.toml"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Load of a missing file: %v, want an error wrapping ErrNotExist", err)
	}
}

func FuzzLoad(f *testing.F) {
	f.Add([]byte("[daemon]\nlog_level = \"debug\"\n[[policy]]\nname = \"a\"\nnetdevs = [\"x*\"]\nmtu = 1500\n[policy.qos]\npfc = [3]\ndscp_to_prio = { 26 = 3 }\n"))
	f.Add([]byte("[[policy]]\n[policy.roce]\ntos = 1\n[[policy]]\nname='x'\n"))
	f.Add([]byte("a.b.\"c\" = 1\n[[x.y]]\n[x]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(t.TempDir(), "rdmad.toml")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		cfg, err := Load(p)
		if err != nil {
			var errs Errors
			if !errors.As(err, &errs) || len(errs) == 0 {
				t.Fatalf("Load error %v (%T) is not a non-empty config.Errors", err, err)
			}
			for _, e := range errs {
				if e.File != p || e.Msg == "" {
					t.Fatalf("error %+v lacks its file or message", e)
				}
			}
			return
		}
		for _, pol := range cfg.Policies {
			if pol.Name == "" || (pol.Mode != "enforce" && pol.Mode != "observe") {
				t.Fatalf("accepted an invalid policy %+v", pol)
			}
		}
		if !filepath.IsAbs(cfg.Daemon.Socket) {
			t.Fatalf("accepted a relative socket %q", cfg.Daemon.Socket)
		}
	})
}

func TestLoadMetricsListen(t *testing.T) {
	for _, tt := range []struct {
		addr string
		any  bool
	}{{"127.0.0.1:10879", false}, {"[::1]:10879", false}, {"localhost:10879", false}, {"192.0.2.7:10879", false},
		{":10879", true}, {"0.0.0.0:65535", true}, {"[::]:10879", true}} {
		t.Run(tt.addr, func(t *testing.T) {
			conf := "[metrics]\nlisten = \"" + tt.addr + "\"\n"
			if tt.any {
				conf += "listen_any = true\n"
			}
			p := write(t, map[string]string{"rdmad.toml": conf})
			cfg, err := Load(p)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if diff := cmp.Diff(Metrics{Listen: tt.addr, ListenAny: tt.any}, cfg.Metrics); diff != "" {
				t.Errorf("[metrics] (-want +got):\n%s", diff)
			}
		})
	}
}

// TestLoadMetricsListenAny is issue #24's silent wildcard: ":10879" bound
// every interface. A listen address without a host, or with 0.0.0.0 or ::,
// is refused with file:line unless [metrics] listen_any = true says so.
func TestLoadMetricsListenAny(t *testing.T) {
	for _, addr := range []string{":10879", "0.0.0.0:10879", "[::]:10879", "[0:0::0]:10879"} {
		t.Run(addr, func(t *testing.T) {
			p := write(t, map[string]string{"rdmad.toml": "[metrics]\nlisten = \"" + addr + "\"\n"})
			_, err := Load(p)
			want := fmt.Sprintf(`rdmad.toml:2: metrics.listen: %q listens on every interface`, addr)
			if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "set listen_any = true") {
				t.Errorf("Load: %v; want %s, naming listen_any", err, want)
			}
		})
	}
}

// TestGroupLabels is issue #24's labels: [probe] group and [[peer]] group
// took anything but blanks, so escape sequences reached rdmactl peers and
// the metric labels, and one invalid UTF-8 byte broke D-Bus GetAll for
// every client. They are checked like addresses now.
func TestGroupLabels(t *testing.T) {
	for _, g := range []string{"tor-a", "pod1/rack-7", "a", "x_y.z:1", strings.Repeat("a", 64)} {
		if msg := CheckGroupLabel(g); msg != "" {
			t.Errorf("CheckGroupLabel(%q) = %q, want accepted", g, msg)
		}
	}
	for _, g := range []string{"tor a", "\x1b[31mred", "a\nb", "\xff", "tor\u202e", "-a", "é", strings.Repeat("a", 65), "a\x00"} {
		if CheckGroupLabel(g) == "" {
			t.Errorf("CheckGroupLabel(%q) accepted it", g)
		}
	}
	for _, conf := range []string{
		"[probe]\ngroup = \"\\u001b[2J\"\n",
		"[[peer]]\naddress = \"192.0.2.1\"\ngroup = \"tor\\u202ea\"\n",
	} {
		_, err := Load(write(t, map[string]string{"rdmad.toml": conf}))
		if err == nil || !strings.Contains(err.Error(), "is not a group label") {
			t.Errorf("Load(%q): %v, want the group label refused", conf, err)
			continue
		}
		if strings.ContainsAny(err.Error(), "\x1b\u202e") {
			t.Errorf("the error carries the raw label: %q", err)
		}
	}
}
