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

	"github.com/rdmad/rdmad/client/apitype"
)

// Diff returns the events that lead from prev to next, in a stable order:
// daemon, config, components, links, policy targets.
func Diff(prev, next *apitype.Snapshot) []apitype.Event {
	var evs []apitype.Event
	add := func(typ, obj, from, to, msg string) {
		evs = append(evs, apitype.Event{Seq: next.Seq, Time: next.UpdatedAt, Type: typ, Object: obj, From: from, To: to, Message: msg})
	}
	if prev.State != next.State {
		add(apitype.EventDaemon, "rdmad", prev.State, next.State, next.Summary)
	}
	if prev.Config.Generation != next.Config.Generation {
		add(apitype.EventConfig, "generation", strconv.FormatUint(prev.Config.Generation, 10), strconv.FormatUint(next.Config.Generation, 10), "configuration loaded")
	}
	if prev.Config.Error != next.Config.Error {
		switch {
		case next.Config.Error == "":
			add(apitype.EventConfig, "error", "error", "ok", "the configuration loads again")
		default:
			add(apitype.EventConfig, "error", okOr(prev.Config.Error), "error", next.Config.Error)
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
			from = apitype.Absent
		}
		if !nok {
			to = apitype.Absent
		}
		add(apitype.EventComponent, name, from, to, n.Error)
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
			from = apitype.Absent
		}
		if !nok {
			to = apitype.Absent
		}
		add(apitype.EventLink, key, from, to, "")
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
			from = apitype.Absent
		}
		if !nok {
			to = apitype.Absent
		}
		msg := n.Error
		if msg == "" && nok {
			msg = fmt.Sprintf("desired %s, actual %s", dash(n.Desired), dash(n.Actual))
		}
		add(apitype.EventPolicy, key, from, to, msg)
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
func ports(s *apitype.Snapshot) map[string]string {
	m := map[string]string{}
	for _, d := range s.Devices {
		for _, p := range d.Ports {
			m[fmt.Sprintf("%s/%d", d.Name, p.Port)] = p.State + "/" + p.PhysState
		}
	}
	return m
}

// targets maps "policy/kind/object" to its target.
func targets(s *apitype.Snapshot) map[string]apitype.Target {
	m := map[string]apitype.Target{}
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

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
