// Package watch serves GET /v1/watch: a newline-delimited JSON stream of
// changes of rdmad's state.
//
// One goroutine per Hub (not per client) follows the state.Store, diffs each
// snapshot it sees against the previous one and fans the resulting events
// out to the clients through bounded per-client queues. A client that falls
// behind is dropped with a final "dropped" line; nothing a client does can
// block the daemon.
package watch

import (
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/rdmad/rdmad/daemon/state"
)

// Event types.
const (
	// Hello is the first line of every stream; Seq is the snapshot the
	// stream starts after.
	Hello = "hello"
	// Link is a change of a port's state or physical state, or a port that
	// appeared ("absent" -> ...) or disappeared (... -> "absent").
	Link = "link"
	// Policy is a change of a policy target's state.
	Policy = "policy"
	// Config is a change of the configuration generation or load error.
	Config = "config"
	// Component is a change of a component's state or error.
	Component = "component"
	// Daemon is a change of rdmad's own state (running, degraded, ...).
	Daemon = "daemon"
	// Dropped is the last line to a client that could not keep up.
	Dropped = "dropped"
	// Bye is the last line when rdmad stops.
	Bye = "bye"
	// Heartbeat is sent after a quiet spell (Options.Heartbeat): it says
	// the stream is alive and changes nothing; Seq is the last event's.
	// Clients skip it (the typed client does); clients that print unknown
	// types still work.
	Heartbeat = "heartbeat"
)

// Absent is From or To of a Link event for a port that appeared or vanished.
const Absent = "absent"

// An Event is one line of the stream.
type Event struct {
	// Seq is the snapshot (GET /v1/status seq) that showed the change. A
	// gap in Seq between events is normal: snapshots that changed nothing
	// watched produce no events, and changes that reverted between two
	// snapshots the hub saw are not seen.
	Seq  uint64    `json:"seq"`
	Time time.Time `json:"time"`
	Type string    `json:"type"`
	// Object names what changed: "mlx5_0/1" (link), "fabric/mtu/ens1f0"
	// (policy: policy/kind/object), a component's name, "config" or
	// "rdmad".
	Object string `json:"object,omitempty"`
	From   string `json:"from,omitempty"`
	To     string `json:"to,omitempty"`
	// Message explains the change, or why the stream ends.
	Message string `json:"message,omitempty"`
}

// String formats e for people, as `rdmactl watch` prints it.
func (e Event) String() string {
	ts := e.Time.Local().Format("15:04:05.000")
	switch e.Type {
	case Hello, Dropped, Bye, Heartbeat:
		return fmt.Sprintf("%s %-9s seq %d: %s", ts, e.Type, e.Seq, e.Message)
	}
	s := fmt.Sprintf("%s %-9s %s: %s -> %s", ts, e.Type, e.Object, dash(e.From), dash(e.To))
	if e.Message != "" {
		s += " (" + e.Message + ")"
	}
	return s
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// Diff returns the events that lead from prev to next, in a stable order:
// daemon, config, components, links, policy targets.
func Diff(prev, next *state.Snapshot) []Event {
	var evs []Event
	add := func(typ, obj, from, to, msg string) {
		evs = append(evs, Event{Seq: next.Seq, Time: next.UpdatedAt, Type: typ, Object: obj, From: from, To: to, Message: msg})
	}
	if prev.State != next.State {
		add(Daemon, "rdmad", prev.State, next.State, next.Summary)
	}
	if prev.Config.Generation != next.Config.Generation {
		add(Config, "generation", strconv.FormatUint(prev.Config.Generation, 10), strconv.FormatUint(next.Config.Generation, 10), "configuration loaded")
	}
	if prev.Config.Error != next.Config.Error {
		switch {
		case next.Config.Error == "":
			add(Config, "error", "error", "ok", "the configuration loads again")
		default:
			add(Config, "error", okOr(prev.Config.Error), "error", next.Config.Error)
		}
	}

	for _, name := range unionKeys(prev.Components, next.Components) {
		p, pok := prev.Components[name]
		n, nok := next.Components[name]
		if pok && nok && p.State == n.State && p.Error == n.Error {
			continue
		}
		from, to := p.State, n.State
		if !pok {
			from = Absent
		}
		if !nok {
			to = Absent
		}
		add(Component, name, from, to, n.Error)
	}

	pp, np := ports(prev), ports(next)
	for _, key := range unionKeys(pp, np) {
		p, pok := pp[key]
		n, nok := np[key]
		if pok && nok && p == n {
			continue
		}
		from, to := p, n
		if !pok {
			from = Absent
		}
		if !nok {
			to = Absent
		}
		add(Link, key, from, to, "")
	}

	pt, nt := targets(prev), targets(next)
	for _, key := range unionKeys(pt, nt) {
		p, pok := pt[key]
		n, nok := nt[key]
		if pok && nok && p.State == n.State && p.Actual == n.Actual && p.Error == n.Error {
			continue
		}
		from, to := p.State, n.State
		if !pok {
			from = Absent
		}
		if !nok {
			to = Absent
		}
		msg := n.Error
		if msg == "" && nok {
			msg = fmt.Sprintf("desired %s, actual %s", dash(n.Desired), dash(n.Actual))
		}
		add(Policy, key, from, to, msg)
	}
	return evs
}

func okOr(s string) string {
	if s == "" {
		return "ok"
	}
	return "error"
}

// ports maps "device/port" to "STATE/PhysState".
func ports(s *state.Snapshot) map[string]string {
	m := map[string]string{}
	for _, d := range s.Devices {
		for _, p := range d.Ports {
			m[fmt.Sprintf("%s/%d", d.Name, p.Port)] = p.State + "/" + p.PhysState
		}
	}
	return m
}

// targets maps "policy/kind/object" to its target.
func targets(s *state.Snapshot) map[string]state.Target {
	m := map[string]state.Target{}
	for _, p := range s.Policy.Policies {
		for _, t := range p.Targets {
			m[p.Name+"/"+t.Kind+"/"+t.Object] = t
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
