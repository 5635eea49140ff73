// Package apitype is the contract of rdmad's local API: the types GET
// /v1/status, /v1/watch, /v1/doctor and the other routes of the Unix
// socket speak in JSON, and that D-Bus properties are built from. It
// imports only the standard library, so that clients (rdmactl, the client
// package, other programs on the node) link none of the daemon: no verbs,
// no policy, no netlink (cmd/rdmactl/deps_test.go keeps it so).
//
// The JSON forms are documented in docs/API.md. Add fields; never rename
// or remove them.
package apitype

import (
	"encoding/json"
	"time"
)

// Daemon states.
const (
	Starting  = "starting"
	Running   = "running"
	Degraded  = "degraded"
	Reloading = "reloading"
	Stopping  = "stopping"
)

// Component states.
const (
	OK          = "ok"
	Error       = "error"
	Unavailable = "unavailable" // the capability does not exist here (no RDMA, no bus)
	Disabled    = "disabled"    // switched off by configuration
)

// A Snapshot is the daemon's whole state at one moment. A published
// Snapshot is never modified: writers build a new one with Store.Update.
type Snapshot struct {
	// Seq increases with every published snapshot.
	Seq       uint64    `json:"seq"`
	Version   string    `json:"version"`
	State     string    `json:"state"`
	Summary   string    `json:"summary"`
	PID       int       `json:"pid"`
	StartedAt time.Time `json:"started_at"`
	UpdatedAt time.Time `json:"updated_at"`

	Config  Config   `json:"config"`
	Devices []Device `json:"devices"`
	// FunctionsWithoutDevice are the PCI functions of RDMA adapters that
	// have no RDMA device (inventory.Reader.FunctionsWithoutDevice says
	// which count); DeviceMissing judges them.
	FunctionsWithoutDevice []PCIFunction `json:"pci_functions_without_rdma_device,omitempty"`
	Policy                 PolicyState   `json:"policy"`
	// Loopback is the loopback probe's latest result per port.
	Loopback []LoopbackPort `json:"loopback"`
	// MRPool is the memory registration pool per device.
	MRPool []PoolDevice `json:"mrpool"`
	// Components maps a component name (config, inventory, api, ...) to
	// its health.
	Components map[string]Component `json:"components"`
	// Peers is what the peer probes see of other nodes (docs/PROBES.md).
	Peers Peers `json:"peers"`
	// ECN is DCQCN's state per RoCE netdev that exposes it (mlx5's
	// /sys/class/net/<netdev>/ecn), whether or not a policy manages it;
	// in netdev order, [] when none does.
	ECN []NetdevECN `json:"ecn"`
	// QoS is the DCB state (trust, PFC, DSCP map, ETS) every RoCE netdev
	// runs, read over dcbnl whether or not a policy manages it; in netdev
	// order, [] when there is no RoCE netdev (qos.go).
	QoS []NetdevQoS `json:"qos"`
	// Bandwidth is the bandwidth tests (rdmactl bw): whether this node
	// answers them, its counts and its last result; nil while the peer
	// probes do not run (bandwidth.go).
	Bandwidth *BandwidthStatus `json:"bandwidth,omitempty"`
	// Health is the verdict (GET /v1/health, docs/HEALTH.md), decided
	// again with every published snapshot.
	Health Health `json:"health"`
	// KernelFaults are the kernel log's faults of RDMA devices still
	// within their window (docs/HEALTH.md), oldest first; [] when none.
	KernelFaults []KernelFault `json:"kernel_faults"`
	// RefusedFiles are the files the configuration names (the peers
	// file, the fleet key) that rdmad refused or could not read at their
	// last read, in the order of RefusedFile.Key; [] when none.
	RefusedFiles []RefusedFile `json:"refused_files"`
}

