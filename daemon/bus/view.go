package bus

import (
	"maps"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon/state"
)

// A Port is one port of a device as the Ports property shows it
// (D-Bus type (usssss)).
type Port struct {
	Port      uint32
	State     string // DOWN, INIT, ARMED, ACTIVE, ACTIVE_DEFER
	PhysState string // Polling, LinkUp, Disabled, ...
	LinkLayer string // InfiniBand or Ethernet
	Netdev    string
	Rate      string
}

// A Target is one policy target as the PolicyTargets properties show it
// (D-Bus type (sssssss)).
type Target struct {
	Policy  string
	Kind    string // mtu, qos, roce, memlock
	Object  string // netdev, device/port or "rdmad"
	Desired string
	Actual  string
	State   string // in-sync, drifted, applied, unsupported, error
	Error   string
}

// A Component is one supervised part of rdmad as the Components property
// shows it (D-Bus type (ss)).
type Component struct {
	State string
	Error string
}

// A PeerEntry is one probed peer as the Peers property shows it (D-Bus
// type (sssssttd)). The figures are those of the peer's worst path, the way
// its State is the worst of its paths' states.
type PeerEntry struct {
	Name    string // as configured: address or host name
	Address string // resolved address, "" until resolved
	Group   string
	State   string // unknown, up, degraded, down
	Reason  string // why it is down or degraded, "" otherwise
	// RTTP50 and RTTP99 are the highest median and 99th percentile round
	// trip (ns, as measured, responder host delay included) among the paths over the
	// [probe] window; 0 before any answer.
	RTTP50 uint64
	RTTP99 uint64
	// LossPct is the highest loss among the paths over the window (%).
	LossPct float64
}

// A peerFigures is a peer's paths reduced to the worst of each figure.
type peerFigures struct {
	p50, p99, lastRTT uint64
	loss              float64
}

// summarisePeer reduces p's paths to the worst of each figure: a peer is
// as good as its worst path, as its State already says.
func summarisePeer(p apitype.Peer) peerFigures {
	ns := func(d time.Duration) uint64 { return uint64(max(d, 0)) }
	var f peerFigures
	for _, pa := range p.Paths {
		f.p50 = max(f.p50, ns(pa.RTTP50))
		f.p99 = max(f.p99, ns(pa.RTTP99))
		f.lastRTT = max(f.lastRTT, ns(pa.LastRTT))
		f.loss = max(f.loss, pa.LossPct)
	}
	return f
}

// A FleetMismatch is one difference between this node's fingerprint and a
// peer's, as the FleetMismatches property shows it (D-Bus type (sssssss)):
// what `rdmactl peers` prints as MISMATCH and doctor's fleet check judges.
type FleetMismatch struct {
	Peer      string
	Field     string // mtu, active_mtu, link_layer, roce_mode, roce_tos, trust, pfc, firmware, driver
	Local     string // this node's value
	PeerValue string // the peer's value
	Severity  string // "must" (a fault) or "info" (firmware, driver)
	LocalPort string
	PeerPort  string
}

// A GroupFault is a group of peers that is the suspect (D-Bus type (ss)).
type GroupFault struct {
	Group  string
	Reason string
}

// fleetMismatches returns the FleetMismatches property of s, by peer in the
// snapshot's order. It changes only when a fingerprint does, so it is
// signalled, unlike Peers.
func fleetMismatches(s *apitype.Snapshot) []FleetMismatch {
	out := []FleetMismatch{}
	for _, p := range s.Peers.Peers {
		for _, m := range p.Mismatches {
			out = append(out, FleetMismatch{Peer: p.Name, Field: m.Field, Local: m.Local, PeerValue: m.Peer,
				Severity: m.Severity, LocalPort: m.LocalPort, PeerPort: m.PeerPort})
		}
	}
	return out
}

// peerGroupFaults returns the PeerGroupFaults property of s.
func peerGroupFaults(s *apitype.Snapshot) []GroupFault {
	out := make([]GroupFault, 0, len(s.Peers.GroupFaults))
	for _, g := range s.Peers.GroupFaults {
		out = append(out, GroupFault{Group: g.Group, Reason: g.Reason})
	}
	return out
}

