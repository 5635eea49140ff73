package apitype

import (
	"encoding/json"
	"strings"
	"time"
)

// The health verdict (GET /v1/health, `rdmactl check`, D-Bus Health,
// rdmad_healthy): whether this node may run RDMA jobs, as a list of
// conditions of stable types that schedulers match on (docs/HEALTH.md).

// Condition statuses, from best to worst for the verdict: a problem
// outweighs an unknown, which outweighs ok.
const (
	ConditionOK      = "ok"
	ConditionUnknown = "unknown"
	ConditionProblem = "problem"
)

// Condition types. A type never changes meaning and is never reused; new
// ones may be added (a consumer treats an unknown type like any other).
const (
	// CondConfig: the configuration in force did not load (the last good
	// one runs).
	CondConfig = "ConfigInvalid"
	// CondInputRefused: a file the configuration names ([probe]
	// peers_file, [probe] key_file) was refused or could not be read, so
	// what it declares is not (or no longer fully) in force.
	CondInputRefused = "InputRefused"
	// CondNoDevice: the node has no RDMA device.
	CondNoDevice = "NoDevice"
	// CondDeviceMissing: an RDMA device the node should have is not
	// there: one [health.expect] declares is missing (or one more is
	// there than it declares), or a PCI function of an RDMA adapter has
	// no RDMA device while its driver's other functions have theirs.
	CondDeviceMissing = "DeviceMissing"
	// CondVerbs: devices are there, but verbs cannot work on them (no
	// uverbs node, libibverbs or the device cannot be opened).
	CondVerbs = "VerbsUnavailable"
	// CondPortDown: an RDMA port is not ACTIVE.
	CondPortDown = "PortDown"
	// CondPortFlapping: a port went down too often within the flap window.
	CondPortFlapping = "PortFlapping"
	// CondSubnetManager: an InfiniBand port has its link up but no
	// subnet manager (INIT, or LID 0 and SM LID 0), so it cannot carry
	// traffic.
	CondSubnetManager = "SubnetManagerMissing"
	// CondLinkDegraded: a port runs below the rate declared for it
	// ([[policy]] min_rate).
	CondLinkDegraded = "LinkDegraded"
	// CondPCIeDegraded: an RDMA device's PCIe link trained below the
	// speed or width its slot and path allow.
	CondPCIeDegraded = "PCIeDegraded"
	// CondLoopback: the loopback probes of a port fail.
	CondLoopback = "LoopbackFailing"
	// CondLoopbackBandwidth: a port's last loopback bandwidth test
	// (rdmactl bw --loopback) measured less than [health]
	// min_loopback_gbps or min_loopback_share of the port's rate.
	CondLoopbackBandwidth = "LoopbackBandwidthLow"
	// CondMRPool: memory registration fails (the MR pool or its canary).
	CondMRPool = "MRRegistrationFailing"
	// CondMemlock: the locked-memory limit is below what the memlock
	// policy declares.
	CondMemlock = "MemlockTooLow"
	// CondPeers: every peer is down from a local port (a local fault).
	CondPeers = "PeersUnreachable"
	// CondKernelFault: the kernel log reported a fault of an RDMA device,
	// its PCI function or its netdev.
	CondKernelFault = "KernelFault"
	// CondPolicy: a declared setting failed to apply or drifted.
	CondPolicy = "PolicyNotConverging"
	// CondDaemon: a part of rdmad itself is in error (its socket, bus,
	// event sources), so what it reports may be stale.
	CondDaemon = "DaemonDegraded"
)

// ConditionTypes lists every condition type in the order GET /v1/health
// reports them: the node's first, then the devices', then the fabric's.
var ConditionTypes = []string{CondConfig, CondInputRefused, CondNoDevice, CondDeviceMissing, CondVerbs, CondPortDown, CondPortFlapping,
	CondSubnetManager, CondLinkDegraded, CondPCIeDegraded, CondLoopback, CondLoopbackBandwidth, CondMRPool, CondMemlock, CondPeers,
	CondKernelFault, CondPolicy, CondDaemon}