// A RefusedFile is an input file rdmad did not take as it is: why, what to
// do, and what stays in force instead (docs/HEALTH.md, InputRefused).
type RefusedFile struct {
	// Key is the configuration key that names the file ("probe.peers_file",
	// "probe.key_file").
	Key  string `json:"key"`
	Path string `json:"path"`
	// Why is what is wrong, in a few words: "writable by group or others
	// (mode 0666)", "owned by uid 1000, not root", "not a regular file",
	// "line 3: ...".
	Why string `json:"why"`
	// Fix is what to do: "chown root: /etc/rdmad/peers && chmod go-w
	// /etc/rdmad/peers, then rdmactl reload".
	Fix string `json:"fix"`
	// Kept says what rdmad runs on instead ("the 12 peers read from it
	// before", "no key: the peer probes are not started").
	Kept string `json:"kept"`
	// Error is the whole error, as the journal has it.
	Error string `json:"error"`
	// Since is when the file was first refused for this reason.
	Since time.Time `json:"since"`
}

// NetdevECN is what DCQCN has enabled on one netdev: the priorities (0-7,
// ascending) of its notification point (NP: the receiver answers
// ECN-marked packets with CNPs) and reaction point (RP: the sender slows
// down on CNPs).
type NetdevECN struct {
	Netdev string `json:"netdev"`
	NP     []int  `json:"np"`
	RP     []int  `json:"rp"`
}

// MarshalJSON writes NetdevECN with np and rp as [] rather than null.
func (n NetdevECN) MarshalJSON() ([]byte, error) {
	type plain NetdevECN // no methods: no recursion
	return json.Marshal(plain(withLists(n)))
}

// Peer states (docs/PROBES.md has the transitions).
const (
	PeerUnknown  = "unknown"  // not probed yet
	PeerUp       = "up"       // answering, loss and RTT within thresholds
	PeerDegraded = "degraded" // answering, but loss or RTT p99 over a threshold
	PeerDown     = "down"     // probes or control queries unanswered
)

// Peers is the state of the peer probes.
type Peers struct {
	// NodeID identifies this node to its peers (hex).
	NodeID string `json:"node_id,omitempty"`
	// Ports are the local ports probes go out of and are answered on.
	Ports []PeerPort `json:"ports"`
	// Configured counts the peers in the configuration; Peers lists the
	// ones selected for probing now ([probe] max_peers).
	Configured int    `json:"configured"`
	Peers      []Peer `json:"peers"`
	// Counters of the control endpoint and the probe QPs since start.
	Counters PeerCounters `json:"counters"`
	// ControlPort is the UDP port the control endpoint answers on;
	// ControlError says why that is not the configured [probe] port (it
	// could not be bound at the last reload).
	ControlPort  int    `json:"control_port,omitempty"`
	ControlError string `json:"control_error,omitempty"`
	// Auth is "require" or "prefer" when a fleet key ([probe] key_file)
	// authenticates control messages and probes; empty without a key.
	Auth string `json:"auth,omitempty"`
	// GroupFaults are the groups ([[peer]] group) whose every peer (at
	// least two) is down from every local port while peers of other
	// groups answer: the group's switch or uplink is the likelier fault
	// (docs/PROBES.md). Never null in JSON.
	GroupFaults []GroupFault `json:"group_faults"`
	// Fingerprint is what this node tells its peers about itself in the
	// control exchange (docs/PROBES.md, "Fingerprints"); nil before the
	// peer probes built it.
	Fingerprint *Fingerprint `json:"fingerprint,omitempty"`
	// RTTHist counts the RTT of every probe answered on any path since the
	// prober started, peers since dropped from the selection included;
	// not in the JSON, for the metrics' node-wide histogram.
	RTTHist RTTHistogram `json:"-"`
}

// A Fingerprint describes a node as its peers compare it: per probe port
// the settings that must agree along a path, and node-wide the kernel and
// rdmad versions. Empty strings and zero numbers are unknown.
type Fingerprint struct {
	Version string            `json:"version,omitempty"`
	Kernel  string            `json:"kernel,omitempty"`
	Ports   []FingerprintPort `json:"ports"`
	// PortsOmitted counts the node's probe ports that did not fit the
	// bounded fingerprint (at most 8 ports).
	PortsOmitted int `json:"ports_omitted,omitempty"`
}

// MarshalJSON writes Fingerprint with ports as [] rather than null. By
// hand, as Peer's: a status carries one per peer.
func (f Fingerprint) MarshalJSON() ([]byte, error) {
	type plain Fingerprint
	q := plain(f)
	if q.Ports == nil {
		q.Ports = []FingerprintPort{}
	}
	return json.Marshal(q)
}

