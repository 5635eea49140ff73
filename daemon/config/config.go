// Package config loads and validates rdmad's TOML configuration: one main file
// plus drop-ins in <dir>/rdmad.d/*.toml merged in lexical order.
//
// Decoding is strict. Unknown keys, wrong types and invalid values are errors
// that name the file, the line and the key, so that an operator can fix the
// right line without reading rdmad's source.
package config

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"time"

	"github.com/rdmad/rdmad/internal/size"
	"github.com/rdmad/rdmad/policy/memlock"
)

// Default paths.
const (
	DefaultPath   = "/etc/rdmad/rdmad.toml"
	DefaultSocket = "/run/rdmad/rdmad.sock"
	// DropInDir is the directory, next to the main file, whose *.toml files
	// are merged after it in lexical order.
	DropInDir = "rdmad.d"
	// DefaultProbePort is the control endpoint's UDP port ([probe] port):
	// not 4791 (RoCE v2) and not 18515 (perftest's default).
	DefaultProbePort = 18516
	// DefaultProbeFlows is [probe] flows' default (probe.DefaultFlows
	// says why 4) and MaxProbeFlows its bound (probe/ud.MaxFlows).
	DefaultProbeFlows = 4
	MaxProbeFlows     = 16
	// MaxProbePeers bounds [probe] max_peers: the peer engine caches an
	// address handle per destination and flow, at most 4,096 per port
	// (verbs/peer Config.MaxAH).
	MaxProbePeers = 4096
)

// A Config is the merged, validated configuration. It is never mutated after
// Load returns it; the daemon replaces it as a whole on reload.
type Config struct {
	Daemon   Daemon   `toml:"daemon"`
	Policies []Policy `toml:"policy"`
	Memlock  Memlock  `toml:"memlock"`
	Metrics  Metrics  `toml:"metrics"`
	MRPool   MRPool   `toml:"mrpool"`
	Probe    Probe    `toml:"probe"`
	Peers    []Peer   `toml:"peer"`
	Health   Health   `toml:"health"`
	// RDMA is [rdma]: node-wide settings of the RDMA subsystem
	// (daemon/config/nic.go).
	RDMA RDMASystem `toml:"rdma"`

	// Files lists the files that were merged, main file first.
	Files []string `toml:"-"`
	// raw is the content of Files as read, for the saved copy (saved.go).
	raw [][]byte
}

// Daemon holds the [daemon] table.
type Daemon struct {
	// Socket is the path of the Unix socket API.
	Socket string `toml:"socket"`
	// SocketGroup may read from the socket. Empty: only root.
	SocketGroup string `toml:"socket_group"`
	// AdminGroup may also change state (reload, apply). Empty: only root.
	AdminGroup string `toml:"admin_group"`
	// LogLevel is one of debug, info, warn, error.
	LogLevel string `toml:"log_level"`
	// ResyncInterval is how often every object is reconciled even without
	// an event, to catch anything a lost event hid.
	ResyncInterval Duration `toml:"resync_interval"`
}

// A Policy is one [[policy]] block: settings declared for the netdevs and
// RDMA devices its selectors match.
type Policy struct {
	Name string `toml:"name"`
	// Netdevs and Devices are shell globs (path.Match syntax) over netdev
	// names and RDMA device names.
	Netdevs []string `toml:"netdevs"`
	Devices []string `toml:"devices"`
	// Mode is "enforce" (apply differences) or "observe" (report drift only).
	Mode string `toml:"mode"`
	// MTU of matched netdevs; 0 leaves it unmanaged.
	MTU  int   `toml:"mtu"`
	QoS  *QoS  `toml:"qos"`
	RoCE *RoCE `toml:"roce"`
	ECN  *ECN  `toml:"ecn"`
	// Rings, Channels and Coalesce are the ethtool queue parameters of
	// the matched netdevs (daemon/config/nic.go).
	Rings    *Rings    `toml:"rings"`
	Channels *Channels `toml:"channels"`
	Coalesce *Coalesce `toml:"coalesce"`
	// RDMA is [policy.rdma]: RDMA device attributes over RDMA netlink.
	RDMA *RDMA `toml:"rdma"`
	// Firmware is the firmware version the matched RDMA devices should
	// run ("22.39.1002", ">=22.39.1002"); a mismatch is reported, never
	// acted on.
	Firmware string `toml:"firmware"`
	// MinRate is the least link rate of the matched ports ("200Gb/s"): a
	// port below it is LinkDegraded (docs/HEALTH.md). Nothing is set.
	MinRate string `toml:"min_rate"`
	// MinRateGbps is MinRate parsed by validation.
	MinRateGbps float64 `toml:"-"`

	src source
}