// Health is the verdict: one condition per type, always all of them.
type Health struct {
	// Healthy reports whether every condition is ok.
	Healthy bool `json:"healthy"`
	// Status is the worst condition's status: ok, unknown or problem.
	Status     string      `json:"status"`
	Conditions []Condition `json:"conditions"`
}

// A Condition is one kind of check and its result.
type Condition struct {
	Type   string `json:"type"`
	Status string `json:"status"`
	// Reason is one CamelCase word for programs ("PortNotActive",
	// "AllPortsActive", "NotMonitored"); Message says it for people,
	// naming the objects and what to do.
	Reason  string `json:"reason"`
	Message string `json:"message"`
	// Since is when the condition last changed status.
	Since time.Time `json:"since"`
	// Objects are what the condition is about while it is not ok:
	// devices ("mlx5_0"), ports ("mlx5_0/1"); [] for the node.
	Objects []string `json:"objects"`
}

// MarshalJSON writes Health with conditions as [] rather than null.
func (h Health) MarshalJSON() ([]byte, error) {
	type plain Health
	return json.Marshal(plain(withLists(h)))
}

// MarshalJSON writes Condition with objects as [] rather than null.
func (c Condition) MarshalJSON() ([]byte, error) {
	type plain Condition
	return json.Marshal(plain(withLists(c)))
}

// ConditionRank orders statuses for the verdict: ok 0, unknown 1,
// problem 2 (an unrecognised status counts as unknown).
func ConditionRank(status string) int {
	switch status {
	case ConditionOK:
		return 0
	case ConditionProblem:
		return 2
	}
	return 1
}

// Worst returns the condition that decides h's status: the first problem,
// else the first unknown, else nil (all ok).
func (h Health) Worst() *Condition {
	var w *Condition
	for i := range h.Conditions {
		c := &h.Conditions[i]
		if c.Status == ConditionOK {
			continue
		}
		if w == nil || ConditionRank(c.Status) > ConditionRank(w.Status) {
			w = c
		}
	}
	return w
}

// Condition returns h's condition of type t, or false.
func (h Health) Condition(t string) (Condition, bool) {
	for _, c := range h.Conditions {
		if c.Type == t {
			return c, true
		}
	}
	return Condition{}, false
}

// ForDevice is the verdict of one device: every condition of h, with the
// ones about other objects (or about the node alone) shown ok, so that a
// device plugin asking about mlx5_0 is not told of mlx5_1's cable. Objects
// keeps only dev and its ports.
func (h Health) ForDevice(dev string) Health {
	out := Health{Status: ConditionOK, Conditions: make([]Condition, 0, len(h.Conditions))}
	for _, c := range h.Conditions {
		var mine []string
		for _, o := range c.Objects {
			if o == dev || strings.HasPrefix(o, dev+"/") {
				mine = append(mine, o)
			}
		}
		dc := c
		dc.Objects = mine
		if len(mine) == 0 && c.Status != ConditionOK && deviceScoped(c.Type) {
			dc.Status, dc.Reason, dc.Message = ConditionOK, "OtherObjects", "only other devices are concerned"
		}
		if ConditionRank(dc.Status) > ConditionRank(out.Status) {
			out.Status = dc.Status
		}
		out.Conditions = append(out.Conditions, dc)
	}
	out.Healthy = out.Status == ConditionOK
	return out
}

// deviceScoped reports whether conditions of type t name the devices or
// ports they are about, so that a device not named is not concerned. The
// node's conditions (configuration, no device, memlock, policy, rdmad
// itself) concern every device.
func deviceScoped(t string) bool {
	switch t {
	case CondVerbs, CondPortDown, CondPortFlapping, CondSubnetManager, CondLinkDegraded, CondPCIeDegraded,
		CondLoopback, CondMRPool, CondPeers, CondKernelFault:
		return true
	}
	return false
}