// A FingerprintPort is one probe port of a Fingerprint.
type FingerprintPort struct {
	// Index is the port's index among the node's probe ports.
	Index     int    `json:"index"`
	Key       string `json:"key"`
	Netdev    string `json:"netdev,omitempty"`
	MTU       int    `json:"mtu,omitempty"`        // netdev MTU
	ActiveMTU int    `json:"active_mtu,omitempty"` // RDMA port's active MTU
	LinkLayer string `json:"link_layer,omitempty"`
	Firmware  string `json:"firmware,omitempty"`
	Driver    string `json:"driver,omitempty"`
	// RoCEToS is nil when unknown (no policy manages it on the node).
	RoCEToS  *int   `json:"roce_tos,omitempty"`
	RoCEMode string `json:"roce_mode,omitempty"`
	Trust    string `json:"trust,omitempty"`
	PFC      string `json:"pfc,omitempty"`
	// RateGbps is the port's link rate in Gb/s (0: unknown, e.g. a peer
	// that predates the field).
	RateGbps float64 `json:"rate_gbps,omitempty"`
}

// Mismatch severities: "must" for settings that must agree along a path
// (MTU, link layer, RoCE mode and ToS, QoS trust and PFC), "warn" for the
// link rate (the slower port bounds the path, and a link that trained
// down is a common fault, but a fleet may mix speeds on purpose), "info"
// for firmware and driver versions, which may differ during a rollout.
const (
	SeverityMust = "must"
	SeverityWarn = "warn"
	SeverityInfo = "info"
)

// MismatchFields are the fields peers compare, in the order mismatches are
// reported.
var MismatchFields = []string{"mtu", "active_mtu", "link_layer", "roce_mode", "roce_tos", "trust", "pfc", "rate", "firmware", "driver", "kernel", "rdmad_version"}

// A Mismatch is one setting on which this node's probing port and the
// peer's port it probes disagree.
type Mismatch struct {
	Field    string `json:"field"` // mtu, active_mtu, link_layer, roce_mode, roce_tos, trust, pfc, rate, firmware, driver; kernel, rdmad_version (ports "node")
	Local    string `json:"local"`
	Peer     string `json:"peer"`
	Severity string `json:"severity"`
	// LocalPort is this node's probe port, PeerPort the peer's.
	LocalPort string `json:"local_port"`
	PeerPort  string `json:"peer_port"`
}

// A GroupFault names a group of peers that is the suspect, and why.
type GroupFault struct {
	Group  string `json:"group"`
	Reason string `json:"reason"`
}

// MarshalJSON writes Peers with ports, peers and group_faults as [] rather
// than null (also when the peer probes do not run), so that clients can
// iterate them without a nil check whoever built the value.
func (p Peers) MarshalJSON() ([]byte, error) {
	type plain Peers // no methods: no recursion
	return json.Marshal(plain(withLists(p)))
}

// A PeerPort is a local probe port.
type PeerPort struct {
	Key string `json:"key"` // "mlx5_0/1"
	GID string `json:"gid"`
	QPN uint32 `json:"qpn"`
	// TrafficClass is the GRH traffic class (RoCE v2: the IP ToS byte) of
	// the port's probes and answers.
	TrafficClass uint8 `json:"traffic_class"`
	// LocalFault is set while every peer path from this port is down
	// (at least two peers): one local fault (the port, its cable or
	// switch port, this host) explains that better than as many remote
	// ones. It says so, with the count.
	LocalFault string `json:"local_fault,omitempty"`
	// Stuck is set while the port is cut off from the probes because
	// its post of probes (ibv_post_send) has not returned for more than
	// a second (a provider standing in the call, as rxe retrying a
	// dropped send): its paths are unknown, not down, and every other
	// port keeps its schedule (docs/PROBES.md). It says since when.
	Stuck string `json:"stuck,omitempty"`
}

