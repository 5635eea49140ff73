package probe

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/probe/ud"
	"github.com/rdmad/rdmad/probe/wire"
)

// The control endpoint part holds the endpoint in force (ctl), its Serve
// goroutine's end, the port it is bound to and why that is not the
// configured one, and the control queries this node has outstanding, by
// nonce. Endpoints that replace each other share the counters.
type controlEndpoint struct {
	ctl      *Control
	done     chan struct{}
	port     int
	err      string
	counters ControlCounters
	serveErr chan ctlErr
	nonces   map[uint64]*mpeer // outstanding control queries by nonce
	// allowStale: the control endpoint's allow list is rebuilt at the end
	// of the pass (once, however many peers were resolved in it).
	allowStale bool
	// rcvbuf is the receive buffer asked of ctl (sizeControl), 0 for none
	// yet.
	rcvbuf int
	// spare is the emptied lists of outstanding queries that peers gave
	// back (spareQueries), for the next peers to ask.
	spare []*queryList
	// handed counts the lists peers took (or made) in this pass, and
	// spareShrink sizes the spares to those (trimSpares).
	handed      int
	spareShrink shrinker
	// qflows is the buffer of the flows extension of the query being
	// sent (flowsQueryExt).
	qflows []byte
	// nonceBuf is where newNonce reads its random bytes.
	nonceBuf [8]byte
}

// maxSpareQueries bounds the spare lists of outstanding queries kept
// (112 bytes each, and its header): the first resolves of every peer
// come in one interval, a burst of lists that are given back a pass
// later; trimSpares then sizes the spares to what the passes hand out
// (a few a pass at a thousand peers: spreadRefresh).
const maxSpareQueries = 256

// spareListBytes is what a spare list of outstanding queries holds: its
// one entry's size class and its header.
const spareListBytes = 112 + 24

// trimSpares sizes the spare lists of outstanding queries to the most the
// passes hand out (shrinker), at the end of each pass.
func (c *controlEndpoint) trimSpares() {
	want := c.spareShrink.size(c.handed, len(c.spare), spareListBytes)
	c.handed = 0
	if want >= len(c.spare) {
		return
	}
	clear(c.spare[want:])
	c.spare = c.spare[:want]
	if cap(c.spare) > 2*want+16 {
		c.spare = slices.Clip(c.spare)
	}
}

func newControlEndpoint() controlEndpoint {
	return controlEndpoint{nonces: map[uint64]*mpeer{}, serveErr: make(chan ctlErr, 1)}
}

// serve makes ctl, bound to port, the endpoint in force and serves it
// until ctx is done or it is closed, closing the one it replaces.
func (c *controlEndpoint) serve(ctx context.Context, ctl *Control, port int) {
	if c.ctl != nil {
		// A closed endpoint's Serve returns nil: nothing to report.
		c.close()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := ctl.Serve(ctx); err != nil {
			select {
			case c.serveErr <- ctlErr{ctl, err}:
			default:
			}
		}
	}()
	c.ctl, c.done, c.port, c.rcvbuf = ctl, done, port, 0
}

// controlMsgBuffer is the receive buffer to ask for per message a batch
// window may gather: a message is at most wire.MaxSize (1 KiB), and the
// kernel charges each datagram its buffer's true size, which it doubles
// the asked size for.
const controlMsgBuffer = 2 << 10

// controlBuffer returns the receive buffer for the control messages of one
// batch window of w at n peers re-asking every resolve: the answers to one
// pass's queries (maxBatch), the peers' queries of a window four times
// over (they are not evenly spread) and a margin.
func controlBuffer(n int, w, resolve time.Duration) int {
	q := 0
	if resolve > 0 {
		q = int(int64(n) * int64(w) / int64(resolve))
	}
	return (maxBatch + 4*q + 64) * controlMsgBuffer
}

// sizeControl sizes the control endpoint's receive buffer for the
// configured peers (controlBuffer).
func (m *Manager) sizeControl() {
	want := controlBuffer(len(m.cfg.Peers), batchWindow(m.cfg.Interval), m.cfg.Resolve)
	if m.control.ctl == nil || want == m.control.rcvbuf {
		return
	}
	m.control.rcvbuf = want
	got, err := m.control.ctl.SetReceiveBuffer(want)
	if err != nil || got < want {
		m.log.Warn("the control endpoint's receive buffer is smaller than a batch of control messages needs; some may be dropped (control_overflow counts them): raise net.core.rmem_max or give rdmad CAP_NET_ADMIN",
			"want_bytes", want, "got_bytes", got, "err", err)
	}
}

