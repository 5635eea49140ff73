package state

import (
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
)

// A Diff is what changed between two snapshots: the one comparison that
// the watch stream (Events), the D-Bus signals and anything else that
// follows the Store consume, so that they never disagree about what
// happened.
type Diff struct {
	Seq  uint64    // the newer snapshot's
	Time time.Time // the newer snapshot's UpdatedAt

	// Daemon is set when rdmad's own state changed.
	Daemon *Transition
	// Generation is set when a configuration loaded (from/to generation).
	Generation *Transition
	// ConfigError is set when the load error appeared, changed or cleared
	// (To "" when the configuration loads again).
	ConfigError *Transition
	Components  []ComponentChange
	// Devices are the RDMA devices that appeared or vanished (their ports
	// are in Links too).
	Devices []DeviceChange
	Links   []LinkChange
	Targets []TargetChange
	Peers   []PeerChange
	// Health are the verdict's conditions whose status or objects changed
	// (docs/HEALTH.md).
	Health []HealthChange
}

// A HealthChange is a condition of the health verdict whose status or
// objects changed; From is "" for a condition the older snapshot lacks.
type HealthChange struct {
	Type     string
	From, To string
	// Cond is the newer condition.
	Cond apitype.Condition
}

// A Transition is a value before and after.
type Transition struct{ From, To string }

// A ComponentChange is a component whose state, error or reason changed;
// From or To is apitype.Absent for a component that appeared or vanished.
type ComponentChange struct {
	Name     string
	From, To string
	Error    string // the newer error, or else the newer reason
}

// A DeviceChange is an RDMA device that appeared (Added) or vanished.
type DeviceChange struct {
	Name  string
	Added bool
	Ports int // the newer device's port count (0 when it vanished)
}

// A LinkChange is a port whose state or physical state changed, or that
// appeared or vanished (with its device or alone).
type LinkChange struct {
	Device string
	Port   int
	Netdev string
	// Old and New are nil for a port that appeared or vanished.
	Old, New *apitype.Port
}

// Key is "device/port".
func (c LinkChange) Key() string { return fmt.Sprintf("%s/%d", c.Device, c.Port) }

// A TargetChange is a policy target whose state, actual value or error
// changed, or that appeared or vanished.
type TargetChange struct {
	Policy string
	// Old and New are nil for a target that appeared or vanished.
	Old, New *apitype.Target
}

// A PeerChange is a probed peer whose state changed. A peer that appears
// in state unknown is no change; one that appears already up or down is
// one, From unknown. Removed is set for a peer that is no longer listed
// (dropped from the configuration or the rotation): To is then "".
type PeerChange struct {
	Name     string
	From, To string
	Reason   string
	Removed  bool
}

