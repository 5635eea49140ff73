package probe

import (
	"context"
	"log/slog"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/probe/ud"
)

// The state machine: a reply or a loss is a sample of its path's window,
// the path's health judges the window (health.go), and a peer is as good
// as its worst path. It runs on Run's goroutine, on the parts' fields.

// onReply takes an answered probe: it ends the probe's flight and is a
// sample of its path.
func (m *Manager) onReply(r ud.Reply) {
	f := m.sched.flights.get(r.Seq)
	// A reply counts only from the endpoint the path probes, GID and QPN:
	// one that names another (the prober matched on less, or someone
	// answered for the peer) says nothing about this path.
	if f == nil || f.pa.local != r.Local || f.pa.remote.QPN != r.From.QPN || f.pa.remote.GID != r.From.GID || f.flow != r.Flow {
		return // late (already counted as lost) or not ours
	}
	if m.cfg.Auth.Require && !r.Authenticated {
		return // the engine drops these too; a key required is required
	}
	p, pa := f.p, f.pa
	*f = flight{} // answered: a hole the front skips
	pa.auth = r.Authenticated
	pa.inflight--
	pa.sent++
	pa.lastSeq = r.Seq
	// The state is judged on the round trip this node measured (its own
	// send and receive times), never on it minus the responder's claimed
	// delay: a peer that claims almost all of a slow round trip as its
	// own would otherwise dodge the RTT threshold. The claim is kept
	// apart, as the host delay the status shows.
	pa.lastRTT = r.RTT
	if pa.fl != nil && int(r.Flow) < len(pa.fl.flows) {
		pa.fl.flows[r.Flow].sent++
	}
	// Every answered probe goes into its path's and the node's histogram
	// (the sent-minus-lost of the path, exactly): counters of a fixed
	// size, nothing allocated.
	pa.rtt.Observe(r.RTT)
	m.rtt.Observe(r.RTT)
	m.observeFlow(p, pa, int(r.Flow), sample{rtt: r.RTT, host: r.ResponderDelay}, r.At)
	if pa.h.state == apitype.PeerDown && m.peers.byName[p.spec.Name] == p {
		m.rise(p, r.At)
	}
}

// rise takes a down path that answered: up takes up_after answers in a
// row, and with a full interval between them a peer whose link came back
// was up only (up_after - 1) intervals after its first answer, 2 s at the
// defaults (the partition drill, docs/TESTING.md). So the peer is probed
// again in this pass (its turn now), and the answer wakes the manager at
// once (tick: the inbox is urgent while a path rises), or at the latest
// the next pass comes at the next tick rather than at the probe's
// timeout: up_after answers take about up_after - 1 round trips. A loss
// ends it (the path's turns are back to the interval), as a lost probe of
// an up path is retried soon (expire) to tell noise from an outage. The
// extra probes are at most up_after - 1 per answer of a down path.
func (m *Manager) rise(p *mpeer, at time.Time) {
	if t := monoNs(at); t < p.due {
		p.due = t
		m.sched.due.fix(p)
	}
	m.sched.rising = true
}

// observe takes a sample of the whole path (of every flow, when it has
// several).
func (m *Manager) observe(p *mpeer, pa *path, s sample, now time.Time) {
	m.observeFlow(p, pa, -1, s, now)
}

// observeFlow takes a sample of one of the path's flows (-1: of every
// flow), judges the path and the peer.
func (m *Manager) observeFlow(p *mpeer, pa *path, flow int, s sample, now time.Time) {
	m.pub.dirty = true
	from, fromReason := pa.h.state, pa.h.reason
	var changed bool
	if pa.fl != nil {
		changed = pa.observeFlows(flow, s, &m.peers.scratch, m.cfg.Threshold, now, m.texts)
	} else {
		changed = pa.h.observe(s, &pa.win, &m.peers.scratch, m.cfg.Threshold, now, m.texts)
	}
	if changed {
		// Enabled first: the attributes, boxed into the variadic
		// arguments, would allocate even for a line the handler drops.
		if m.log.Enabled(context.Background(), slog.LevelInfo) {
			m.log.Info("peer path state changed", "peer", p.spec.Name, "port", pa.local, "from", from, "to", pa.h.state, "reason", pa.h.reason)
		}
		m.changedPeer(p)
		if pathClass(from) != pathClass(pa.h.state) {
			m.pub.suspects = true
		}
	}
	// The peer's state is its paths' (aggregate): it can have moved only
	// when this path's state or reason did. Most samples move neither,
	// and then the peer itself is not touched: at ten thousand peers its
	// memory is one cache miss more per probe.
	if changed || pa.h.reason != fromReason || pa.stale {
		pa.stale = false
		m.aggregate(p, now)
	}
	if m.oneshots.waiting > 0 {
		m.checkWaiters(p)
	}
}

