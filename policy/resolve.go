// Package policy decides what the node's RDMA settings should be: it matches
// the declared [[policy]] blocks against the netdevs and RDMA ports that exist
// and resolves, per object and setting, which policy is in charge. The
// appliers in its sub-packages (mtu, qos, ecn, roce, memlock) act; the daemon's
// reconciler orchestrates.
package policy

import (
	"fmt"
	"path"
	"sort"
	"strings"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/policy/nicq"
	"github.com/rdmad/rdmad/policy/qos"
)

// A Rule is one declared policy, as the daemon converts it from a
// [[policy]] block of the configuration: what it selects and what it wants
// of the objects it selects.
type Rule struct {
	Name string
	// Netdevs and Devices are shell globs (path.Match syntax) over netdev
	// names and RDMA device names.
	Netdevs, Devices []string
	// Observe makes the rule report drift only, never apply.
	Observe bool
	// MTU of selected netdevs; 0 leaves it unmanaged.
	MTU int
	// QoS of selected netdevs; nil leaves it unmanaged.
	QoS *qos.Desired
	// RoCE are the RDMA-CM defaults of selected ports; nil leaves them
	// unmanaged.
	RoCE *RoCERule
	// ECN is DCQCN on selected netdevs; nil leaves it unmanaged.
	ECN *ECNRule
	// NIC are the ethtool queue parameters of selected netdevs by group
	// kind (nicq.Rings.Kind, ...): ring sizes, channel counts,
	// interrupt coalescing. A group that is absent is unmanaged.
	NIC map[string]nicq.Values
	// Firmware is the firmware version the selected RDMA devices should
	// run, as a constraint ("22.39.1002", ">=22.39.1002"); "" has none.
	// rdmad never flashes firmware: a mismatch is only reported.
	Firmware string
	// AdaptiveModeration is the RDMA devices' CQ adaptive interrupt
	// moderation (DIM) over RDMA netlink; nil leaves it unmanaged.
	AdaptiveModeration *bool
	// OptionalCounters are the optional hardware counters the selected
	// ports should have enabled, sorted, every other optional counter
	// off; empty turns them all off, nil leaves them unmanaged.
	OptionalCounters *[]string
	// QPCounters is the selected ports' QP counter mode
	// (rdmanl.QPCountersAuto or QPCountersOff); "" leaves it unmanaged.
	QPCounters string
}

// An ECNRule is what a Rule wants of DCQCN on its netdevs: the priorities
// (0-7, ascending) on which the notification point (NP) and the reaction
// point (RP) are enabled. nil leaves a point unmanaged; an empty list
// disables it on every priority.
type ECNRule struct {
	NP, RP []int
}

// Mode is how status names the rule's mode: "observe" or "enforce".
func (r Rule) Mode() string {
	if r.Observe {
		return "observe"
	}
	return "enforce"
}

// A RoCERule is what a Rule wants of RDMA-CM on its ports.
type RoCERule struct {
	// ToS is the default type of service (0-255); nil leaves it unmanaged.
	ToS *int
	// Mode is "v1" or "v2"; empty leaves it unmanaged.
	Mode string
}

// A Port is an RDMA port and the netdev it runs over ("" for InfiniBand ports
// without IPoIB).
type Port struct {
	Device string
	Port   int
	Netdev string
}

func (p Port) String() string { return fmt.Sprintf("%s/%d", p.Device, p.Port) }

// A Source names the policy a desired value comes from.
type Source struct {
	Policy string
	// Observe reports whether the policy only observes (mode = "observe").
	Observe bool
}

// NetdevWant is what the policies want of one netdev.
type NetdevWant struct {
	MTU    int // 0: unmanaged
	MTUSrc Source
	QoS    *qos.Desired // nil: unmanaged
	QoSSrc Source
	ECN    *ECNRule // nil: unmanaged
	ECNSrc Source
	// NIC is what the policies want of the ethtool queue parameters, by
	// group kind; each group is resolved on its own.
	NIC map[string]NICWant
}