// PCIeLink is the PCIe link of an RDMA device's PCI function, read from
// sysfs (/sys/bus/pci/devices/<addr>/{current,max}_link_{speed,width}).
// Speeds are in GT/s (2.5, 5, 8, 16, 32, 64); 0 is unknown.
type PCIeLink struct {
	// Address is the function whose link this is: the device's own, or
	// for a virtual function its physical function's (a VF has no link
	// of its own).
	Address  string  `json:"address"`
	Speed    float64 `json:"speed_gts"`
	Width    int     `json:"width"`
	MaxSpeed float64 `json:"max_speed_gts"`
	MaxWidth int     `json:"max_width"`
	// PathMaxSpeed and PathMaxWidth are the most the link can train to:
	// the smaller of the function's own maxima and those of every bridge
	// up to the root port (a Gen5 NIC in a Gen4 slot expects Gen4).
	PathMaxSpeed float64 `json:"path_max_speed_gts"`
	PathMaxWidth int     `json:"path_max_width"`
	// Limit names the bridge whose maximum set PathMax ("" when the
	// function's own maxima do).
	Limit string `json:"limit,omitempty"`
}

// Degraded reports whether the link trained below what its path allows,
// in speed or in width; an unknown figure is no evidence.
func (l PCIeLink) Degraded() bool {
	return (l.Speed > 0 && l.PathMaxSpeed > 0 && l.Speed < l.PathMaxSpeed) ||
		(l.Width > 0 && l.PathMaxWidth > 0 && l.Width < l.PathMaxWidth)
}

// PCIeGen is the PCIe generation of a speed in GT/s (2.5 -> 1, ... 64 ->
// 6), 0 when it is not one.
func PCIeGen(gts float64) int {
	for i, s := range []float64{2.5, 5, 8, 16, 32, 64} {
		if gts == s {
			return i + 1
		}
	}
	return 0
}

// Kernel-fault classes (KernelFault.Class; docs/HEALTH.md, "Kernel
// faults"): a fatal fault is a KernelFault problem; a non-fatal one is
// counted and shown, and its link downs feed the flap rule, but it is no
// problem alone. Messages of the third class, noise, are no fault at all.
const (
	KernelFatal    = "fatal"
	KernelNonFatal = "nonfatal"
)

// A KernelFault is a kernel log message of severity err or worse about an
// RDMA device (naming it, its PCI function or its netdev) or matching a
// known NIC fault pattern (docs/HEALTH.md, "Kernel faults").
type KernelFault struct {
	Device string `json:"device"`
	// Pattern names what matched: a catalogued pattern ("mlx5-health",
	// "pcie-aer", ...) or "err" for any message of severity err or worse
	// that names the device.
	Pattern string `json:"pattern"`
	// Class is the pattern's class: KernelFatal or KernelNonFatal ("" from
	// an rdmad before classes: fatal).
	Class string `json:"class,omitempty"`
	// Netdev is the port's netdev a per-port pattern's messages named
	// ("link-down"); "" for the others, which are one fault per device.
	Netdev string `json:"netdev,omitempty"`
	// Recent are the times of the last messages (at most 16, oldest
	// first) of a link-down pattern: what the flap rule counts.
	Recent []time.Time `json:"recent,omitempty"`
	// Line is the message as the kernel logged it, printable characters
	// only and bounded.
	Line     string    `json:"line"`
	Priority int       `json:"priority"` // syslog severity, 0 emerg .. 7 debug
	First    time.Time `json:"first"`
	Last     time.Time `json:"last"`
	// Count counts the matching messages for this device and pattern
	// since First.
	Count uint64 `json:"count"`
}

// Fatal reports whether f is of the fatal class (a KernelFault problem).
func (f KernelFault) Fatal() bool { return f.Class != KernelNonFatal }