// A Peer is one probed node.
type Peer struct {
	Name    string `json:"name"` // as configured: address or host name
	Address string `json:"address,omitempty"`
	Group   string `json:"group,omitempty"`
	NodeID  string `json:"node_id,omitempty"`
	// State is the worst state of its paths, or down when its control
	// endpoint does not answer (Reason says which).
	State  string     `json:"state"`
	Reason string     `json:"reason,omitempty"`
	Since  time.Time  `json:"since"`
	Paths  []PeerPath `json:"paths"`
	// WireVersion is the control protocol version the peer last answered
	// in (1 or 2; 0: it has not answered). Authenticated reports whether
	// that answer carried a valid tag of the fleet key.
	WireVersion   int  `json:"wire_version,omitempty"`
	Authenticated bool `json:"authenticated"`
	// Fingerprint is what the peer told about itself; nil and
	// FingerprintUnknown true when it did not (a version-1 node, or one
	// that predates fingerprints): then nothing is compared.
	Fingerprint        *Fingerprint `json:"fingerprint"`
	FingerprintUnknown bool         `json:"fingerprint_unknown"`
	// Mismatches are the settings on which a path's two ends disagree.
	// Never null in JSON.
	Mismatches []Mismatch `json:"mismatches"`
	// ClockOffset is how far the peer's realtime clock is ahead of this
	// node's (negative: behind), from the timestamps of the control
	// exchange (NTP's on-wire method: ((T2-T1)+(T3-T4))/2), and
	// ClockOffsetError its error bound (half the round trip without the
	// peer's claimed hold): the true offset lies within offset ± error.
	// The best (smallest error) of the last ClockSamples exchanges; both
	// are 0 and meaningless while ClockSamples is 0 (a peer that predates
	// the clock extension, or not answered yet). docs/PROBES.md, "Clock
	// offset".
	ClockOffset      time.Duration `json:"clock_offset_ns"`
	ClockOffsetError time.Duration `json:"clock_offset_error_ns"`
	ClockSamples     int           `json:"clock_samples"`
}

// MarshalJSON writes Peer with paths and mismatches as [] rather than null.
// By hand, not withLists: a status has a Peer per configured peer (1,000s),
// and reflection over its fields for each would show in GET /v1/status.
func (p Peer) MarshalJSON() ([]byte, error) {
	type plain Peer
	q := plain(p)
	if q.Paths == nil {
		q.Paths = []PeerPath{}
	}
	if q.Mismatches == nil {
		q.Mismatches = []Mismatch{}
	}
	return json.Marshal(q)
}

// A PeerPath is the probes from one local port to one port of the peer.
// Statistics cover the last [probe] window probes.
type PeerPath struct {
	Local     string    `json:"local"`
	RemoteGID string    `json:"remote_gid"`
	RemoteQPN uint32    `json:"remote_qpn"`
	State     string    `json:"state"`
	Since     time.Time `json:"since"`
	// RTT is the round trip as this node measured it (its own send and
	// receive times), the responder's host delay included; HostDelay is
	// what the responder says it held the probe, the peer's claim,
	// reported apart and never subtracted.
	RTTP50       time.Duration `json:"rtt_p50_ns"`
	RTTP99       time.Duration `json:"rtt_p99_ns"`
	HostDelayP99 time.Duration `json:"host_delay_p99_ns"`
	LastRTT      time.Duration `json:"last_rtt_ns"` // of the last answered probe, as measured
	LossPct      float64       `json:"loss_pct"`
	Samples      int           `json:"samples"`
	Sent         uint64        `json:"sent"` // since start
	Lost         uint64        `json:"lost"` // since start
	// Authenticated reports whether the last reply on this path carried
	// a valid tag of the fleet key.
	Authenticated bool `json:"authenticated"`
	// RTTHist counts every answered probe's RTT since the prober started
	// (Count is Sent - Lost, or a little more: it is the path's live
	// histogram, which goes on counting after the state was published;
	// SharedRTTHistogram); not in the JSON, for the metrics. Nil in a
	// state that has none.
	RTTHist *SharedRTTHistogram `json:"-"`
	// Flows are the path's probe flows ([probe] flows), each a probe QP
	// of the local port with a UDP source port of its own, so one of the
	// fabric's equal-cost paths: one entry when the path probes on one
	// (flows = 1, or a peer that does not admit more). LossyFlows counts
	// those lossy now; a path with some lossy and others clean is
	// degraded.
	Flows      []PeerFlow `json:"flows"`
	LossyFlows int        `json:"lossy_flows"`
}

// MarshalJSON writes PeerPath with flows as [] rather than null.
func (p PeerPath) MarshalJSON() ([]byte, error) {
	type plain PeerPath
	q := plain(p)
	if q.Flows == nil {
		q.Flows = []PeerFlow{}
	}
	return json.Marshal(q)
}