// A NICWant is one group of ethtool queue parameters a policy wants.
type NICWant struct {
	Values nicq.Values
	Src    Source
}

// DeviceWant is what the policies want of one RDMA device.
type DeviceWant struct {
	Firmware    string // "": unmanaged
	FirmwareSrc Source
	DIM         *bool // nil: unmanaged
	DIMSrc      Source
}

// PortWant is what the policies want of one RDMA port.
type PortWant struct {
	ToS     *int   // nil: unmanaged
	Mode    string // "", "v1" or "v2"
	RoCESrc Source
	// RoCE says whether a [policy.roce] is in charge of the port (ToS
	// and Mode may both be unset by one that only selects).
	RoCE bool
	// Counters are the optional counters to enable (nil: unmanaged).
	Counters    *[]string
	CountersSrc Source
	QPCounters  string // "": unmanaged
	QPSrc       Source
}

// Desired is the resolved policy for every matched object.
type Desired struct {
	Netdevs map[string]NetdevWant
	Ports   map[Port]PortWant
	Devices map[string]DeviceWant
	// Matches lists, per policy name, the objects it is in charge of (for
	// status: a policy that matches nothing says so).
	Matches map[string][]string
	// Overridden lists the settings a policy declares for an object that a
	// later policy sets too (and wins), so that status and policy diff
	// show them instead of dropping them silently; sorted.
	Overridden []apitype.Override
}

// Resolve matches policies against netdevs and ports.
//
// A policy selects a netdev when one of its netdevs globs matches the name,
// or when one of its devices globs matches an RDMA device with a port over
// that netdev. It selects an RDMA port when one of its devices globs matches
// the device, or one of its netdevs globs matches the port's netdev. When
// several policies set the same thing on the same object, the later one in
// configuration order wins (drop-ins are merged after the main file, so a
// drop-in overrides it); MTU, [policy.qos], [policy.ecn], [policy.roce],
// [policy.rings], [policy.channels], [policy.coalesce], firmware and each
// [policy.rdma] key are resolved separately (a table as a whole: a later
// [policy.rings] with only rx leaves tx unmanaged).
func Resolve(policies []Rule, netdevs []string, ports []Port) Desired {
	d := Desired{Netdevs: map[string]NetdevWant{}, Ports: map[Port]PortWant{}, Devices: map[string]DeviceWant{}, Matches: map[string][]string{}}
	for _, p := range policies {
		d.Matches[p.Name] = []string{}
		src := Source{Policy: p.Name, Observe: p.Observe}
		selected := map[string]bool{}
		for _, nd := range netdevs {
			if anyMatch(p.Netdevs, nd) {
				selected[nd] = true
			}
		}
		for _, pt := range ports {
			if pt.Netdev != "" && anyMatch(p.Devices, pt.Device) {
				selected[pt.Netdev] = true
			}
		}
		for nd := range selected {
			if p.MTU == 0 && p.QoS == nil && p.ECN == nil && len(p.NIC) == 0 {
				break
			}
			w := d.Netdevs[nd]
			if p.MTU != 0 {
				d.override(w.MTU != 0, w.MTUSrc, "mtu", nd, p.Name)
				w.MTU, w.MTUSrc = p.MTU, src
			}
			if p.QoS != nil {
				d.override(w.QoS != nil, w.QoSSrc, "qos", nd, p.Name)
				q := *p.QoS
				w.QoS, w.QoSSrc = &q, src
			}
			if p.ECN != nil {
				d.override(w.ECN != nil, w.ECNSrc, "ecn", nd, p.Name)
				e := *p.ECN
				w.ECN, w.ECNSrc = &e, src
			}
			for kind, v := range p.NIC {
				if w.NIC == nil {
					w.NIC = map[string]NICWant{} // this netdev's own
				}
				w.NIC[kind] = NICWant{Values: v, Src: src}
			}
			d.Netdevs[nd] = w
			d.Matches[p.Name] = append(d.Matches[p.Name], nd)
		}
		if p.Firmware != "" || p.AdaptiveModeration != nil {
			for _, pt := range ports {
				if !anyMatch(p.Devices, pt.Device) && !(pt.Netdev != "" && anyMatch(p.Netdevs, pt.Netdev)) {
					continue
				}
				w := d.Devices[pt.Device]
				if p.Firmware != "" {
					w.Firmware, w.FirmwareSrc = p.Firmware, src
				}
				if p.AdaptiveModeration != nil {
					on := *p.AdaptiveModeration
					w.DIM, w.DIMSrc = &on, src
				}
				d.Devices[pt.Device] = w
				d.Matches[p.Name] = append(d.Matches[p.Name], pt.Device)
			}
		}
		if p.RoCE != nil || p.OptionalCounters != nil || p.QPCounters != "" {
			for _, pt := range ports {
				if !anyMatch(p.Devices, pt.Device) && !(pt.Netdev != "" && anyMatch(p.Netdevs, pt.Netdev)) {
					continue
				}
				w := d.Ports[pt]
				if p.RoCE != nil {
					d.override(w.RoCE, w.RoCESrc, "roce", pt.String(), p.Name)
					w.ToS, w.Mode, w.RoCESrc, w.RoCE = p.RoCE.ToS, p.RoCE.Mode, src, true
				}
				if p.OptionalCounters != nil {
					d.override(w.Counters != nil, w.CountersSrc, "optional_counters", pt.String(), p.Name)
					w.Counters, w.CountersSrc = p.OptionalCounters, src
				}
				if p.QPCounters != "" {
					d.override(w.QPCounters != "", w.QPSrc, "qp_counters", pt.String(), p.Name)
					w.QPCounters, w.QPSrc = p.QPCounters, src
				}
				d.Ports[pt] = w
				d.Matches[p.Name] = append(d.Matches[p.Name], pt.String())
			}
		}
		sort.Strings(d.Matches[p.Name])
		d.Matches[p.Name] = dedup(d.Matches[p.Name])
	}
	sort.Slice(d.Overridden, func(i, j int) bool {
		a, b := d.Overridden[i], d.Overridden[j]
		if a.Object != b.Object {
			return a.Object < b.Object
		}
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		return a.Policy < b.Policy
	})
	return d
}