// aggregate sets the peer's state: the worst of its paths.
func (m *Manager) aggregate(p *mpeer, now time.Time) {
	st := apitype.PeerUnknown
	var worst, cut *path
	for i, pa := range p.paths {
		if !pa.resolved && pa.h.state == apitype.PeerUnknown {
			continue
		}
		if pa.h.state == apitype.PeerUnknown && (pa.h.reason == rejoinReason || m.sched.isCut(pa.local)) {
			// Its port, not the peer, is at fault (post.go), or its
			// port just rejoined and it waits for its next probe: the
			// peer is judged by its other paths.
			cut = pa
			continue
		}
		if i == 0 || st == apitype.PeerUnknown || stateRank(pa.h.state) > stateRank(st) {
			st, worst = pa.h.state, pa
		}
	}
	reason := ""
	if worst == nil && cut != nil {
		worst = cut
	}
	if worst != nil && worst.h.reason != "" {
		reason = m.texts.portReason(p.reason, worst.local, worst.h.reason)
	}
	m.setPeerState(p, st, reason, now)
}

// stateRank orders states from the best: a peer is as good as its worst
// path.
func stateRank(st string) int {
	switch st {
	case apitype.PeerUp:
		return 0
	case apitype.PeerUnknown:
		return 1
	case apitype.PeerDegraded:
		return 2
	case apitype.PeerDown:
		return 3
	}
	return 0
}

// portReason returns "local: reason", reusing prev when it is that text
// already: a peer's reason is worked out after every probe, and is the
// same almost every time.
func portReason(prev, local, reason string) string {
	if isPortReason(prev, local, reason) {
		return prev
	}
	return local + ": " + reason
}

// isPortReason reports whether s is "local: reason".
func isPortReason(s, local, reason string) bool {
	return len(s) == len(local)+2+len(reason) && s[:len(local)] == local && s[len(local):len(local)+2] == ": " && s[len(local)+2:] == reason
}

// peerMessageID is the journal MESSAGE_ID of the log line of a peer that
// enters a state (the message catalog explains each).
var peerMessageID = map[string]string{
	apitype.PeerUp:       apitype.MsgPeerUp,
	apitype.PeerDown:     apitype.MsgPeerDown,
	apitype.PeerDegraded: apitype.MsgPeerDegraded,
}

// setPeerStateApart sets p's state for a reason of its own, not its paths'
// (a name that does not resolve, a control endpoint that does not
// answer): the next sample of any of its paths sets it from the paths
// again, as every sample did before a sample that moves nothing left the
// peer untouched.
func (m *Manager) setPeerStateApart(p *mpeer, st, reason string, now time.Time) {
	m.setPeerState(p, st, reason, now)
	for _, pa := range p.paths {
		pa.stale = true
	}
}

func (m *Manager) setPeerState(p *mpeer, st, reason string, now time.Time) {
	if p.state == st {
		p.reason = reason
		return
	}
	lvl := slog.LevelInfo
	if st == apitype.PeerDown || st == apitype.PeerDegraded {
		lvl = slog.LevelWarn
	}
	if m.log.Enabled(context.Background(), lvl) {
		m.logPeerState(p, lvl, st, reason)
	}
	if peerClass(p.state) != peerClass(st) {
		m.pub.suspects = true
	}
	p.state, p.reason, p.since = st, reason, now.UnixNano()
	m.changedPeer(p)
}

// logPeerState logs p entering st. Only when the level lets the line
// through: its attributes and message allocate (a path flips between up
// and degraded on every few probes of a lossy link).
func (m *Manager) logPeerState(p *mpeer, lvl slog.Level, st, reason string) {
	var attrs []any
	if id := peerMessageID[st]; id != "" {
		attrs = append(attrs, apitype.MessageIDKey, id)
	}
	attrs = append(attrs, "peer", p.spec.Name)
	if p.spec.Group != "" {
		attrs = append(attrs, "group", p.spec.Group)
	}
	attrs = append(attrs, "from", p.state, "to", st)
	if reason != "" || lvl == slog.LevelWarn {
		attrs = append(attrs, "reason", reason) // down and degraded always say why
	}
	m.log.Log(context.Background(), lvl, "peer "+st, attrs...)
}