// Compare returns what changed from prev to next.
func Compare(prev, next *apitype.Snapshot) Diff {
	d := Diff{Seq: next.Seq, Time: next.UpdatedAt}
	if prev.State != next.State {
		d.Daemon = &Transition{prev.State, next.State}
	}
	if prev.Config.Generation != next.Config.Generation {
		d.Generation = &Transition{strconv.FormatUint(prev.Config.Generation, 10), strconv.FormatUint(next.Config.Generation, 10)}
	}
	if prev.Config.Error != next.Config.Error {
		d.ConfigError = &Transition{prev.Config.Error, next.Config.Error}
	}

	for _, name := range unionKeys(prev.Components, next.Components) {
		p, pok := prev.Components[name]
		n, nok := next.Components[name]
		if pok && nok && p.State == n.State && p.Error == n.Error && p.Reason == n.Reason {
			continue
		}
		from, to := p.State, n.State
		if !pok {
			from = apitype.Absent
		}
		if !nok {
			to = apitype.Absent
		}
		d.Components = append(d.Components, ComponentChange{Name: name, From: from, To: to, Error: n.Detail()})
	}

	pd, nd := devices(prev), devices(next)
	for _, name := range unionKeys(pd, nd) {
		_, pok := pd[name]
		n, nok := nd[name]
		if pok != nok {
			d.Devices = append(d.Devices, DeviceChange{Name: name, Added: nok, Ports: len(n.Ports)})
		}
	}

	pp, np := ports(prev), ports(next)
	for _, key := range unionKeys(pp, np) {
		p, pok := pp[key]
		n, nok := np[key]
		if pok && nok && p.port.State == n.port.State && p.port.PhysState == n.port.PhysState {
			continue
		}
		c := LinkChange{}
		if pok {
			c.Device, c.Port, c.Netdev, c.Old = p.dev, p.port.Port, p.port.Netdev, &p.port
		}
		if nok {
			c.Device, c.Port, c.Netdev, c.New = n.dev, n.port.Port, n.port.Netdev, &n.port
		}
		d.Links = append(d.Links, c)
	}

	pt, nt := targets(prev), targets(next)
	for _, key := range unionKeys(pt, nt) {
		p, pok := pt[key]
		n, nok := nt[key]
		if pok && nok && p.t.State == n.t.State && p.t.Actual == n.t.Actual && p.t.Error == n.t.Error {
			continue
		}
		c := TargetChange{}
		if pok {
			c.Policy, c.Old = p.policy, &p.t
		}
		if nok {
			c.Policy, c.New = n.policy, &n.t
		}
		d.Targets = append(d.Targets, c)
	}

	d.Peers = comparePeers(prev.Peers.Peers, next.Peers.Peers)
	for _, n := range next.Health.Conditions {
		p, _ := prev.Health.Condition(n.Type)
		if p.Status == n.Status && slicesEqual(p.Objects, n.Objects) {
			continue
		}
		d.Health = append(d.Health, HealthChange{Type: n.Type, From: p.Status, To: n.Status, Cond: n})
	}
	return d
}

// comparePeers returns the peers whose state changed from prev to next,
// those that came (from unknown) and those that went (Removed). Every
// publish is compared (the watch stream, D-Bus), and one of a thousand
// peers must not cost two maps of them: a publish that is not the peers'
// shares their list with the one before, and the peer manager lists the
// same peers in the same order from one state to the next, so the lists
// are walked side by side; only when the peers themselves changed (one
// came or went) are they matched by name.
func comparePeers(prev, next []apitype.Peer) []PeerChange {
	if len(prev) == len(next) && (len(next) == 0 || &prev[0] == &next[0]) {
		return nil // the same list
	}
	var out []PeerChange
	if len(prev) == len(next) {
		i := 0
		for ; i < len(next) && prev[i].Name == next[i].Name; i++ {
			if p, n := &prev[i], &next[i]; p.State != n.State {
				out = append(out, PeerChange{Name: n.Name, From: p.State, To: n.State, Reason: n.Reason})
			}
		}
		if i == len(next) {
			return out
		}
		out = out[:0]
	}
	before := make(map[string]string, len(prev))
	for _, p := range prev {
		before[p.Name] = p.State
	}
	seen := make(map[string]bool, len(next))
	for _, p := range next {
		seen[p.Name] = true
		from, ok := before[p.Name]
		if !ok {
			from = apitype.PeerUnknown
		}
		if from != p.State {
			out = append(out, PeerChange{Name: p.Name, From: from, To: p.State, Reason: p.Reason})
		}
	}
	for _, p := range prev {
		if !seen[p.Name] {
			out = append(out, PeerChange{Name: p.Name, From: p.State, Removed: true})
		}
	}
	return out
}