// override records that policy by takes kind of object over from the
// policy of prev, when set says that one was in charge. A policy that
// selects an object twice (by netdev and by device) does not override
// itself.
func (d *Desired) override(set bool, prev Source, kind, object, by string) {
	if set && prev.Policy != by {
		d.Overridden = append(d.Overridden, apitype.Override{Policy: prev.Policy, Kind: kind, Object: object, By: by})
	}
}

func anyMatch(globs []string, name string) bool {
	for _, g := range globs {
		if ok, _ := path.Match(g, name); ok {
			return true
		}
	}
	return false
}

func dedup(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// FormatQoS renders a QoS setting for status ("trust=dscp pfc=3 dscp=26:3,48:6").
func FormatQoS(trust string, pfc []int, dscp map[int]int, pfcManaged, dscpManaged bool) string {
	var parts []string
	if trust != "" {
		parts = append(parts, "trust="+trust)
	}
	if pfcManaged {
		parts = append(parts, "pfc="+apitype.FormatPriorities(pfc))
	}
	if dscpManaged {
		keys := make([]int, 0, len(dscp))
		for k := range dscp {
			keys = append(keys, k)
		}
		sort.Ints(keys)
		ms := make([]string, len(keys))
		for i, k := range keys {
			ms[i] = fmt.Sprintf("%d:%d", k, dscp[k])
		}
		if len(ms) == 0 {
			ms = []string{"none"}
		}
		parts = append(parts, "dscp="+strings.Join(ms, ","))
	}
	return strings.Join(parts, " ")
}