// ECN holds [policy.ecn]: DCQCN (RoCE congestion control) on the matched
// netdevs, through mlx5's sysfs files
// /sys/class/net/<netdev>/ecn/roce_{np,rp}/enable/<prio>.
type ECN struct {
	// NP lists the priorities (0-7) on which the notification point is
	// enabled (the receiver answers ECN-marked packets with CNPs); the
	// others are disabled. Absent leaves it unmanaged; [] disables all.
	NP []int `toml:"np"`
	// RP lists the priorities on which the reaction point is enabled (the
	// sender slows down on CNPs), likewise.
	RP []int `toml:"rp"`
}

// QoS holds [policy.qos]: data-centre bridging for the matched netdevs.
type QoS struct {
	// Trust is "pcp" or "dscp"; empty leaves it unmanaged.
	Trust string `toml:"trust"`
	// PFC lists the priorities (0-7) with priority flow control enabled;
	// the others are disabled. Absent leaves PFC unmanaged; [] disables all.
	PFC []int `toml:"pfc"`
	// DSCPToPrio maps DSCP code points (0-63) to priorities (0-7).
	DSCPToPrio map[int]int `toml:"-"`

	RawDSCPToPrio map[string]int `toml:"dscp_to_prio"`
	// ETS is [policy.qos.ets]: priority to traffic class map and the
	// classes' bandwidth shares (daemon/config/nic.go).
	ETS *ETS `toml:"ets"`
}

// RoCE holds [policy.roce]: RDMA-CM defaults for the matched devices' ports.
type RoCE struct {
	// TOS is the default type of service for RDMA-CM connections (0-255);
	// nil leaves it unmanaged.
	TOS *int `toml:"tos"`
	// Mode is "v1" or "v2" (RoCE version RDMA-CM uses); empty leaves it
	// unmanaged.
	Mode string `toml:"mode"`
}

// A PoolClass is one [[mrpool.classes]] entry: Count buffers of Size bytes.
type PoolClass struct {
	Size  size.Size `toml:"size"`
	Count int       `toml:"count"`
}

// source records where a block came from, for error messages.
type source struct {
	file  string
	index int // index among the file's [[...]] blocks of the same name
}

// File reports the file that declared p.
func (p *Policy) File() string { return p.src.file }

// Memlock holds [memlock]: locked-memory limits, which memory registration
// (ibv_reg_mr) counts against.
type Memlock struct {
	// Daemon is the RLIMIT_MEMLOCK rdmad raises for itself at start and on
	// reload ("unlimited", "64MiB"); nil leaves it as systemd set it
	// (LimitMEMLOCK=).
	Daemon *memlock.Size `toml:"daemon"`
	// Users, when set, makes rdmad keep LimitsFile with memlock rules for
	// UsersDomain, so that RDMA applications of users get a usable limit
	// at their next login.
	Users       *memlock.Size `toml:"users"`
	UsersDomain string        `toml:"users_domain"`
	LimitsFile  string        `toml:"limits_file"`
}

// MRPool holds [mrpool]: memory regions registered ahead of use on every
// RDMA device.
type MRPool struct {
	// Classes are the size classes, in the operator's priority order: when
	// the memlock budget is short, earlier classes are filled first.
	Classes []PoolClass `toml:"classes"`
	// CanaryInterval is how often a buffer is registered and deregistered
	// to time registration and catch memlock trouble early.
	CanaryInterval Duration `toml:"canary_interval"`
}

