package probe

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/probe/ud"
)

// publishEvery bounds how often the state is rebuilt while nothing changed
// state: statistics move with every probe, and a thousand peers must not
// cost a snapshot each. Above publishPeers peers the period grows with the
// peers (5 s at ten thousand), so that rebuilding the state, a pass over
// every path, stays a small share of probing: the figures of a path move
// slowly anyway (its percentiles cover peer_window probes, 100 s at 1 Hz),
// Prometheus scrapes every 15-60 s, and a state change is published at once
// whatever the period.
const (
	publishEvery = time.Second
	publishPeers = 2000
)

// publishPeriod returns how often the state is rebuilt while only numbers
// move, for n selected peers.
func publishPeriod(n int) time.Duration {
	return max(publishEvery, publishEvery*time.Duration(n)/publishPeers)
}

// minPublishGap is the least time between two publishes, changes or not:
// a publish costs a pass over every peer, and at ten thousand peers a
// burst of changes (the start, a switch failing) must not cost one pass
// each.
const minPublishGap = 100 * time.Millisecond

// publish refreshes the local ports and hands the state to OnState when a
// state changed (at most every minPublishGap, or a tenth of the probe
// interval when that is shorter), or at most every publishPeriod when only
// numbers moved. It returns when it wants to run again.
func (m *Manager) publish(now time.Time) time.Time {
	every := publishPeriod(len(m.peers))
	if now.Sub(m.published) < every && !m.changed {
		return m.published.Add(every)
	}
	if gap := min(minPublishGap, m.cfg.Interval/10); m.changed && now.Sub(m.published) < gap {
		return m.published.Add(gap)
	}
	next := now.Add(every)
	ports, err := m.opts.Transport.Ports()
	if !samePorts(ports, m.local) || errString(err) != errString(m.localErr) {
		m.local, m.localErr = ports, err
		m.localGen++
		m.changed = true
		m.refreshFingerprint(now, true)
	}
	if !slices.EqualFunc(ports, m.local, func(x, y ud.LocalPort) bool { return x.TrafficClass == y.TrafficClass }) {
		m.local, m.changed = ports, true // the same ports, a new traffic class ([probe] traffic_class)
	}
	if !m.changed && !m.dirty && !m.published.IsZero() && now.Sub(m.published) < 10*time.Second {
		return next
	}
	if m.changed || m.published.IsZero() {
		// The suspects follow the states (and who is selected), which
		// change only with m.changed: a publish of numbers alone does
		// not look at every path again.
		m.localFaults()
	}
	m.published, m.changed, m.dirty = now, false, false
	if m.opts.OnState != nil {
		m.opts.OnState(m.State())
	}
	return next
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
	for _, p := range m.sortedPeers() {
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
	faults := map[suspect]string{}
	for _, lp := range m.local {
		n := known[lp.Key]
		if n >= minFaultPeers && down[lp.Key] == n {
			faults[portSuspect(lp.Key)] = fmt.Sprintf("all %d peers are down from %s: suspect this port, its cable or switch port, or this host before %d remote faults", n, lp.Key, n)
		}
	}
	for g, why := range m.groupFaults() {
		faults[groupSuspect(g)] = why
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

func samePorts(a, b []ud.LocalPort) bool {
	return slices.EqualFunc(a, b, func(x, y ud.LocalPort) bool { return x.Key == y.Key && x.Endpoint == y.Endpoint })
}

// State builds the peers' state. Called on the manager's goroutine.
//
// The value is new every time (its readers keep it), but built with as
// little as possible: the peers are kept in name order rather than sorted
// each time, every peer's paths share one array, and the texts (addresses,
// node IDs, GIDs) and fingerprints are made once and shared by every
// state that shows them. Nothing in a published state is changed later.
func (m *Manager) State() apitype.Peers {
	out := apitype.Peers{NodeID: strconv.FormatUint(m.opts.NodeID, 16), Ports: []apitype.PeerPort{},
		Configured: len(m.cfg.Peers)}
	for _, lp := range m.local {
		out.Ports = append(out.Ports, apitype.PeerPort{Key: lp.Key, GID: lp.GID.String(), QPN: lp.QPN, TrafficClass: lp.TrafficClass, LocalFault: m.faults[portSuspect(lp.Key)]})
	}
	n, paths := 0, 0
	for _, p := range m.sortedPeers() {
		if !p.oneshot {
			n++
			paths += len(p.paths)
		}
	}
	out.Peers = make([]apitype.Peer, 0, n)
	all := make([]apitype.PeerPath, paths)
	for _, p := range m.sorted {
		if p.oneshot {
			continue
		}
		k := len(p.paths)
		out.Peers = append(out.Peers, m.peerStateIn(p, all[:0:k]))
		all = all[k:]
	}
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

// sortedPeers returns the peers in name order, sorting them again only
// when the selection changed.
func (m *Manager) sortedPeers() []*mpeer {
	if !m.sortStale && len(m.sorted) == len(m.peers) {
		return m.sorted
	}
	m.sorted = m.sorted[:0]
	for _, p := range m.peers {
		m.sorted = append(m.sorted, p)
	}
	slices.SortFunc(m.sorted, func(a, b *mpeer) int { return strings.Compare(a.spec.Name, b.spec.Name) })
	if cap(m.sorted) > 2*len(m.sorted)+64 {
		m.sorted = slices.Clip(m.sorted)
	}
	m.sortStale = false
	return m.sorted
}

// peerState returns p's state on its own (a one-shot probe's answer).
func (m *Manager) peerState(p *mpeer) apitype.Peer {
	return m.peerStateIn(p, make([]apitype.PeerPath, 0, len(p.paths)))
}

// peerStateIn returns p's state with its paths appended to paths, which
// must be empty (and not nil) with room for them.
func (m *Manager) peerStateIn(p *mpeer, paths []apitype.PeerPath) apitype.Peer {
	sp := apitype.Peer{Name: p.spec.Name, Group: p.spec.Group, State: p.state, Reason: p.reason, Since: p.since, Paths: paths,
		WireVersion: int(p.ver), Authenticated: p.authenticated, FingerprintUnknown: p.fp == nil, Mismatches: p.mm}
	if p.fp != nil {
		sp.Fingerprint = p.fp.state
	}
	if p.addr.IsValid() {
		if p.addrStr == "" {
			p.addrStr = p.addr.String()
		}
		sp.Address = p.addrStr
	}
	if p.nodeID != 0 {
		if p.nodeIDStr == "" {
			p.nodeIDStr = strconv.FormatUint(p.nodeID, 16)
		}
		sp.NodeID = p.nodeIDStr
	}
	for _, pa := range p.paths {
		var st winStats
		if pa.win.buf != nil {
			st = pa.win.published()
		}
		pp := apitype.PeerPath{Local: pa.local, State: pa.h.state, Since: pa.h.since,
			RTTP50: st.P50, RTTP99: st.P99, HostDelayP99: st.HostP99, LastRTT: pa.lastRTT,
			LossPct: st.LossPct, Samples: st.Samples, Sent: pa.sent, Lost: pa.lost, Authenticated: pa.auth}
		if pa.resolved {
			if pa.gidStr == "" {
				pa.gidStr = pa.remote.GID.String()
			}
			pp.RemoteGID, pp.RemoteQPN = pa.gidStr, pa.remote.QPN
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

// dueHeap orders peers by their next turn. Each entry holds the turn as
// nanoseconds since the heap's origin, so that sifting through ten
// thousand peers compares numbers in one array rather than reading every
// peer it passes. A peer whose turn moves gets a new entry; the old one is
// known stale by its version (mpeer.dueVer) and dropped when it comes to
// the top. So the peers are never written while the heap is sifted, and a
// turn pushed a second ahead, as every visit does, sifts up a level or
// two.
type dueHeap struct {
	e    []dueEntry
	t0   time.Time
	live int // peers with a turn; the rest of e is stale
}

type dueEntry struct {
	at  int64 // p.due, in nanoseconds since t0
	p   *mpeer
	ver uint32 // p.dueVer when pushed
}

// clean drops the stale entries at the top.
func (h *dueHeap) clean() {
	for len(h.e) > 0 && h.e[0].ver != h.e[0].p.dueVer {
		last := len(h.e) - 1
		h.e[0] = h.e[last]
		h.e[last] = dueEntry{}
		h.e = h.e[:last]
		h.down(0)
	}
}

// len reports how many entries there are: 0 when no peer has a turn.
func (h *dueHeap) len() int {
	h.clean()
	return len(h.e)
}

// top returns the peer whose turn comes first; len must be > 0.
func (h *dueHeap) top() *mpeer {
	h.clean()
	return h.e[0].p
}

func (h *dueHeap) key(t time.Time) int64 {
	if h.t0.IsZero() {
		h.t0 = t
	}
	return int64(t.Sub(h.t0))
}

// push schedules p at p.due (its entry from before, if any, is stale).
func (h *dueHeap) push(p *mpeer) {
	if !p.inDue {
		p.inDue = true
		h.live++
	}
	p.dueVer++
	if len(h.e) > 2*h.live+64 {
		h.compact()
	}
	h.e = append(h.e, dueEntry{at: h.key(p.due), p: p, ver: p.dueVer})
	h.up(len(h.e) - 1)
}

// fix moves p to its turn p.due, which changed. When p's entry is the top,
// as when the manager has just visited it, the entry is updated in place
// and sifted down: one pass down the heap instead of a new entry sifted up
// and the stale one later taken off the top.
func (h *dueHeap) fix(p *mpeer) {
	if p.inDue && len(h.e) > 0 && h.e[0].p == p && h.e[0].ver == p.dueVer {
		p.dueVer++
		h.e[0] = dueEntry{at: h.key(p.due), p: p, ver: p.dueVer}
		h.down(0)
		return
	}
	h.push(p)
}

// remove takes p out: its entries are stale.
func (h *dueHeap) remove(p *mpeer) {
	if p.inDue {
		p.inDue = false
		h.live--
	}
	p.dueVer++
}

// compact drops every stale entry: when turns move often between visits
// (retries after losses, lookups, one-shot probes), stale entries would
// otherwise wait for their time to reach the top.
func (h *dueHeap) compact() {
	k := 0
	for _, e := range h.e {
		if e.ver == e.p.dueVer {
			h.e[k] = e
			k++
		}
	}
	clear(h.e[k:])
	h.e = h.e[:k]
	for i := k/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h *dueHeap) up(j int) {
	e := h.e[j]
	for j > 0 {
		i := (j - 1) / 2
		if h.e[i].at <= e.at {
			break
		}
		h.e[j] = h.e[i]
		j = i
	}
	h.e[j] = e
}

func (h *dueHeap) down(i int) {
	n := len(h.e)
	if n == 0 {
		return
	}
	e := h.e[i]
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		j := l
		if r := l + 1; r < n && h.e[r].at < h.e[l].at {
			j = r
		}
		if e.at <= h.e[j].at {
			break
		}
		h.e[i] = h.e[j]
		i = j
	}
	h.e[i] = e
}