// peerEntries returns the Peers property of s, in the snapshot's order.
func peerEntries(s *apitype.Snapshot) []PeerEntry {
	out := make([]PeerEntry, 0, len(s.Peers.Peers))
	for _, p := range s.Peers.Peers {
		f := summarisePeer(p)
		out = append(out, PeerEntry{Name: p.Name, Address: p.Address, Group: p.Group, State: p.State,
			Reason: p.Reason, RTTP50: f.p50, RTTP99: f.p99, LossPct: f.loss})
	}
	return out
}

// props holds one object's properties: interface -> property -> value.
type props map[string]map[string]dbus.Variant

// An object is one exported object of a view.
type object struct {
	path  dbus.ObjectPath
	props props
	// lazy holds the properties built on their first read rather than
	// with the view (lazyAgentProps): interface -> property -> value.
	lazy map[string]map[string]func() dbus.Variant
}

// prop returns the value of iface's property name.
func (o *object) prop(iface, name string) (dbus.Variant, bool) {
	if v, ok := o.props[iface][name]; ok {
		return v, true
	}
	if f, ok := o.lazy[iface][name]; ok {
		return f(), true
	}
	return dbus.Variant{}, false
}

// all returns every property of iface, the lazy ones built, or false when
// o has no such interface.
func (o *object) all(iface string) (map[string]dbus.Variant, bool) {
	ps, ok := o.props[iface]
	if !ok || len(o.lazy[iface]) == 0 {
		return ps, ok
	}
	m := maps.Clone(ps)
	for name, f := range o.lazy[iface] {
		m[name] = f()
	}
	return m, true
}

// A view is what the service exports for one snapshot. It is built once per
// snapshot and never modified, so method handlers read it without locks.
type view struct {
	snap    *apitype.Snapshot
	objects map[dbus.ObjectPath]*object
	// nodes maps every path that is a proper prefix of an object's path to
	// its child names, so that introspecting "/", "/org" ... lets busctl
	// tree and gdbus walk down to the objects.
	nodes map[dbus.ObjectPath][]string
}

// DevicePath returns the object path of the device named name.
func DevicePath(name string) dbus.ObjectPath {
	return dbus.ObjectPath(DevicePrefix + "/" + EscapePathElement(name))
}

// newView builds the view of s.
func newView(s *apitype.Snapshot) *view {
	v := &view{snap: s, objects: map[dbus.ObjectPath]*object{}, nodes: map[dbus.ObjectPath][]string{}}
	targets := allTargets(s)
	qos := qosEntries(s)
	var paths []dbus.ObjectPath
	total, active := uint32(0), uint32(0)
	for _, d := range s.Devices {
		p := DevicePath(d.Name)
		paths = append(paths, p)
		dp := deviceProps(d, targets)
		healthDeviceProps(dp, s, d)
		v.objects[p] = &object{path: p, props: props{DeviceInterface: dp}}
		for _, port := range d.Ports {
			total++
			if port.State == "ACTIVE" {
				active++
			}
		}
	}
	if paths == nil {
		paths = []dbus.ObjectPath{}
	}
	comps := make(map[string]Component, len(s.Components))
	for name, c := range s.Components {
		// (state, error): the second field carries a disabled or
		// unavailable component's reason, as it did before Reason.
		comps[name] = Component{State: c.State, Error: c.Detail()}
	}
	v.objects[Path] = &object{path: Path, props: props{Interface: {
		"Version":          dbus.MakeVariant(s.Version),
		"State":            dbus.MakeVariant(s.State),
		"Summary":          dbus.MakeVariant(s.Summary),
		"Healthy":          dbus.MakeVariant(s.Healthy()),
		"ConfigGeneration": dbus.MakeVariant(s.Config.Generation),
		"ConfigError":      dbus.MakeVariant(s.Config.Error),
		"ConfigPath":       dbus.MakeVariant(s.Config.Path),
		"Devices":          dbus.MakeVariant(paths),
		"PortsTotal":       dbus.MakeVariant(total),
		"PortsActive":      dbus.MakeVariant(active),
		"PolicyTargets":    dbus.MakeVariant(targets),
		"Components":       dbus.MakeVariant(comps),
		"Peers":            dbus.MakeVariant(peerEntries(s)),
		"FleetMismatches":  dbus.MakeVariant(fleetMismatches(s)),
		"PeerGroupFaults":  dbus.MakeVariant(peerGroupFaults(s)),
		"QoS":              dbus.MakeVariant(qos),
		"HealthStatus":     dbus.MakeVariant(orUnknown(s.Health.Status)),
		"Health":           dbus.MakeVariant(healthDict(s.Health)),
		// The a{sv} forms of the frozen tuples (records.go).
		"PolicyTargetRecords": dbus.MakeVariant(targetRecords(targets)),
		"QoSRecords":          dbus.MakeVariant(qosRecords(qos)),
	}}, lazy: map[string]map[string]func() dbus.Variant{Interface: lazyProps(s)}}
	for p := range v.objects {
		v.addNodes(p)
	}
	for p := range v.nodes {
		sort.Strings(v.nodes[p])
	}
	return v
}