// Probe holds [probe]: probes that move real data over verbs.
type Probe struct {
	// Loopback enables the loopback probe on every ACTIVE port.
	Loopback bool `toml:"loopback"`
	// LoopbackInterval is the time between loopback rounds on each port.
	LoopbackInterval Duration `toml:"loopback_interval"`
	// Poll is how the loopback probe waits for its completions: "event"
	// (poll for up to 1 ms, then sleep on the completion channel) or
	// "busy" (poll until the completion, up to 100 ms per wait: no wakeup
	// in the RTT, a core held while each operation runs).
	Poll string `toml:"poll"`
	// TrafficClass is the GRH traffic class (RoCE v2: the IP ToS byte,
	// DSCP<<2 | ECN) of the loopback and peer probes, 0 to 255. Nil: the
	// [policy.roce] tos in force for the probing port, else 0.
	TrafficClass *int `toml:"traffic_class"`

	// Peer probes (docs/PROBES.md). Peers enables them: UD probes to the
	// [[peer]] entries and PeersFile, and answers to other nodes.
	Peers bool `toml:"peers"`
	// PeersFile lists more peers, one address or host name per line
	// (optionally followed by a group label); it is re-read on every
	// reload and when it changes (checked every 30s).
	PeersFile string `toml:"peers_file"`
	// Port is the UDP port of the control endpoint.
	Port int `toml:"port"`
	// Allow lists networks (CIDRs) whose nodes may query the control
	// endpoint besides the configured peers.
	Allow Networks `toml:"allow"`
	// Group is this node's group label (ToR, pod).
	Group string `toml:"group"`
	// PeerInterval is the time between probes to one peer (jittered
	// ±10%); PeerTimeout is when an unanswered probe counts as lost.
	PeerInterval Duration `toml:"peer_interval"`
	PeerTimeout  Duration `toml:"peer_timeout"`
	// DownAfter lost probes in a row make a peer down; UpAfter answers in
	// a row bring it back.
	DownAfter int `toml:"down_after"`
	UpAfter   int `toml:"up_after"`
	// LossThreshold (percent over Window probes) and RTTThreshold (p99,
	// 0 disables) make a peer degraded.
	LossThreshold float64  `toml:"loss_threshold"`
	RTTThreshold  Duration `toml:"rtt_threshold"`
	Window        int      `toml:"window"`
	// MaxPeers bounds the peers probed at once; Rotate is how often the
	// selection moves on when there are more.
	MaxPeers int      `toml:"max_peers"`
	Rotate   Duration `toml:"rotate"`
	// Flows is how many probe QPs each local port probes each peer path
	// from, each with a UDP source port of its own, so that several of
	// the fabric's equal-cost (ECMP) paths are probed; 1 probes one.
	Flows int `toml:"flows"`
	// KeyFile holds the fleet key that authenticates control messages and
	// probes (HMAC-SHA256): a root-owned file without group or other
	// permissions, at least 16 bytes after trimming whitespace; for a
	// rotation up to four keys, one per line, the first tagging
	// (daemon/peers.go, readProbeKey). Empty: no authentication.
	KeyFile string `toml:"key_file"`
	// Auth is "require" (the default with a key: nothing unauthenticated
	// is answered or believed) or "prefer" (for rollouts: peers without
	// the key are still answered and probed, and flagged).
	Auth string `toml:"auth"`
	// Bandwidth lets the configured peers and [probe] allow networks run
	// RC bandwidth tests against this node (rdmactl bw on theirs): one at
	// a time, at most 30 s each, with the fleet key when there is one.
	// Off by default: a test fills the link.
	Bandwidth bool `toml:"bandwidth"`
}

// Networks is a list of CIDRs. It is kept as one canonical string so that
// Probe stays comparable with == (the daemon restarts the loopback prober
// only when Probe changed).
type Networks struct{ list string }

