package pingmesh

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/verbs/peer"
)

// publishEvery bounds how often the state is rebuilt while nothing changed
// state: statistics move with every probe, and a thousand peers must not
// cost a snapshot each.
const publishEvery = time.Second

// publish refreshes the local ports and hands the state to OnState when a
// state changed, or at most every publishEvery when only numbers moved.
func (m *Manager) publish(now time.Time) {
	if now.Sub(m.published) < publishEvery && !m.changed {
		return
	}
	ports, err := m.opts.Transport.Ports()
	if !samePorts(ports, m.local) || errString(err) != errString(m.localErr) {
		m.local, m.localErr = ports, err
		m.changed = true
		m.refreshFingerprint(now, true)
	}
	if !slices.EqualFunc(ports, m.local, func(x, y peer.LocalPort) bool { return x.TrafficClass == y.TrafficClass }) {
		m.local, m.changed = ports, true // the same ports, a new traffic class ([probe] traffic_class)
	}
	if !m.changed && !m.dirty && !m.published.IsZero() && now.Sub(m.published) < 10*time.Second {
		return
	}
	m.localFaults()
	m.published, m.changed, m.dirty = now, false, false
	if m.opts.OnState != nil {
		m.opts.OnState(m.State())
	}
}

// minFaultPeers is how many peers must all be down on a port before the
// port, not the peers, is the suspect.
const minFaultPeers = 2

// localFaults finds the suspects: the local ports whose every peer path is
// down, as R-Pingmesh tells a local fault from remote ones (when all peers
// of a port stop answering at once, the port or this host is the likelier
// cause), and the groups whose every peer is down while other groups answer
// (groupFaults). It logs when a suspect is raised and when it is cleared.
func (m *Manager) localFaults() {
	down, known := map[string]int{}, map[string]int{}
	for _, p := range m.peers {
		if p.oneshot {
			continue
		}
		for _, pa := range p.paths {
			if pa.h.state == apitype.PeerUnknown {
				continue
			}
			known[pa.local]++
			if pa.h.state == apitype.PeerDown {
				down[pa.local]++
			}
		}
	}
	faults := map[string]string{}
	for _, lp := range m.local {
		n := known[lp.Key]
		if n >= minFaultPeers && down[lp.Key] == n {
			faults[lp.Key] = fmt.Sprintf("all %d peers are down from %s: suspect this port, its cable or switch port, or this host before %d remote faults", n, lp.Key, n)
		}
	}
	for g, why := range m.groupFaults() {
		faults[groupKey(g)] = why
	}
	for k, why := range faults {
		if m.faults[k] == "" {
			m.logSuspect(k, why)
		}
	}
	for k := range m.faults {
		if faults[k] == "" {
			m.logSuspect(k, "")
		}
	}
	m.faults = faults
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func samePorts(a, b []peer.LocalPort) bool {
	return slices.EqualFunc(a, b, func(x, y peer.LocalPort) bool { return x.Key == y.Key && x.Endpoint == y.Endpoint })
}

// State builds the peers' state. Called on the manager's goroutine.
func (m *Manager) State() apitype.Peers {
	out := apitype.Peers{NodeID: strconv.FormatUint(m.opts.NodeID, 16), Ports: []apitype.PeerPort{},
		Configured: len(m.cfg.Peers), Peers: make([]apitype.Peer, 0, len(m.peers))}
	for _, lp := range m.local {
		out.Ports = append(out.Ports, apitype.PeerPort{Key: lp.Key, GID: lp.GID.String(), QPN: lp.QPN, TrafficClass: lp.TrafficClass, LocalFault: m.faults[lp.Key]})
	}
	for _, p := range m.peers {
		if p.oneshot {
			continue
		}
		out.Peers = append(out.Peers, m.peerState(p))
	}
	slices.SortFunc(out.Peers, func(a, b apitype.Peer) int { return strings.Compare(a.Name, b.Name) })
	if m.ctl != nil {
		cs := m.ctl.Stats()
		out.Counters.ControlMalformed, out.Counters.ControlRefused, out.Counters.ControlAnswered = cs.Malformed, cs.Refused, cs.Answered
		out.Counters.ControlUnauthenticated, out.Counters.ControlBadTag, out.Counters.ControlRateLimited = cs.Unauthenticated, cs.BadTag, cs.RateLimited
	}
	out.ControlPort, out.ControlError = m.ctlPort, m.ctlErr
	out.GroupFaults = m.groupFaultList()
	if a := m.cfg.Auth; len(a.Key) > 0 {
		out.Auth = "prefer"
		if a.Require {
			out.Auth = "require"
		}
	}
	if f := m.opts.ProberCounters; f != nil {
		s := f()
		out.Counters.ProbeMalformed, out.Counters.ProbeUnadmitted, out.Counters.ProbesAnswered = s.Malformed, s.Unadmitted, s.Answered
		out.Counters.ProbeUnsolicited, out.Counters.ProbeBadTag, out.Counters.ProbeUntagged = s.Unsolicited, s.BadTag, s.Untagged
	}
	out.Counters.ProbesNotSent = m.notSent
	out.Fingerprint = fingerprintState(m.fp)
	return out
}

func (m *Manager) peerState(p *mpeer) apitype.Peer {
	sp := apitype.Peer{Name: p.spec.Name, Group: p.spec.Group, State: p.state, Reason: p.reason, Since: p.since, Paths: []apitype.PeerPath{},
		WireVersion: int(p.ver), Authenticated: p.authenticated,
		Fingerprint: fingerprintState(p.fp), FingerprintUnknown: p.fp == nil, Mismatches: m.mismatches(p)}
	if p.addr.IsValid() {
		sp.Address = p.addr.String()
	}
	if p.nodeID != 0 {
		sp.NodeID = strconv.FormatUint(p.nodeID, 16)
	}
	for _, pa := range p.paths {
		if pa.stale {
			pa.stats = pa.win.stats()
			pa.stale = false
		}
		pp := apitype.PeerPath{Local: pa.local, State: pa.h.state, Since: pa.h.since,
			RTTP50: pa.stats.P50, RTTP99: pa.stats.P99, HostDelayP99: pa.stats.HostP99, LastRTT: pa.lastRTT,
			LossPct: pa.stats.LossPct, Samples: pa.stats.Samples, Sent: pa.sent, Lost: pa.lost, Authenticated: pa.auth}
		if pa.resolved {
			pp.RemoteGID, pp.RemoteQPN = pa.remote.GID.String(), pa.remote.QPN
		}
		sp.Paths = append(sp.Paths, pp)
	}
	return sp
}

// localAddrs returns this host's addresses, so that a shared peers file
// can list every node including this one.
func localAddrs() map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return out
	}
	for _, a := range addrs {
		if pn, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(pn.IP); ok {
				out[ip.Unmap()] = true
			}
		}
	}
	return out
}

// dueHeap orders peers by their next turn.
type dueHeap []*mpeer

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h dueHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].hidx, h[j].hidx = i, j
}
func (h *dueHeap) Push(x any) {
	p := x.(*mpeer)
	p.hidx = len(*h)
	*h = append(*h, p)
}
func (h *dueHeap) Pop() any {
	old := *h
	p := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	p.hidx = -1
	return p
}