// A PeerFlow is one probe flow of a path: its figures over its own last
// [probe] window probes (loss, RTT percentiles) and since start (sent,
// lost).
type PeerFlow struct {
	Flow int `json:"flow"` // index among the path's flows, from 0
	// SourcePort is the UDP source port of the flow's probes as the
	// provider computes it (Soft-RoCE: from the QPN), 0 when it cannot be
	// known from the host (hardware adapters); QPN is the local probe QP
	// it leaves from.
	SourcePort uint16 `json:"source_port"`
	// Lossy, beside SourcePort rather than last, keeps a PeerFlow at 56
	// bytes, not 64: a state holds one per flow of every path.
	Lossy   bool          `json:"lossy"`
	QPN     uint32        `json:"qpn"`
	Sent    uint64        `json:"sent"`
	Lost    uint64        `json:"lost"`
	LossPct float64       `json:"loss_pct"`
	RTTP50  time.Duration `json:"rtt_p50_ns"`
	RTTP99  time.Duration `json:"rtt_p99_ns"`
}

// PeerCounters count what the probes dropped and answered.
type PeerCounters struct {
	ControlMalformed uint64 `json:"control_malformed"` // control messages dropped as malformed
	ControlRefused   uint64 `json:"control_refused"`   // control queries from sources not allowed
	ControlAnswered  uint64 `json:"control_answered"`
	// With a fleet key: control messages dropped for carrying no tag
	// while one is required, and for a tag that does not verify.
	ControlUnauthenticated uint64 `json:"control_unauthenticated"`
	ControlBadTag          uint64 `json:"control_bad_tag"`
	// ControlRateLimited counts allowed queries dropped because their
	// source asked more often than the admission rate allows.
	ControlRateLimited uint64 `json:"control_rate_limited"`
	ProbeMalformed     uint64 `json:"probe_malformed"`  // probe payloads dropped as malformed
	ProbeUnadmitted    uint64 `json:"probe_unadmitted"` // probes from senders that did not query first
	ProbesAnswered     uint64 `json:"probes_answered"`
	// ProbeUnsolicited counts replies that matched no probe this node has
	// in flight (wrong sequence, QPN or source GID): forged or very late.
	ProbeUnsolicited uint64 `json:"probe_unsolicited"`
	// With a fleet key: probe payloads whose tag did not verify, and
	// untagged ones dropped because tags are required.
	ProbeBadTag   uint64 `json:"probe_bad_tag"`
	ProbeUntagged uint64 `json:"probe_untagged"`
	ProbesNotSent uint64 `json:"probes_not_sent"` // send slots full or port gone

	// ControlOverflow counts control messages the kernel dropped because
	// the control socket's receive buffer was full.
	ControlOverflow uint64 `json:"control_overflow"`
}

// Config describes the configuration in force.
type Config struct {
	Path       string    `json:"path"`
	Files      []string  `json:"files"`
	Generation uint64    `json:"generation"`
	LoadedAt   time.Time `json:"loaded_at"`
	// Error is the last load's error; empty when the last load succeeded.
	// A failed load never replaces the running configuration.
	Error string `json:"error"`
	// Failures counts the loads rejected since rdmad started (at start,
	// on reload and on file changes).
	Failures uint64 `json:"failures"`
	// PendingRestart lists the keys ("daemon.socket", "probe.peers") whose
	// value in the configuration in force differs from the one rdmad runs
	// with, because they take effect only when rdmad restarts. Empty when
	// nothing waits for a restart. Never null in JSON.
	PendingRestart []string `json:"pending_restart"`
}

// MarshalJSON writes Config with files and pending_restart as [] rather
// than null.
func (c Config) MarshalJSON() ([]byte, error) {
	type plain Config // no methods: no recursion
	return json.Marshal(plain(withLists(c)))
}

// PolicyState is the state of every declared policy.
type PolicyState struct {
	Policies []PolicyStatus `json:"policies"`
	// Overridden lists the settings a policy declares that a later policy
	// sets on the same object (the later one wins, as drop-ins override
	// the main file): they are not applied, and not silently either.
	Overridden []Override `json:"overridden"`
}

