package bw

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/rdmad/rdmad/probe/wire"
	"github.com/rdmad/rdmad/verbs"
)

// A session is the test a node serves as responder.
type session struct {
	from   netip.AddrPort // the requester's control address: Done must come from it
	nonce  uint64
	op     wire.BWOp
	answer wire.Message // sent again if the request is repeated
	// set is the first queue pair's, more the others' of a test of
	// several (wire.ExtBWQPs); all on one port, whose context the
	// session closes when port is set (else its opener does).
	set   *qpSet
	more  []*qpSet
	port  *port
	timer *time.Timer
	// For SEND tests, the goroutines that keep receives posted, one per
	// queue pair.
	cancel  context.CancelFunc
	reposts sync.WaitGroup
	once    sync.Once
}

// sets returns every queue pair set of s, the first first.
func (s *session) sets() []*qpSet { return append([]*qpSet{s.set}, s.more...) }

// startReposts keeps size-byte receives posted on every set of s until
// teardown (SEND tests).
func (s *session) startReposts(size int) {
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	for _, set := range s.sets() {
		s.reposts.Add(1)
		go s.repost(ctx, set, size)
	}
}

// Handle answers a bandwidth message that the control endpoint admitted
// (an allowed source, within its rate, authenticated when a key is set).
// It returns the answer to send, if any: a request gets an acceptance or
// a refusal that says why; a done message ends the test it names and gets
// no answer; an answer (which only a requester's own socket expects) is
// dropped. Nothing is allocated unless the node answers tests ([probe]
// bandwidth), no other test runs here and the parameters are in bounds.
func (n *Node) Handle(from netip.AddrPort, m wire.Message) (wire.Message, bool) {
	switch m.Type {
	case wire.TypeBWRequest:
		ans := n.request(from, m)
		n.notify()
		return ans, true
	case wire.TypeBWDone:
		n.mu.Lock()
		s := n.resp
		n.mu.Unlock()
		if s != nil && s.from == from && s.nonce == m.Nonce {
			n.endResponder(s, "the requester is done")
		}
	}
	return wire.Message{}, false
}

func (n *Node) refuse(m wire.Message, op wire.BWOp, st wire.BWStatus) wire.Message {
	n.stats.Refused[statusName(st)]++
	return wire.Message{Version: wire.Version2, Type: wire.TypeBWAnswer, Nonce: m.Nonce, NodeID: n.cfg.NodeID,
		Ext: []wire.Ext{wire.BW{Op: op, Status: st}.Ext()}}
}

func statusName(s wire.BWStatus) string {
	switch s {
	case wire.BWDisabled:
		return "disabled"
	case wire.BWBusy:
		return "busy"
	case wire.BWBadRequest:
		return "bad_request"
	case wire.BWUnavailable:
		return "unavailable"
	case wire.BWStale:
		return "stale"
	case wire.BWBadAddress:
		return "bad_address"
	}
	return fmt.Sprintf("status_%d", s)
}

func (n *Node) request(from netip.AddrPort, m wire.Message) wire.Message {
	req, err := wire.BWOf(m)
	if err != nil {
		// Decode checked it; a message from elsewhere is refused.
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.refuse(m, wire.BWWrite, wire.BWBadRequest)
	}
	n.mu.Lock()
	switch {
	case !n.enabled || n.closed:
		defer n.mu.Unlock()
		return n.refuse(m, req.Op, wire.BWDisabled)
	case n.resp != nil && n.resp.from == from && n.resp.nonce == m.Nonce:
		// The requester did not get the answer and asked again.
		defer n.mu.Unlock()
		return n.resp.answer
	}
	if st := n.fresh(m); st != wire.BWOK {
		defer n.mu.Unlock()
		return n.refuse(m, req.Op, st)
	}
	if n.slot.take(fmt.Sprintf("a bandwidth test for %s", from.Addr())) != nil {
		defer n.mu.Unlock()
		return n.refuse(m, req.Op, wire.BWBusy)
	}
	switch {
	case CheckParams(int(req.Size), req.Duration) != nil:
		defer n.mu.Unlock()
		n.slot.free()
		return n.refuse(m, req.Op, wire.BWBadRequest)
	case n.checkAddress(from.Addr(), m.GID, m.LID, nil) != nil:
		// Not the requester's own address on any link layer: refused
		// before anything is allocated (setUp checks again for the
		// port's link layer).
		defer n.mu.Unlock()
		n.slot.free()
		n.logBadAddress(from.Addr(), n.checkAddress(from.Addr(), m.GID, m.LID, nil))
		return n.refuse(m, req.Op, wire.BWBadAddress)
	}
	n.mu.Unlock()

	s, err := n.setUp(from, m, req)
	n.mu.Lock()
	if err != nil {
		defer n.mu.Unlock()
		n.slot.free()
		if errors.Is(err, errBadAddress) {
			n.logBadAddress(from.Addr(), err)
			return n.refuse(m, req.Op, wire.BWBadAddress)
		}
		n.log.Warn("cannot serve a bandwidth test", "from", from.Addr().String(), "op", req.Op.String(), "err", err)
		return n.refuse(m, req.Op, wire.BWUnavailable)
	}
	if n.closed {
		// Close came while the session was made: this caller frees
		// it, before it answers, so nothing outlives Close's caller's
		// endpoint.
		n.slot.free()
		ans := n.refuse(m, req.Op, wire.BWDisabled)
		n.mu.Unlock()
		s.teardown()
		return ans
	}
	defer n.mu.Unlock()
	n.resp = s
	n.stats.Served++
	// Whatever the requester does, the test ends here after its duration
	// and the grace.
	s.timer = time.AfterFunc(req.Duration+wire.BWGrace, func() { n.endResponder(s, "its time is up") })
	n.log.Info("serving a bandwidth test", "from", from.Addr().String(), "op", req.Op.String(),
		"size", req.Size, "duration", req.Duration.String(), "port", s.set.p.key())
	return s.answer
}