// close closes the endpoint in force and waits for its Serve to return.
func (c *controlEndpoint) close() {
	c.ctl.Close()
	<-c.done
}

// maxQueriesPerPeer bounds the control queries outstanding to one peer:
// an answer is taken only for one of them, and each is taken once.
const maxQueriesPerPeer = 16

// v2Retry bounds how often a peer that answered only version 1 is asked in
// version 2 again, to notice that it was upgraded. The first retries come
// sooner (after 1, 2, 4 ... intervals): a peer whose rdmad was not up yet
// when it was asked in version 2 may have answered only the version-1
// query that followed, and must not be held in version 1 for minutes.
const v2Retry = 10 * time.Minute

// A ctlErr is a control endpoint's Serve failing.
type ctlErr struct {
	ctl *Control
	err error
}

// A query is a control query waiting for its answer: which path it asked
// for, where it went (the answer must come from there) and in which wire
// version.
type query struct {
	idx int
	to  netip.AddrPort
	ver uint8
	// unplanned: the path was asked out of its schedule (its first query,
	// one again after a miss or after this node's fingerprint changed,
	// one of an unresolved or down path): its answer spreads the next
	// refresh (spreadRefresh).
	unplanned bool
	sent      time.Time
	// t1 is the realtime clock the query carried (wire.ExtClock, with
	// its monotonic reading); zero for a version-1 query.
	t1 time.Time
}

// listen opens the control endpoint on port and serves it, closing the one
// it replaces. On an error the endpoint in force stays.
func (m *Manager) listen(ctx context.Context, port int) error {
	host := m.opts.ListenHost
	if host == "" {
		host = "::"
	}
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	ctl, err := ListenControl(addr, ControlOptions{
		NodeID:   m.opts.NodeID,
		Ports:    func() []ud.LocalPort { p, _ := m.opts.Transport.Ports(); return p },
		Admit:    m.opts.Transport.Admit,
		AdmitFor: 3 * m.cfg.Resolve,
		Auth:     m.cfg.Auth,
		OnAnswer: func(from netip.AddrPort, msg wire.Message) {
			m.in.addAnswer(answer{from: from, m: msg, at: time.Now()})
		},
		OnQuery: func(from netip.AddrPort, msg wire.Message) {
			if !hasExt(msg, wire.ExtFingerprint) {
				return
			}
			m.in.addAnswer(answer{from: from, m: msg, query: true})
		},
		Counters:  &m.control.counters,
		Linger:    batchWindow(m.cfg.Interval),
		Bandwidth: m.opts.Bandwidth,
	})
	if err != nil {
		return err
	}
	ctl.SetFingerprint(m.fps.ownWire)
	m.control.serve(ctx, ctl, port)
	return nil
}

// updateAllow lets the configured peers (resolved addresses) and the
// [probe] allow networks query the control endpoint. Every configured peer
// may query, selected or not: other nodes' selections differ from ours.
func (m *Manager) updateAllow() {
	m.control.allowStale = false
	addrs := make([]netip.Addr, 0, len(m.cfg.Peers))
	for _, sp := range m.cfg.Peers {
		if ip, err := netip.ParseAddr(sp.Name); err == nil {
			addrs = append(addrs, ip)
		}
	}
	for _, p := range m.peers.byName {
		if _, err := netip.ParseAddr(p.spec.Name); err != nil && p.addr.IsValid() {
			addrs = append(addrs, p.addr) // a host name, resolved
		}
	}
	m.control.ctl.SetAllow(addrs, m.cfg.Allow)
}

// missedQueries ends the wait for p's queries older than the probe
// timeout and reports whether there were any. Their paths are asked again
// at once, in the other wire version unless a key is required: a peer that
// does not answer version 2 may be an older rdmad (it drops version 2 as
// malformed), and one that does not answer version 1 may require a key.
func (m *Manager) missedQueries(p *mpeer, now time.Time) bool {
	missed := false
	if p.queried == nil {
		return false
	}
	defer m.control.spareQueries(p)
	p.queried.q = slices.DeleteFunc(p.queried.q, func(q pendingQuery) bool {
		if now.Sub(q.sent) < m.cfg.Timeout {
			return false
		}
		missed = true
		delete(m.control.nonces, q.nonce)
		if q.idx < len(p.paths) {
			p.paths[q.idx].asked = 0
		}
		if !m.cfg.Auth.Require {
			p.qver = wire.Version1 + wire.Version2 - q.ver
		}
		return true
	})
	if missed {
		p.qMisses++
	}
	return missed
}