// addNodes records p's ancestors and their children.
func (v *view) addNodes(p dbus.ObjectPath) {
	elems := strings.Split(strings.TrimPrefix(string(p), "/"), "/")
	parent := "/"
	for _, e := range elems {
		if !contains(v.nodes[dbus.ObjectPath(parent)], e) {
			v.nodes[dbus.ObjectPath(parent)] = append(v.nodes[dbus.ObjectPath(parent)], e)
		}
		if parent == "/" {
			parent += e
		} else {
			parent += "/" + e
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// deviceProps returns the org.rdmad.Agent1.Device properties of d; targets
// are all policy targets, of which d shows those on its netdevs and ports.
func deviceProps(d apitype.Device, targets []Target) map[string]dbus.Variant {
	ports := make([]Port, 0, len(d.Ports))
	netdevs := []string{}
	for _, p := range d.Ports {
		ports = append(ports, Port{Port: uint32(p.Port), State: p.State, PhysState: p.PhysState,
			LinkLayer: p.LinkLayer, Netdev: p.Netdev, Rate: p.Rate})
		if p.Netdev != "" && !contains(netdevs, p.Netdev) {
			netdevs = append(netdevs, p.Netdev)
		}
	}
	mine := []Target{}
	for _, t := range targets {
		if contains(netdevs, t.Object) || t.Object == d.Name || strings.HasPrefix(t.Object, d.Name+"/") {
			mine = append(mine, t)
		}
	}
	return map[string]dbus.Variant{
		"Name":            dbus.MakeVariant(d.Name),
		"NodeType":        dbus.MakeVariant(d.NodeType),
		"NodeGUID":        dbus.MakeVariant(d.NodeGUID),
		"FirmwareVersion": dbus.MakeVariant(d.FWVer),
		"Parent":          dbus.MakeVariant(d.Parent),
		"Uverbs":          dbus.MakeVariant(d.Uverbs),
		"Ports":           dbus.MakeVariant(ports),
		"Netdevs":         dbus.MakeVariant(netdevs),
		"PolicyState":     dbus.MakeVariant(worstState(mine)),
		"PolicyTargets":   dbus.MakeVariant(mine),
		// The a{sv} form of PolicyTargets (records.go).
		"PolicyTargetRecords": dbus.MakeVariant(targetRecords(mine)),
	}
}

// statePriority orders target states from the one that most needs an
// operator; PolicyState shows the first one present.
var statePriority = []string{apitype.TargetError, apitype.Drifted, apitype.Applied, apitype.InSync, apitype.Unsupported}

// worstState summarises targets in one word: the most urgent state among
// them, or "none" when no policy targets the device.
func worstState(ts []Target) string {
	if len(ts) == 0 {
		return "none"
	}
	for _, st := range statePriority {
		for _, t := range ts {
			if t.State == st {
				return st
			}
		}
	}
	return ts[0].State
}

func allTargets(s *apitype.Snapshot) []Target {
	out := []Target{}
	for _, p := range s.Policy.Policies {
		for _, t := range p.Targets {
			out = append(out, Target{Policy: p.Name, Kind: t.Kind, Object: t.Object, Desired: t.Desired,
				Actual: t.Actual, State: t.State, Error: t.Error})
		}
	}
	return out
}

// A signal is one D-Bus signal to emit.
type signal struct {
	path dbus.ObjectPath
	name string // interface.member
	body []any
}

// changes returns the signals that take a client from old to cur, in the
// order they must be emitted: objects that appeared, changed properties,
// link, policy and peer events, then objects that disappeared. old may be nil
// (first export after connecting): then nothing is emitted, because a client
// that (re)appears reads the state with GetManagedObjects.
func changes(old, cur *view) []signal {
	if old == nil {
		return nil
	}
	var sigs []signal
	for _, p := range sortedPaths(cur.objects) {
		if _, ok := old.objects[p]; !ok {
			sigs = append(sigs, signal{Path, ObjectManagerInterface + ".InterfacesAdded",
				[]any{p, cur.objects[p].props}})
		}
	}
	for _, p := range sortedPaths(cur.objects) {
		o, ok := old.objects[p]
		if !ok {
			continue
		}
		n := cur.objects[p]
		for _, iface := range slices.Sorted(maps.Keys(n.props)) {
			changed, invalidated := map[string]dbus.Variant{}, []string{}
			for name, val := range n.props[iface] {
				if unsignalled(iface, name) {
					continue
				}
				if prev, ok := o.props[iface][name]; !ok || !reflect.DeepEqual(prev.Value(), val.Value()) {
					changed[name] = val
				}
			}
			for _, name := range slices.Sorted(maps.Keys(n.lazy[iface])) {
				same := lazyAgentProps[name].same
				switch {
				case same == nil || same(old.snap, cur.snap):
				case invalidatedOnly(iface, name):
					invalidated = append(invalidated, name)
				default:
					changed[name] = n.lazy[iface][name]()
				}
			}
			if len(changed) > 0 || len(invalidated) > 0 {
				sigs = append(sigs, signal{p, PropertiesInterface + ".PropertiesChanged",
					[]any{iface, changed, invalidated}})
			}
		}
	}
	d := state.Compare(old.snap, cur.snap)
	sigs = append(sigs, linkChanges(d)...)
	sigs = append(sigs, policyChanges(d)...)
	sigs = append(sigs, peerChanges(d)...)
	sigs = append(sigs, healthChanges(d)...)
	sigs = append(sigs, probeChanges(old.snap, cur.snap)...)
	for _, p := range sortedPaths(old.objects) {
		if _, ok := cur.objects[p]; !ok {
			sigs = append(sigs, signal{Path, ObjectManagerInterface + ".InterfacesRemoved",
				[]any{p, slices.Sorted(maps.Keys(old.objects[p].props))}})
		}
	}
	return sigs
}

// linkChanges returns a LinkChanged signal for every port whose state or
// physical state changed, and for every port that appeared or vanished
// (with its device or alone: "" is then its old or new state). A device
// that appears or vanishes is also InterfacesAdded/Removed.
func linkChanges(d state.Diff) []signal {
	sigs := make([]signal, 0, len(d.Links))
	for _, c := range d.Links {
		var from, to string
		if c.Old != nil {
			from = c.Old.State
		}
		if c.New != nil {
			to = c.New.State
		}
		sigs = append(sigs, signal{Path, Interface + ".LinkChanged",
			[]any{DevicePath(c.Device), c.Device, uint32(c.Port), from, to, c.Netdev}})
	}
	return sigs
}

// policyChanges returns a PolicyChanged signal for every target whose state
// changed, including targets that appear ("" old state, e.g. a new
// [[policy]] block) or vanish ("" new state). A change of the actual value
// or error alone shows in PolicyTargets, not here.
func policyChanges(d state.Diff) []signal {
	var sigs []signal
	for _, c := range d.Targets {
		var from, to string
		t := c.New
		if c.Old != nil {
			from = c.Old.State
		}
		if c.New != nil {
			to = c.New.State
		} else {
			t = c.Old
		}
		if c.Old != nil && c.New != nil && from == to {
			continue
		}
		sigs = append(sigs, signal{Path, Interface + ".PolicyChanged",
			[]any{c.Policy, t.Kind, t.Object, from, to, t.Desired, t.Actual, t.Error}})
	}
	return sigs
}

// peerChanges returns a PeerStateChanged signal for every peer whose state
// changed (state.PeerChange says when that is). A peer no longer listed
// was dropped from the configuration or the selection, not changed: it
// gets no signal; Peers shows it gone.
func peerChanges(d state.Diff) []signal {
	var sigs []signal
	for _, c := range d.Peers {
		if c.Removed {
			continue
		}
		sigs = append(sigs, signal{Path, Interface + ".PeerStateChanged", []any{c.Name, c.From, c.To, c.Reason}})
	}
	return sigs
}

func sortedPaths(m map[dbus.ObjectPath]*object) []dbus.ObjectPath {
	out := make([]dbus.ObjectPath, 0, len(m))
	for p := range m {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