// setUp makes the responder's side: for each of the requester's queue
// pairs (the message's, and those wire.ExtBWQPs lists) a buffer of the
// test's size, registered for the one remote operation the test uses, and
// an RC QP connected to that queue pair alone.
func (n *Node) setUp(from netip.AddrPort, m wire.Message, req wire.BW) (*session, error) {
	p, err := openPort()
	if err != nil {
		return nil, err
	}
	p.shared = true // the session closes the context, once, after its sets
	ib := p.attr.LinkLayer == verbs.LinkLayerInfiniBand
	if err := n.checkAddress(from.Addr(), m.GID, m.LID, &ib); err != nil {
		p.vctx.Close()
		return nil, err
	}
	var access verbs.Access
	var recv int
	switch req.Op {
	case wire.BWWrite:
		access = verbs.AccessLocalWrite | verbs.AccessRemoteWrite
	case wire.BWRead:
		access = verbs.AccessRemoteRead
	case wire.BWSend:
		access, recv = verbs.AccessLocalWrite, recvDepth
	}
	remotes := append([]wire.BWQP{{QPN: m.QPN, PSN: req.PSN}}, wire.BWQPsOf(m)...)
	s := &session{from: from, nonce: m.Nonce, op: req.Op, port: p}
	var sets []*qpSet
	fail := func(err error) (*session, error) {
		for _, set := range sets {
			set.close()
		}
		p.vctx.Close()
		return nil, err
	}
	path := p.path(n.cfg, m.GID, m.LID, req.MTU)
	if req.Op == wire.BWRead {
		path.RdAtomic = p.rdAtomic()
	}
	var mine []wire.BWQP
	for _, rem := range remotes {
		set, err := newQPSet(p, int(req.Size), access, max(recv, 1)+1, 1, max(recv, 1), recv > 0)
		if err != nil {
			return fail(err)
		}
		sets = append(sets, set)
		if err := set.qp.Init(p.num, access&^verbs.AccessLocalWrite, 0); err != nil {
			return fail(err)
		}
		if err := set.qp.ReadyToReceive(path, verbs.Remote{QPN: rem.QPN, PSN: rem.PSN}); err != nil {
			return fail(err)
		}
		psn := randPSN()
		// RTS as well as RTR, as ib_write_bw does; the QP posts no sends.
		if err := set.qp.ReadyToSend(psn, 14, 7); err != nil {
			return fail(err)
		}
		for i := 0; i < recv; i++ {
			if err := set.qp.PostRecv(uint64(i), set.sge(int(req.Size))); err != nil {
				return fail(err)
			}
		}
		q := wire.BWQP{QPN: set.qp.Num(), PSN: psn}
		if req.Op != wire.BWSend {
			q.Addr, q.RKey = set.mr.Addr(), set.mr.RKey()
		}
		mine = append(mine, q)
	}
	s.set, s.more = sets[0], sets[1:]
	if recv > 0 {
		s.startReposts(int(req.Size))
	}
	ans := wire.BW{Op: req.Op, MTU: uint8(path.MTU), PSN: mine[0].PSN, Size: req.Size, Duration: req.Duration,
		Addr: mine[0].Addr, RKey: mine[0].RKey}
	ext := []wire.Ext{ans.Ext()}
	if len(mine) > 1 {
		ext = append(ext, wire.BWQPsExt(mine[1:]))
	}
	s.answer = wire.Message{Version: wire.Version2, Type: wire.TypeBWAnswer, Nonce: m.Nonce, NodeID: n.cfg.NodeID,
		QPN: mine[0].QPN, LID: p.attr.LID, GID: p.gid.GID, Ext: ext}
	return s, nil
}