// newNonce returns a random nonce no outstanding query has. Nonces are
// random, not a counter: an answer is taken only for an outstanding nonce,
// and an off-path sender cannot guess one.
func (c *controlEndpoint) newNonce() uint64 {
	b := c.nonceBuf[:] // the endpoint's: a local array escapes to crypto/rand
	for {
		crand.Read(b)
		n := binary.BigEndian.Uint64(b)
		if _, used := c.nonces[n]; !used && n != 0 {
			return n
		}
	}
}

func (m *Manager) query(p *mpeer, i int, now time.Time) {
	lp := m.local[i]
	if qs := p.queries(); len(qs) >= maxQueriesPerPeer {
		// Forget the oldest: the set of nonces an answer may carry stays
		// small, whatever the schedule does.
		oldest := 0
		for i, q := range qs {
			if q.sent.Before(qs[oldest].sent) {
				oldest = i
			}
		}
		delete(m.control.nonces, qs[oldest].nonce)
		m.control.removeQuery(p, oldest)
	}
	ver := p.qver
	if m.cfg.Auth.Require {
		ver = wire.Version2
	} else if r := p.r(); ver == wire.Version1 && now.Sub(r.v2Tried) >= r.v2Wait {
		// Ask a version-1 peer in version 2 now and then: it may have
		// been upgraded (or have come up just after a version-2 query),
		// and it would go on answering version 1.
		ver = wire.Version2
		w := p.w()
		w.v2Tried = now
		w.v2Wait = min(max(2*w.v2Wait, m.cfg.Interval), v2Retry)
	}
	n := m.control.newNonce()
	m.sched.batched++
	to := netip.AddrPortFrom(p.addr, uint16(m.cfg.Port))
	m.control.takeQueries(p)
	l := p.queried
	pa := p.paths[i]
	unplanned := pa.asked == 0 || !pa.resolved || pa.h.state == apitype.PeerDown
	l.q = append(l.q, pendingQuery{nonce: n, query: query{idx: i, to: to, ver: ver, unplanned: unplanned, sent: now}})
	m.control.nonces[n] = p
	p.paths[i].asked = monoNs(now)
	msg := wire.Message{Version: ver, Nonce: n, Index: uint8(i), Count: uint8(min(len(m.local), 255)),
		QPN: lp.QPN, QKey: lp.QKey, LID: lp.LID, GID: lp.GID}
	if ext, ok := m.flowsQueryExt(lp); ok && ver == wire.Version2 {
		msg.Ext = []wire.Ext{ext}
	}
	t1, err := m.control.ctl.QueryClock(to, msg)
	if err != nil {
		m.log.Debug("control query failed", "peer", p.spec.Name, "err", err)
	}
	l.q[len(l.q)-1].t1 = t1
}

// spreadRefresh sets the path's last query back by a random part of the
// period it is asked again in (the refresh every resolve interval, or the
// first path's clock query, clockEvery), at the answer to a query out of
// its schedule (its first, every path's after this node's fingerprint
// changed, a down path's): its next query then comes at a random point of
// its first period, and the later ones a period apart from there. Such
// queries go to many peers within an interval (the peers' first turns,
// the turns after a fingerprint change, a rack's peers back at once), and
// without this the refreshes came so every
// minute ever after: a burst of a query to every peer in one interval (at
// a thousand peers 250 a pass, at ten thousand the whole control socket's
// buffer), whose answers the manager's inbox and the outstanding queries
// were sized for, to be kept ever after (issue #29: docs/PROBES.md,
// "Memory per peer"). Spread, a pass asks some peers/(period/window) of
// them: 4 at a thousand peers.
func (m *Manager) spreadRefresh(p *mpeer, pa *path, idx int) {
	period := m.cfg.Resolve
	if idx == 0 && p.ver == wire.Version2 {
		period = m.clockEvery()
	}
	if period <= 0 || pa.asked == 0 {
		return
	}
	pa.asked = max(1, pa.asked-rand.Int64N(int64(period)))
}