func slicesEqual(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Empty reports whether nothing changed that Diff follows.
func (d Diff) Empty() bool {
	return d.Daemon == nil && d.Generation == nil && d.ConfigError == nil && len(d.Components) == 0 &&
		len(d.Devices) == 0 && len(d.Links) == 0 && len(d.Targets) == 0 && len(d.Peers) == 0 &&
		len(d.Health) == 0
}

// Events returns d as watch stream events, in a stable order: daemon,
// config, components, links, policy targets, peers, health (docs/API.md).
func (d Diff) Events(summary string) []apitype.Event {
	var evs []apitype.Event
	add := func(typ, obj, from, to, msg string) {
		evs = append(evs, apitype.Event{Seq: d.Seq, Time: d.Time, Type: typ, Object: obj, From: from, To: to, Message: msg})
	}
	if t := d.Daemon; t != nil {
		add(apitype.EventDaemon, "rdmad", t.From, t.To, summary)
	}
	if t := d.Generation; t != nil {
		add(apitype.EventConfig, "generation", t.From, t.To, "configuration loaded")
	}
	if t := d.ConfigError; t != nil {
		switch {
		case t.To == "":
			add(apitype.EventConfig, "error", "error", "ok", "the configuration loads again")
		default:
			add(apitype.EventConfig, "error", okOr(t.From), "error", t.To)
		}
	}
	for _, c := range d.Components {
		add(apitype.EventComponent, c.Name, c.From, c.To, c.Error)
	}
	for _, c := range d.Links {
		from, to := apitype.Absent, apitype.Absent
		if c.Old != nil {
			from = c.Old.State + "/" + c.Old.PhysState
		}
		if c.New != nil {
			to = c.New.State + "/" + c.New.PhysState
		}
		add(apitype.EventLink, c.Key(), from, to, "")
	}
	for _, c := range d.Targets {
		from, to, key, msg := apitype.Absent, apitype.Absent, "", ""
		if c.Old != nil {
			from, key = c.Old.State, c.Policy+"/"+c.Old.Kind+"/"+c.Old.Object
		}
		if c.New != nil {
			to, key = c.New.State, c.Policy+"/"+c.New.Kind+"/"+c.New.Object
			msg = c.New.Error
			if msg == "" {
				msg = fmt.Sprintf("desired %s, actual %s", dash(c.New.Desired), dash(c.New.Actual))
			}
		}
		add(apitype.EventPolicy, key, from, to, msg)
	}
	for _, c := range d.Peers {
		to := c.To
		if c.Removed {
			to = apitype.Absent
		}
		add(apitype.EventPeer, c.Name, c.From, to, c.Reason)
	}
	for _, c := range d.Health {
		from := c.From
		if from == "" {
			from = apitype.Absent
		}
		add(apitype.EventHealth, c.Type, from, c.To, c.Cond.Message)
	}
	return evs
}

func okOr(s string) string {
	if s == "" {
		return "ok"
	}
	return "error"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

type devPort struct {
	dev  string
	port apitype.Port
}

// ports maps "device/port" to the port.
func devices(s *apitype.Snapshot) map[string]apitype.Device {
	m := make(map[string]apitype.Device, len(s.Devices))
	for _, d := range s.Devices {
		m[d.Name] = d
	}
	return m
}

func ports(s *apitype.Snapshot) map[string]devPort {
	m := map[string]devPort{}
	for _, d := range s.Devices {
		for _, p := range d.Ports {
			m[fmt.Sprintf("%s/%d", d.Name, p.Port)] = devPort{d.Name, p}
		}
	}
	return m
}

type policyTarget struct {
	policy string
	t      apitype.Target
}

// targets maps "policy/kind/object" to its target.
func targets(s *apitype.Snapshot) map[string]policyTarget {
	m := map[string]policyTarget{}
	for _, p := range s.Policy.Policies {
		for _, t := range p.Targets {
			m[p.Name+"/"+t.Kind+"/"+t.Object] = policyTarget{p.Name, t}
		}
	}
	return m
}

func unionKeys[V any](a, b map[string]V) []string {
	ks := make([]string, 0, len(a)+len(b))
	for k := range a {
		ks = append(ks, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			ks = append(ks, k)
		}
	}
	sort.Strings(ks)
	return ks
}
