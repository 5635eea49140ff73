package probe

import (
	"fmt"
	"slices"
	"strings"

	"github.com/rdmad/rdmad/client/apitype"
)

// Group-level inference (docs/PROBES.md "Local or remote fault"): when every
// peer of one group ([[peer]] group, e.g. a ToR) is down from every local
// port while peers of other groups answer, one fault of the group's switch
// or uplink explains that better than as many remote faults, and this
// node's ports are shown to work by the answers from elsewhere.
//
// Manager.faults holds every suspect with the reason, under a typed key: a
// local port ("rxe0/1") or a group, never told apart by spelling.

// minGroupPeers is how many peers of a group, with a known state, must all
// be down before the group, not each peer, is the suspect.
const minGroupPeers = 2

// A suspect is what a fault is blamed on: a local probe port (by its key)
// or a peer group (by its name).
type suspect struct {
	group bool
	name  string
}

func portSuspect(key string) suspect    { return suspect{name: key} }
func groupSuspect(group string) suspect { return suspect{group: true, name: group} }

// reach says how a peer is seen from this node: known (it has a state
// other than unknown), down from every local port (its state is down and
// no path answers), and answering on at least one path (up or degraded).
func reach(p *mpeer) (known, downEverywhere, answers bool) {
	for _, pa := range p.paths {
		if pa.h.state == apitype.PeerUp || pa.h.state == apitype.PeerDegraded {
			answers = true
		}
	}
	known = p.state != "" && p.state != apitype.PeerUnknown
	return known, p.state == apitype.PeerDown && !answers, answers
}

// groupFaults returns the groups that are the suspect, with the reason: at
// least minGroupPeers of the group's probed peers have a known state and
// all of them are down from every local port, while at least one peer
// outside the group (of another group, or of none) answers.
func (m *Manager) groupFaults() map[string]string {
	// The tallies are kept from one publish to the next: their map is
	// cleared, not made again.
	if m.pub.tallies == nil {
		m.pub.tallies = map[string]groupTally{}
	}
	groups := m.pub.tallies
	clear(groups)
	answering := 0
	for _, p := range m.peers.inOrder() {
		if p.oneshot {
			continue
		}
		known, down, answers := reach(p)
		if answers {
			answering++
		}
		g := p.spec.Group
		if g == "" {
			continue // a peer without a group is nobody's suspect but its own
		}
		t := groups[g]
		if known {
			t.known++
		}
		if known && down {
			t.down++
		}
		if answers {
			t.answering++
		}
		groups[g] = t
	}
	out := map[string]string{}
	for g, t := range groups {
		others := answering - t.answering
		if t.known >= minGroupPeers && t.down == t.known && others > 0 {
			out[g] = fmt.Sprintf("all %d probed peers of group %s are down from every local port while %d peers of other groups answer: "+
				"suspect the group's switch (ToR) or its uplink before %d remote faults", t.known, g, others, t.known)
		}
	}
	return out
}

// A groupTally counts a group's peers: with a known state, down from every
// local port, answering.
type groupTally struct{ known, down, answering int }

// logSuspect logs that the suspect under key was raised (why != "") or
// cleared.
func (m *Manager) logSuspect(s suspect, why string) {
	if s.group {
		if why != "" {
			m.log.Warn("peer group suspect", "group", s.name, "reason", why)
		} else {
			m.log.Info("peer group no longer suspect", "group", s.name)
		}
		return
	}
	if why != "" {
		m.log.Warn("local probe port suspect", apitype.MessageIDKey, apitype.MsgLocalFault, "port", s.name, "reason", why)
	} else {
		m.log.Info("local probe port no longer suspect", "port", s.name)
	}
}

// groupFaultList is the suspect groups for the state, sorted by group;
// never nil.
func (m *Manager) groupFaultList() []apitype.GroupFault {
	out := []apitype.GroupFault{}
	for s, why := range m.pub.faults {
		if s.group {
			out = append(out, apitype.GroupFault{Group: s.name, Reason: why})
		}
	}
	slices.SortFunc(out, func(a, b apitype.GroupFault) int { return strings.Compare(a.Group, b.Group) })
	return out
}

// pathClass and peerClass are what the suspects see of a path's and a
// peer's state (localFaults, reach): a change within a class (up and
// degraded) moves no suspect.
func pathClass(st string) uint8 {
	switch st {
	case apitype.PeerUp, apitype.PeerDegraded:
		return 1
	case apitype.PeerDown:
		return 2
	}
	return 0
}

func peerClass(st string) uint8 {
	switch st {
	case "", apitype.PeerUnknown:
		return 0
	case apitype.PeerDown:
		return 2
	}
	return 1
}