// UnmarshalTOML implements toml.Unmarshaler: an array of CIDR strings.
func (n *Networks) UnmarshalTOML(v any) error {
	arr, ok := v.([]any)
	if !ok {
		return fmt.Errorf("want an array of networks, e.g. [\"10.0.0.0/16\"]")
	}
	var out []string
	for _, e := range arr {
		s, ok := e.(string)
		if !ok {
			// %T, not %v: the element may be an array nested a million
			// deep, and printing it recursed until the stack overflowed.
			return fmt.Errorf("an element of type %T is not a string; write networks as CIDRs, e.g. \"10.0.0.0/16\"", e)
		}
		pfx, err := netip.ParsePrefix(s)
		if err != nil {
			return fmt.Errorf("%q is not a network; write it as a CIDR, e.g. \"10.0.0.0/16\"", s)
		}
		out = append(out, pfx.Masked().String())
	}
	n.list = strings.Join(out, ",")
	return nil
}

// Equal reports whether n and o are the same networks.
func (n Networks) Equal(o Networks) bool { return n.list == o.list }

// Prefixes returns the networks.
func (n Networks) Prefixes() []netip.Prefix {
	if n.list == "" {
		return nil
	}
	var out []netip.Prefix
	for _, s := range strings.Split(n.list, ",") {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

// A Peer is one [[peer]] block: another node whose rdmad answers probes.
type Peer struct {
	// Address is an IP address or a host name.
	Address string `toml:"address"`
	// Group is a label such as the ToR switch; peers of this node's own
	// group are all probed, other groups through rotating representatives.
	Group string `toml:"group"`

	src source
}

// Metrics holds [metrics]: where Prometheus can scrape rdmad. GET /metrics
// on the Unix socket is always there; Listen adds a TCP listener.
type Metrics struct {
	// Listen is a TCP host:port ("127.0.0.1:10879") serving GET /metrics;
	// empty (the default) opens no port. It follows reloads.
	Listen string `toml:"listen"`
	// ListenAny allows a Listen without a host or with a wildcard one
	// (":10879", "0.0.0.0:10879", "[::]:10879"), which serves every
	// interface: the metrics tell anyone who reaches the port the node's
	// devices, peers and their states, so it must be asked for.
	ListenAny bool `toml:"listen_any"`
}

// A Duration is a time.Duration written as a Go duration string ("5m").
type Duration struct{ time.Duration }

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("invalid duration %q: write it like \"30s\", \"5m\" or \"1h\"", b)
	}
	d.Duration = v
	return nil
}

// MarshalText implements encoding.TextMarshaler.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.Duration.String()), nil }

// Default returns the configuration rdmad uses when a key is not set.
func Default() *Config {
	return &Config{
		Daemon: Daemon{
			Socket:         DefaultSocket,
			SocketGroup:    "",
			AdminGroup:     "",
			LogLevel:       "info",
			ResyncInterval: Duration{5 * time.Minute},
		},
		Memlock: Memlock{UsersDomain: "*", LimitsFile: memlock.DefaultLimitsPath},
		Health:  defaultHealth(),
		MRPool: MRPool{
			Classes:        []PoolClass{{Size: 4 << 10, Count: 256}, {Size: 1 << 20, Count: 8}},
			CanaryInterval: Duration{30 * time.Second},
		},
		Probe: Probe{Loopback: true, LoopbackInterval: Duration{time.Second}, Poll: "event",
			Peers: true, Port: DefaultProbePort, PeerInterval: Duration{time.Second}, PeerTimeout: Duration{500 * time.Millisecond},
			DownAfter: 3, UpAfter: 3, LossThreshold: 1, RTTThreshold: Duration{0}, Window: 100, MaxPeers: 64, Rotate: Duration{time.Minute},
			Flows: DefaultProbeFlows},
	}
}

// DropIns returns the glob of the drop-in files that belong to the main file
// at path.
func DropIns(path string) string {
	return filepath.Join(filepath.Dir(path), DropInDir, "*.toml")
}