// repost keeps a SEND test's receives posted until ctx is done. It waits
// on the completion channel (after a short spin): the requester measures.
func (s *session) repost(ctx context.Context, set *qpSet, size int) {
	defer s.reposts.Done()
	wcs := make([]verbs.WorkCompletion, 16)
	sge := set.sge(size)
	for {
		k, err := set.cq.PollWait(ctx, wcs, 50*time.Microsecond)
		if err != nil {
			return
		}
		for _, wc := range wcs[:k] {
			if wc.Err() != nil {
				return // the QP is in error: the test is over
			}
			if set.qp.PostRecv(wc.WRID, sge) != nil {
				return
			}
		}
	}
}

// endResponder ends s if it is still the node's test and frees its slot.
func (n *Node) endResponder(s *session, why string) {
	n.mu.Lock()
	if n.resp != s {
		n.mu.Unlock()
		return
	}
	n.resp = nil
	n.slot.free()
	// Claimed under the lock Close reads n.resp with: Close either ends
	// s itself or waits here for whoever claimed it (the timer, the
	// requester's done).
	n.ending.Add(1)
	defer n.ending.Done()
	n.mu.Unlock()
	s.teardown()
	n.log.Info("bandwidth test ended", "from", s.from.Addr().String(), "op", s.op.String(), "why", why)
}

// teardown frees the session's QPs, memory and device; once.
func (s *session) teardown() {
	s.once.Do(func() {
		if s.timer != nil {
			s.timer.Stop()
		}
		if s.cancel != nil {
			s.cancel()
			s.reposts.Wait()
		}
		for _, set := range s.sets() {
			set.close()
		}
		if s.port != nil {
			s.port.vctx.Close()
		}
	})
}

// maxSeen bounds the nonces of authenticated requests a node remembers:
// only key holders can add one, at their sources' admission rate, and each
// is forgotten MaxBWSkew after the time it carried.
const maxSeen = 4096

// fresh judges an authenticated request's time and nonce (called with
// n.mu held) and remembers the nonce: BWOK, BWStale for a request without
// a time, with one more than wire.MaxBWSkew from this node's clock, or
// with a nonce seen within that time (a replay: without this, a captured
// request started a new test each time it was sent again), BWBusy when
// the table is full of nonces still within their time. A request without
// a tag (no fleet key here) is taken as before: anyone could forge a new
// one, so remembering it would protect nothing.
func (n *Node) fresh(m wire.Message) wire.BWStatus {
	if !m.Authenticated {
		return wire.BWOK
	}
	now := time.Now()
	if n.now != nil {
		now = n.now()
	}
	at, ok := wire.BWTimeOf(m)
	if !ok || at.Before(now.Add(-wire.MaxBWSkew)) || at.After(now.Add(wire.MaxBWSkew)) {
		return wire.BWStale
	}
	if n.seen == nil {
		n.seen = map[uint64]time.Time{}
	}
	if until, ok := n.seen[m.Nonce]; ok && !now.After(until) {
		return wire.BWStale
	}
	if len(n.seen) >= maxSeen {
		for k, until := range n.seen {
			if now.After(until) {
				delete(n.seen, k)
			}
		}
		if len(n.seen) >= maxSeen {
			return wire.BWBusy
		}
	}
	// Past at+MaxBWSkew the time check refuses the request anyway.
	n.seen[m.Nonce] = at.Add(wire.MaxBWSkew)
	return wire.BWOK
}

// logBadAddress logs a request refused for its RDMA address: one line per
// source every 10 s, with the count held back (a spoofer of an allowed
// address can send such requests at its admission rate; the refusals are
// counted in Stats whatever the log shows).
func (n *Node) logBadAddress(from netip.Addr, err error) {
	if ok, held := n.badAddrLog.Allow(from, time.Now()); ok {
		n.log.Warn("refused a bandwidth test towards another host", "from", from.String(), "err", err, "refused_unlogged", held)
	}
}
