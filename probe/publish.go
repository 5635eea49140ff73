package probe

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/probe/ud"
)

// The publisher holds what decides when the state is handed to OnState:
// whether numbers moved (dirty, or the counters differ from those
// published) or a state changed (changed) since the last publish, and when
// that was; when the local ports were last read; the readers' requests for
// figures (fresh.go); and the suspects it found at the last publish, with
// the tallies it counts them in.
type publisher struct {
	dirty bool
	// changed: something beyond single peers changed (the selection, the
	// ports, this node's fingerprint, the settings); the next publish
	// builds the whole state. peersChanged: the peers whose own state
	// changed (changedPeer); when they are all that changed, the next
	// publish builds only them (partial).
	changed      bool
	peersChanged []*mpeer
	// suspects: what the suspects follow (a path between unknown,
	// answering and down, a peer's state between unknown, down and the
	// others, a peer's paths) moved since localFaults last ran. A
	// partial publish finds the suspects again only then: a path
	// flipping between up and degraded moves nothing they count, and at
	// ten thousand peers their pass over every path was a third of a
	// partial publish.
	suspects bool
	// last is the last state handed to OnState, lastGen and lastLocal
	// the peer table's and the ports' generations it was built with
	// (lastOK: there is one; a partial publish copies it).
	last      apitype.Peers
	lastGen   uint64
	lastLocal uint32
	lastOK    bool
	at        time.Time
	checked   time.Time             // when the state published was last found current: at, or a pass that found nothing moved
	polled    time.Time             // when the local ports were last read
	counters  apitype.PeerCounters  // those of the last publish
	fresh     freshness             // readers' requests; its own lock
	faults    map[suspect]string    // local port or group -> why it is the suspect
	tallies   map[string]groupTally // groupFaults' scratch
}

// publishEvery bounds how often the local ports are read, and how old the
// figures a reader asks for (Fresh with maxAge 0) may be. Above
// publishPeers peers the period grows with the peers (5 s at ten
// thousand), so that rebuilding the state for a reader, a pass over every
// path, stays a small share of probing however often readers ask: the
// figures of a path move slowly anyway (its percentiles cover peer_window
// probes, 100 s at 1 Hz), Prometheus scrapes every 15-60 s, and a state
// change is published at once whatever the period.
const (
	publishEvery = time.Second
	publishPeers = 2000
)

// publishPeriod returns how often the local ports are read, and the age of
// the figures a reader gets (Fresh with maxAge 0), for n selected peers.
func publishPeriod(n int) time.Duration {
	return max(publishEvery, publishEvery*time.Duration(n)/publishPeers)
}

// backgroundPublish is how often the state is rebuilt while only numbers
// move and no reader asks (Fresh): often enough that whatever reads the
// snapshot without asking (a bug report, D-Bus's PeerFigures and Peers,
// the daemon's own status lines) is never very stale, rarely enough that
// an unread node does not pay a pass over every path each second (issue
// #29: 7 % of the engine's CPU at 1,000 peers, 23 % at 10,000).
const backgroundPublish = 30 * time.Second

// minPublishGap is the least time between two publishes, changes or not:
// a publish costs a pass over every peer, and at ten thousand peers a
// burst of changes (the start, a switch failing) must not cost one pass
// each.
const minPublishGap = 100 * time.Millisecond

// publish refreshes the local ports every publishPeriod and hands the
// state to OnState when a state changed (at most every minPublishGap, or a
// tenth of the probe interval when that is shorter), when a reader asked
// for figures (Fresh) and some moved, and every backgroundPublish while
// only numbers moved. A reader's request when nothing moved is answered
// without a build: the state published is current. When only some peers'
// own states changed and nobody asks for figures, the publish is partial:
// those peers are built again, the others' entries are the last state's
// (their figures as old as the last full build, which Fresh still counts
// from). It returns when it wants to run again.
func (m *Manager) publish(now time.Time) time.Time {
	every := publishPeriod(len(m.peers.byName))
	asked := m.pub.fresh.asked()
	peers := len(m.pub.peersChanged) > 0
	if gap := min(minPublishGap, m.cfg.Interval/10); (m.pub.changed || peers || asked) && now.Sub(m.pub.at) < gap {
		return m.pub.at.Add(gap)
	}
	if m.pub.changed || peers || asked || now.Sub(m.pub.polled) >= every {
		m.pub.polled = now
		m.refreshPorts(now)
	}
	next := m.pub.polled.Add(every)
	if !m.pub.changed && !m.pub.at.IsZero() {
		background := now.Sub(m.pub.checked) >= backgroundPublish
		if peers && !asked && !background && m.partialOK() {
			m.publishPartial(now)
			return earliest(next, m.pub.checked.Add(backgroundPublish))
		}
		if !peers && !asked && !background {
			return earliest(next, m.pub.checked.Add(backgroundPublish))
		}
		// A reader asks, or the background publish is due: publish
		// unless nothing moved (no answer, no loss, the same counters).
		// The counters are read only here, not at every pass: the
		// control socket's drops are a system call.
		if !peers && !m.pub.dirty && m.counters() == m.pub.counters {
			// The state published is the current one.
			m.pub.checked = now
			m.pub.fresh.current(now, every)
			return earliest(next, now.Add(backgroundPublish))
		}
	}
	if m.pub.changed || peers || m.pub.at.IsZero() {
		// The suspects follow the states (and who is selected), which
		// change only with m.pub.changed and changedPeer: a publish of
		// numbers alone does not look at every path again.
		m.localFaults()
	}
	m.pub.at, m.pub.checked, m.pub.changed, m.pub.dirty = now, now, false, false
	m.clearPeersChanged()
	if m.opts.OnState != nil {
		st := m.State()
		m.pub.counters = st.Counters
		m.pub.last, m.pub.lastGen, m.pub.lastLocal, m.pub.lastOK = st, m.peers.gen, m.localGen, true
		m.opts.OnState(st)
	} else {
		m.pub.counters = m.counters()
		m.pub.lastOK = false
	}
	// OnState has returned: the readers waiting have their figures.
	m.pub.fresh.current(now, every)
	return earliest(next, now.Add(backgroundPublish))
}