// onAnswer takes an answer to one of this node's control queries: it must
// carry a nonce outstanding for a peer and come from the exact address and
// port that query went to; the nonce is consumed. Anything else is
// dropped: an off-path sender can neither guess a random nonce nor answer
// from the peer's control port.
func (m *Manager) onAnswer(a answer, now time.Time) {
	if a.query {
		m.onQuery(a, now)
		return
	}
	p := m.control.nonces[a.m.Nonce]
	if p == nil {
		return // not an answer to a query of ours, or already answered
	}
	qi := p.findQuery(a.m.Nonce)
	if qi < 0 || p.queried.q[qi].to != a.from || (m.cfg.Auth.Require && !a.m.Authenticated) {
		return
	}
	q := p.queried.q[qi]
	m.control.removeQuery(p, qi)
	delete(m.control.nonces, a.m.Nonce)
	p.qMisses = 0
	if p.nodeID != a.m.NodeID {
		p.nodeID, p.nodeIDStr = a.m.NodeID, ""
	}
	if p.ver != a.m.Version || p.authenticated != a.m.Authenticated {
		m.changedPeer(p)
		if a.m.Version == wire.Version1 && p.ver != wire.Version1 {
			// Newly version 1: retry version 2 soon, then less often.
			w := p.w()
			w.v2Tried, w.v2Wait = now, m.cfg.Interval
		}
		if len(m.cfg.Auth.Key) > 0 && !a.m.Authenticated {
			// auth = "prefer": answered, but flagged.
			m.log.Warn("peer answers without authentication", "peer", p.spec.Name, "wire_version", a.m.Version,
				"hint", "give it the same [probe] key_file; [probe] auth = \"prefer\" accepts it until then")
		}
	}
	p.ver, p.qver, p.authenticated = a.m.Version, a.m.Version, a.m.Authenticated
	m.takeClock(p, a, q.query)
	// An answer without a fingerprint (version 1, an older version 2, or
	// a malformed one) makes it unknown: nothing is compared.
	fp, err := m.fps.decode(a.m)
	if err != nil {
		m.log.Debug("peer sent a malformed fingerprint", "peer", p.spec.Name, "err", err)
	}
	m.setPeerFingerprint(p, fp)
	if q.idx >= len(p.paths) {
		return
	}
	pa := p.paths[q.idx]
	if a.m.Count == 0 {
		// The peer has no probing port right now. That is one failed
		// observation of the path, as a lost probe is: down takes
		// down_after of them in a row, so that no single message can
		// take a healthy peer down.
		if pa.resolved {
			pa.resolved = false
			m.ann.stale = true
			m.checkMismatch(p)
		}
		m.observe(p, pa, sample{lost: true}, now)
		if pa.h.state == apitype.PeerDown {
			pa.h.reason = "it has no active RDMA port to answer probes on"
			m.aggregate(p, now)
		}
		return
	}
	ep := ud.Endpoint{GID: a.m.GID, QPN: a.m.QPN, QKey: a.m.QKey, LID: a.m.LID}
	// What the mismatches depend on and an answer can change: the
	// peer's port behind the path and whether the path is resolved (the
	// fingerprint's own change checks them in setPeerFingerprint). An
	// answer that changes neither leaves them as they are: a mismatched
	// peer's text is not made again at every answer.
	recheck := pa.remoteIdx != a.m.Index
	pa.remoteIdx = a.m.Index
	moved := false
	if pa.remote != ep {
		// A new QP (the peer restarted, or its port came back with
		// its link): probes to the old one are lost for good, and a
		// down path probes again at once. Its probes in flight are
		// counted lost now, not at their timeout, where they would
		// break the run of answers the new QP is about to give
		// (up_after in a row: the partition drill, docs/TESTING.md).
		if pa.remote.GID != ep.GID || pa.remote.LID != ep.LID {
			m.ann.stale = true
		}
		pa.remote, pa.gidStr = ep, ""
		m.changedPeer(p)
		if pa.resolved && pa.h.state == apitype.PeerDown {
			m.losePath(p, pa, now)
			moved = true
		}
	}
	if idx := m.localIndex(pa.local); idx >= 0 {
		m.acceptFlows(pa, m.local[idx], a.m)
	}
	first := !pa.resolved
	pa.resolved = true
	if first || q.unplanned {
		m.spreadRefresh(p, pa, q.idx)
	}
	if first {
		m.ann.stale = true
	}
	if first || recheck {
		m.checkMismatch(p)
	}
	if (first || moved) && pa.inflight == 0 && m.sched.batched < m.sched.limit {
		// Within the pass's batch (the transport's slots); past it, the
		// path's first probe waits for the peer's turn.
		m.send(p, pa, now)
		if pa.h.state == apitype.PeerDown {
			// A down path's peer has a port again (a partition's
			// end): its answer is taken at once (rise).
			m.sched.rising = true
		}
	}
}