// An Override is one setting (Kind: mtu, qos, ecn or roce) of one Object
// that Policy declares and the later policy By sets instead.
type Override struct {
	Policy string `json:"policy"`
	Kind   string `json:"kind"`
	Object string `json:"object"`
	By     string `json:"by"`
}

// A PolicyStatus is one [[policy]] block and its targets.
type PolicyStatus struct {
	Name    string   `json:"name"`
	Mode    string   `json:"mode"`
	Targets []Target `json:"targets"`
}

// Target states.
const (
	InSync      = "in-sync"
	Drifted     = "drifted" // observe mode: actual differs from desired
	Applied     = "applied" // enforce mode: the last pass changed it
	Unsupported = "unsupported"
	TargetError = "error"
)

// A Target is one setting on one object (MTU of ens1f0, PFC of ens1f0, ToS
// of mlx5_0/1, ...).
type Target struct {
	Kind       string    `json:"kind"`   // mtu, qos, roce, memlock
	Object     string    `json:"object"` // netdev, device/port or "rdmad"
	Desired    string    `json:"desired"`
	Actual     string    `json:"actual"`
	State      string    `json:"state"`
	Error      string    `json:"error,omitempty"`
	LastChange time.Time `json:"last_change"`
	Applies    uint64    `json:"applies"`
	Drifts     uint64    `json:"drifts"`
}

// A Change is one difference between desired and actual state, as
// `rdmactl policy diff` shows it (GET /v1/policy/diff).
type Change struct {
	Policy string `json:"policy"`
	Kind   string `json:"kind"`
	Object string `json:"object"`
	From   string `json:"from"`
	To     string `json:"to"`
	// Action is what enforcement does: "apply", or "report" for a policy
	// in observe mode.
	Action string `json:"action"`
}

// A Component is the health of one part of the daemon.
type Component struct {
	State string `json:"state"`
	// Error says what failed (state "error"; with state "ok", a partial
	// failure such as bad lines of [probe] peers_file).
	Error string `json:"error,omitempty"`
	// Reason explains a component that is "disabled" or "unavailable"
	// (what switched it off, what it lacks on this node, and what to do):
	// no failure, so never in Error.
	Reason string    `json:"reason,omitempty"`
	Since  time.Time `json:"since"`
}

// Detail is the text a component's state rests on: its error (what failed)
// and its reason (why it is disabled or unavailable, and what to do), each
// when set, joined by "; ". The daemon sets one or the other; an older
// rdmad that put the reason in Error reads whole too.
func (c Component) Detail() string {
	switch {
	case c.Error == "":
		return c.Reason
	case c.Reason == "":
		return c.Error
	}
	return c.Error + "; " + c.Reason
}

// NoDevice says why a node without RDMA devices is not healthy, and what to
// do: the daemon's summary and rdmactl status print it.
const NoDevice = "no RDMA device: rdmad can prove nothing on this node. Load the NIC's RDMA driver " +
	"(e.g. modprobe mlx5_ib) or, for Soft-RoCE, run `rdma link add rxe0 type rxe netdev eth0`, " +
	"then `ls /sys/class/infiniband` must list the device"

// NoDevices reports whether the inventory has been read and found no RDMA
// device. Before the first read (no "inventory" component yet) it is false;
// an inventory that could not be read is an error of its own.
func (s *Snapshot) NoDevices() bool {
	c, ok := s.Components["inventory"]
	return ok && c.State != Error && len(s.Devices) == 0
}

// Healthy reports whether nothing in s needs an operator. It is the health
// verdict (s.Health, GET /v1/health) where the snapshot has one. A
// snapshot without one (an older rdmad) is healthy when the configuration
// loaded, no component is in error, no policy target failed or drifted,
// and there is at least one RDMA device.
func (s *Snapshot) Healthy() bool {
	if s.Health.Status != "" {
		return s.Health.Healthy
	}
	if s.Config.Error != "" {
		return false
	}
	if s.NoDevices() {
		return false
	}
	for _, c := range s.Components {
		if c.State == Error {
			return false
		}
	}
	for _, p := range s.Policy.Policies {
		for _, t := range p.Targets {
			if t.State == TargetError || t.State == Drifted {
				return false
			}
		}
	}
	return true
}