// changedPeer records that p's own state changed (a path's or the peer's
// state, its QP, version, fingerprint or mismatches), not only its
// figures: it is published at once, and a publish for such changes alone
// builds only those peers (publishPartial).
func (m *Manager) changedPeer(p *mpeer) {
	if !p.pubDirty {
		p.pubDirty = true
		m.pub.peersChanged = append(m.pub.peersChanged, p)
	}
}

func (m *Manager) clearPeersChanged() {
	for _, p := range m.pub.peersChanged {
		p.pubDirty = false
	}
	clear(m.pub.peersChanged)
	m.pub.peersChanged = m.pub.peersChanged[:0]
}

// partialOK reports whether the last state can be built on: it was built
// in full for the peers and ports of now, and lists every changed peer
// where it says.
func (m *Manager) partialOK() bool {
	if !m.pub.lastOK || m.opts.OnState == nil || m.pub.lastGen != m.peers.gen || m.pub.lastLocal != m.localGen {
		return false
	}
	for _, p := range m.pub.peersChanged {
		if !p.oneshot && (p.pubIdx < 0 || int(p.pubIdx) >= len(m.pub.last.Peers) || m.pub.last.Peers[p.pubIdx].Name != p.spec.Name) {
			return false
		}
	}
	return true
}

// publishPartial hands OnState the last state with the changed peers
// built again and the node's own parts (ports, suspects, counters) current.
// At ten thousand peers a full build is a pass over every path (18 ms),
// and the states of a few paths flipping between up and degraded came
// twice a second in the benchmark: the figures of the others need not be
// rebuilt for them (issue #29, "incrementally"). The figures' age, which
// Fresh answers by, stays that of the last full build, and so does the
// background publish's schedule.
func (m *Manager) publishPartial(now time.Time) {
	if m.pub.suspects {
		m.localFaults()
	}
	m.pub.at = now
	st := m.nodeState()
	st.Peers = slices.Clone(m.pub.last.Peers)
	for _, p := range m.pub.peersChanged {
		if p.oneshot {
			continue
		}
		k, kf := p.pathsAndFlows()
		st.Peers[p.pubIdx] = m.peerStateIn(p, make([]apitype.PeerPath, 0, k), make([]apitype.PeerFlow, kf))
	}
	m.clearPeersChanged()
	m.pub.counters = st.Counters
	m.pub.last = st
	m.opts.OnState(st)
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// refreshPorts reads the transport's local ports again; a change is
// published.
func (m *Manager) refreshPorts(now time.Time) {
	ports, err := m.opts.Transport.Ports()
	if !samePorts(ports, m.local) || errString(err) != errString(m.localErr) {
		m.local, m.localErr = ports, err
		m.localGen++
		if m.sched.posters != nil {
			m.sched.prunePosters(ports)
		}
		m.pub.changed = true
		m.refreshFingerprint(now, true)
	}
	if !slices.EqualFunc(ports, m.local, func(x, y ud.LocalPort) bool { return x.TrafficClass == y.TrafficClass }) {
		m.local, m.pub.changed = ports, true // the same ports, a new traffic class ([probe] traffic_class)
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
	m.pub.suspects = false
	down, known := map[string]int{}, map[string]int{}
	for _, p := range m.peers.inOrder() {
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
		if m.pub.faults[k] == "" {
			m.logSuspect(k, why)
		}
	}
	for k := range m.pub.faults {
		if faults[k] == "" {
			m.logSuspect(k, "")
		}
	}
	m.pub.faults = faults
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
	out := m.nodeState()
	n, paths, flows := 0, 0, 0
	for _, p := range m.peers.inOrder() {
		if !p.oneshot {
			k, kf := p.pathsAndFlows()
			n, paths, flows = n+1, paths+k, flows+kf
		}
	}
	out.Peers = make([]apitype.Peer, 0, n)
	all := make([]apitype.PeerPath, paths)
	// Every path's flows share one array too.
	allFlows := make([]apitype.PeerFlow, flows)
	for _, p := range m.peers.sorted {
		if p.oneshot {
			continue
		}
		k, kf := p.pathsAndFlows()
		p.pubIdx = int32(len(out.Peers))
		out.Peers = append(out.Peers, m.peerStateIn(p, all[:0:k], allFlows[:kf:kf]))
		all, allFlows = all[k:], allFlows[kf:]
	}
	return out
}

// pathsAndFlows returns how many paths p has and how many flows they have
// together: the room its entry of the state takes.
func (p *mpeer) pathsAndFlows() (paths, flows int) {
	for _, pa := range p.paths {
		flows += pa.pathFlows()
	}
	return len(p.paths), flows
}

// nodeState is the state's parts that are the node's rather than a
// peer's: the ports with their suspects, the counters, the group
// suspects, the authentication, the fingerprint and the RTT histogram.
func (m *Manager) nodeState() apitype.Peers {
	out := apitype.Peers{NodeID: strconv.FormatUint(m.opts.NodeID, 16), Ports: []apitype.PeerPort{},
		Configured: len(m.cfg.Peers)}
	for _, lp := range m.local {
		out.Ports = append(out.Ports, apitype.PeerPort{Key: lp.Key, GID: lp.GID.String(), QPN: lp.QPN, TrafficClass: lp.TrafficClass, LocalFault: m.pub.faults[portSuspect(lp.Key)],
			Stuck: m.sched.stuckText(lp.Key)})
	}
	out.Counters = m.counters()
	out.ControlPort, out.ControlError = m.control.port, m.control.err
	out.GroupFaults = m.groupFaultList()
	if a := m.cfg.Auth; len(a.Key) > 0 {
		out.Auth = "prefer"
		if a.Require {
			out.Auth = "require"
		}
	}
	out.Fingerprint = fingerprintState(m.fps.own)
	out.RTTHist = m.rtt
	return out
}

// counters returns the control endpoint's and the prober's counters: a
// few atomic loads, so that publish can tell whether they moved.
func (m *Manager) counters() apitype.PeerCounters {
	var c apitype.PeerCounters
	if m.control.ctl != nil {
		cs := m.control.ctl.Stats()
		c.ControlMalformed, c.ControlRefused, c.ControlAnswered = cs.Malformed, cs.Refused, cs.Answered
		c.ControlUnauthenticated, c.ControlBadTag, c.ControlRateLimited = cs.Unauthenticated, cs.BadTag, cs.RateLimited
		c.ControlOverflow = cs.Overflow
	}
	if f := m.opts.ProberCounters; f != nil {
		s := f()
		c.ProbeMalformed, c.ProbeUnadmitted, c.ProbesAnswered = s.Malformed, s.Unadmitted, s.Answered
		c.ProbeUnsolicited, c.ProbeBadTag, c.ProbeUntagged = s.Unsolicited, s.BadTag, s.Untagged
	}
	c.ProbesNotSent = m.sched.notSent
	return c
}

// peerState returns p's state on its own (a one-shot probe's answer).
func (m *Manager) peerState(p *mpeer) apitype.Peer {
	kf := 0
	for _, pa := range p.paths {
		kf += pa.pathFlows()
	}
	return m.peerStateIn(p, make([]apitype.PeerPath, 0, len(p.paths)), make([]apitype.PeerFlow, kf))
}

// peerStateIn returns p's state with its paths appended to paths, which
// must be empty (and not nil) with room for them, and their flows in
// flows, which has exactly the room for them.
func (m *Manager) peerStateIn(p *mpeer, paths []apitype.PeerPath, flows []apitype.PeerFlow) apitype.Peer {
	sp := apitype.Peer{Name: p.spec.Name, Group: p.spec.Group, State: p.state, Reason: p.reason, Since: time.Unix(0, p.since), Paths: paths,
		WireVersion: int(p.ver), Authenticated: p.authenticated, FingerprintUnknown: p.fp == nil, Mismatches: p.r().mm}
	if p.fp != nil {
		sp.Fingerprint = p.fp.state
	}
	if b, ok := p.clock.best(); ok {
		sp.ClockOffset, sp.ClockOffsetError, sp.ClockSamples = b.offset, b.err, int(p.clock.n)
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
		if pa.fl != nil {
			st = pa.fl.published(&m.peers.scratch)
		} else if pa.win.s != nil {
			st = pa.win.published(&m.peers.scratch)
		}
		pp := apitype.PeerPath{Local: pa.local, State: pa.h.state, Since: time.Unix(0, pa.h.since),
			RTTP50: st.P50, RTTP99: st.P99, HostDelayP99: st.HostP99, LastRTT: pa.lastRTT,
			LossPct: st.LossPct, Samples: st.Samples, Sent: pa.sent, Lost: pa.lost, Authenticated: pa.auth, RTTHist: &pa.rtt}
		var lp *ud.LocalPort
		if i := m.localIndex(pa.local); i >= 0 {
			lp = &m.local[i]
		}
		k := pa.pathFlows()
		pp.Flows = pa.flowStates(flows[:0:k], st, lp, &m.peers.scratch)
		flows = flows[k:]
		if pa.fl != nil {
			pp.LossyFlows = int(pa.fl.lossy)
		}
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
