package bw

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/probe/wire"
	"github.com/rdmad/rdmad/verbs"
)

// A Request is one bandwidth test this node runs against a peer.
type Request struct {
	// Peer is the peer's control endpoint (its address and [probe] port).
	Peer netip.AddrPort
	// Name is how the caller named the peer (for the result).
	Name     string
	Op       wire.BWOp
	Size     int
	Duration time.Duration
	// ControlKey tags the messages (wire.ControlKey of the fleet key);
	// with one, only an authenticated answer is taken. Nil: no key.
	ControlKey []byte
	// OtherKeys are the control keys of a rotation's other keys: an
	// answer tagged with one of them is authenticated too.
	OtherKeys [][]byte
	// QPs is the queue pairs run in parallel (1 to MaxQPs; 0 is 1). More
	// than one needs a peer whose rdmad knows wire.ExtBWQPs.
	QPs int
}

// answerWait bounds the wait for the peer's answer per attempt, and
// attempts how often the request is sent (UDP may lose one; the peer
// answers a repeated request with the same answer).
const (
	answerWait = 2 * time.Second
	attempts   = 3
)

// drainWait bounds the wait for the completions outstanding when the
// duration is over.
const drainWait = 5 * time.Second

// Run runs the test r describes and returns its result. It holds the
// node's one test slot throughout (a test this node serves, or another it
// runs, makes it fail at once with a *BusyError); a peer's refusal is a
// *RefusedError.
func (n *Node) Run(ctx context.Context, r Request) (apitype.BandwidthResult, error) {
	var res apitype.BandwidthResult
	if err := CheckParams(r.Size, r.Duration); err != nil {
		return res, fmt.Errorf("bw: %w", err)
	}
	if r.Op < wire.BWWrite || r.Op > wire.BWSend {
		return res, fmt.Errorf("bw: operation %d: use write, read or send", r.Op)
	}
	if r.QPs == 0 {
		r.QPs = 1
	}
	if err := CheckQPs(r.QPs); err != nil {
		return res, fmt.Errorf("bw: %w", err)
	}
	if err := n.acquire(fmt.Sprintf("a bandwidth test to %s", r.Peer.Addr())); err != nil {
		return res, err
	}
	defer n.release()
	res, err := n.run(ctx, r)
	if err == nil {
		n.mu.Lock()
		last := res
		n.stats.Last = &last
		n.mu.Unlock()
		n.notify()
	}
	return res, err
}

func (n *Node) run(ctx context.Context, r Request) (apitype.BandwidthResult, error) {
	res := apitype.BandwidthResult{Peer: r.Name, Address: r.Peer.Addr().String(), Op: r.Op.String(), Size: r.Size,
		Duration: r.Duration, QPs: r.QPs, Polling: "busy"}
	p, err := openPort()
	if err != nil {
		return res, err
	}
	// The sets share the context: closed once, after them.
	p.shared = true
	defer p.vctx.Close()
	res.Local = p.key()
	access := verbs.AccessLocalWrite
	sets := make([]*qpSet, 0, r.QPs)
	defer func() {
		for _, set := range sets {
			set.close()
		}
	}()
	psns := make([]uint32, 0, r.QPs)
	for i := 0; i < r.QPs; i++ {
		set, err := newQPSet(p, r.Size, access, 2*Depth, Depth, 1, false)
		if err != nil {
			return res, err
		}
		sets = append(sets, set)
		if err := set.qp.Init(p.num, 0, 0); err != nil {
			return res, err
		}
		psns = append(psns, randPSN())
	}
	conn, err := net.ListenUDP("udp", nil)
	if err != nil {
		return res, fmt.Errorf("bw: open a UDP socket for the control messages: %w", err)
	}
	defer conn.Close()
	psn := psns[0]
	ext := []wire.Ext{wire.BW{Op: r.Op, MTU: uint8(p.attr.ActiveMTU), PSN: psn, Size: uint32(r.Size), Duration: r.Duration}.Ext(),
		// The time lets a responder with a key refuse a replay.
		wire.BWTimeExt(time.Now())}
	if r.QPs > 1 {
		more := make([]wire.BWQP, 0, r.QPs-1)
		for i, set := range sets[1:] {
			more = append(more, wire.BWQP{QPN: set.qp.Num(), PSN: psns[i+1]})
		}
		ext = append(ext, wire.BWQPsExt(more))
	}
	req := wire.Message{Version: wire.Version2, Type: wire.TypeBWRequest, Nonce: randNonce(), NodeID: n.cfg.NodeID,
		QPN: sets[0].qp.Num(), LID: p.attr.LID, GID: p.gid.GID, Ext: ext}
	ans, bw, err := exchange(ctx, conn, r, req)
	if err != nil {
		return res, err
	}
	done := func() {
		// Free the peer's side now rather than when its time is up.
		d := wire.Message{Version: wire.Version2, Type: wire.TypeBWDone, Nonce: req.Nonce, NodeID: n.cfg.NodeID, QPN: req.QPN,
			Ext: []wire.Ext{wire.BW{Op: r.Op}.Ext()}}
		if b, err := d.Append(nil, r.ControlKey); err == nil {
			conn.WriteToUDPAddrPort(b, r.Peer)
		}
	}
	defer done()
	// The answer's QP must be the peer's own: a peer that named another
	// host's would turn this node's test into a flood of that host.
	ib := p.attr.LinkLayer == verbs.LinkLayerInfiniBand
	if err := n.checkAddress(r.Peer.Addr(), ans.GID, ans.LID, &ib); err != nil {
		return res, fmt.Errorf("%w; the test is refused here, so that it cannot be aimed at a third host", err)
	}
	remotes := append([]wire.BWQP{{QPN: ans.QPN, PSN: bw.PSN, Addr: bw.Addr, RKey: bw.RKey}}, wire.BWQPsOf(ans)...)
	switch {
	case len(remotes) != r.QPs && len(remotes) == 1:
		return res, fmt.Errorf("bw: %s answered with one queue pair, asked %d: its rdmad runs one per test (older than this one's); update it, or ask for --qps 1", r.Peer.Addr(), r.QPs)
	case len(remotes) != r.QPs:
		return res, fmt.Errorf("bw: %s answered with %d queue pairs, asked %d", r.Peer.Addr(), len(remotes), r.QPs)
	}
	path := p.path(n.cfg, ans.GID, ans.LID, bw.MTU)
	rd := uint8(1)
	if r.Op == wire.BWRead {
		rd = p.rdAtomic()
	}
	lanes := make([]lane, 0, r.QPs)
	for i, rem := range remotes {
		if r.Op != wire.BWSend && rem.RKey == 0 && rem.Addr == 0 {
			return res, fmt.Errorf("bw: %s accepted an RDMA %s test without memory to use for queue pair %d", r.Peer.Addr(), r.Op, i+1)
		}
		if err := sets[i].qp.ReadyToReceive(path, verbs.Remote{QPN: rem.QPN, PSN: rem.PSN}); err != nil {
			return res, err
		}
		// timeout 14 (67 ms) and 7 retries, as the loopback probe: a
		// lost packet under load is retried, a vanished peer fails the
		// test.
		if err := sets[i].qp.ReadyToSendReads(psns[i], 14, 7, rd); err != nil {
			return res, err
		}
		lanes = append(lanes, lane{set: sets[i], addr: rem.Addr, rkey: rem.RKey})
	}
	n.log.Info("bandwidth test", "peer", r.Peer.Addr().String(), "op", r.Op.String(), "size", r.Size,
		"duration", r.Duration.String(), "port", p.key(), "qps", r.QPs)
	msgs, elapsed, err := blastLanes(ctx, lanes, r.Op, r.Size, r.Duration, r.Peer.Addr().String())
	return measured(res, msgs, r.Size, elapsed, err)
}

// measured fills in what a test of msgs messages of size bytes in elapsed
// moved (Gb/s and messages per second over elapsed), and its time unless
// the test failed with err: the peer test's and the loopback test's one
// arithmetic.
func measured(res apitype.BandwidthResult, msgs uint64, size int, elapsed time.Duration, err error) (apitype.BandwidthResult, error) {
	res.Messages = msgs
	res.Bytes = msgs * uint64(size)
	res.Elapsed = elapsed
	if elapsed > 0 {
		res.Gbps = float64(res.Bytes) * 8 / elapsed.Seconds() / 1e9
		res.MsgRate = float64(msgs) / elapsed.Seconds()
	}
	if err != nil {
		return res, err
	}
	res.Time = time.Now().UTC()
	return res, nil
}

// exchange sends the request and waits for the peer's answer: from the
// peer's exact address and port, for this request's nonce, and with a key
// only authenticated. Anything else arriving on the socket is ignored.
func exchange(ctx context.Context, conn *net.UDPConn, r Request, req wire.Message) (wire.Message, wire.BW, error) {
	b, err := req.Append(nil, r.ControlKey)
	if err != nil {
		return wire.Message{}, wire.BW{}, fmt.Errorf("bw: encode the request: %w", err)
	}
	buf := make([]byte, wire.MaxSize+1)
	for i := 0; i < attempts; i++ {
		if _, err := conn.WriteToUDPAddrPort(b, r.Peer); err != nil {
			return wire.Message{}, wire.BW{}, fmt.Errorf("bw: send the request to %s: %w", r.Peer, err)
		}
		deadline := time.Now().Add(answerWait)
		for {
			if ctx.Err() != nil {
				return wire.Message{}, wire.BW{}, ctx.Err()
			}
			rd := time.Now().Add(200 * time.Millisecond)
			if deadline.Before(rd) {
				rd = deadline
			}
			conn.SetReadDeadline(rd)
			k, from, err := conn.ReadFromUDPAddrPort(buf)
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					if time.Now().Before(deadline) {
						continue
					}
					break
				}
				return wire.Message{}, wire.BW{}, fmt.Errorf("bw: read the answer: %w", err)
			}
			from = netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
			if from != netip.AddrPortFrom(r.Peer.Addr().Unmap(), r.Peer.Port()) {
				continue
			}
			m, err := wire.DecodeKeys(buf[:k], append([][]byte{r.ControlKey}, r.OtherKeys...)...)
			if err != nil || m.Type != wire.TypeBWAnswer || m.Nonce != req.Nonce || (len(r.ControlKey) > 0 && !m.Authenticated) {
				continue
			}
			a, err := wire.BWOf(m)
			if err != nil {
				continue
			}
			if a.Status != wire.BWOK {
				return m, a, &RefusedError{Peer: r.Peer, Status: a.Status}
			}
			if a.Op != r.Op {
				return m, a, fmt.Errorf("bw: %s answered for operation %s, asked %s", r.Peer.Addr(), a.Op, r.Op)
			}
			if r.Op != wire.BWSend && a.RKey == 0 && a.Addr == 0 {
				return m, a, fmt.Errorf("bw: %s accepted an RDMA %s test without memory to use", r.Peer.Addr(), r.Op)
			}
			return m, a, nil
		}
	}
	return wire.Message{}, wire.BW{}, fmt.Errorf("bw: no answer from %s within %s (%d tries): is rdmad running there and new enough for bandwidth tests, is this node one of its [[peer]]s or in its [probe] allow, and is the fleet key the same ([probe] key_file)?",
		r.Peer, time.Duration(attempts)*answerWait, attempts)
}

// A lane is one requester QP of a test and the memory its requests aim
// at (for READ and WRITE; a SEND test's lanes have none).
type lane struct {
	set  *qpSet
	addr uint64
	rkey uint32
}

// blastLanes keeps Depth work requests of op outstanding on every lane
// for d, busy-polling the lanes' CQs in turn on this one goroutine (as
// ib_write_bw -q polls its QPs from one thread: a busy poller per QP would
// take a core each), and returns the messages completed on all of them
// and the time from the first post to the last completion. to names the
// far end in errors.
func blastLanes(ctx context.Context, lanes []lane, op wire.BWOp, size int, d time.Duration, to string) (uint64, time.Duration, error) {
	var opcode verbs.Opcode
	switch op {
	case wire.BWWrite:
		opcode = verbs.OpRDMAWrite
	case wire.BWRead:
		opcode = verbs.OpRDMARead
	case wire.BWSend:
		opcode = verbs.OpSend
	}
	wrs := make([][]verbs.SendWR, len(lanes))
	for l, ln := range lanes {
		wr := verbs.SendWR{Opcode: opcode, SGE: ln.set.sge(size), RemoteAddr: ln.addr, RKey: ln.rkey, Signaled: true}
		wrs[l] = make([]verbs.SendWR, Depth)
		for i := range wrs[l] {
			wrs[l][i] = wr
			wrs[l][i].ID = uint64(i)
		}
	}
	wcs := make([]verbs.WorkCompletion, 16)
	start := time.Now()
	end := start.Add(d)
	var (
		completed   uint64
		outstanding int
		last        = start
		stopping    bool
		drainEnd    time.Time
	)
	for l, ln := range lanes {
		posted, err := ln.set.qp.PostSendList(wrs[l])
		outstanding += posted
		if err != nil {
			if l == 0 {
				return 0, 0, err
			}
			// The lanes posted before still have requests in flight:
			// they are freed with their QPs.
			return 0, 0, fmt.Errorf("bw: post on QP %d of %d: %w", l+1, len(lanes), err)
		}
	}
	for polls := 0; outstanding > 0; polls++ {
		got := false
		for l, ln := range lanes {
			k, err := ln.set.cq.Poll(wcs)
			if err != nil {
				return completed, last.Sub(start), err
			}
			if k == 0 {
				continue
			}
			got = true
			for _, wc := range wcs[:k] {
				if err := wc.Err(); err != nil {
					return completed, last.Sub(start), fmt.Errorf("bw: %s to %s after %d messages: %w; did the peer stop, or its time run out?", op, to, completed, err)
				}
			}
			completed += uint64(k)
			outstanding -= k
			now := time.Now()
			last = now
			if !stopping && (now.After(end) || ctx.Err() != nil) {
				stopping, drainEnd = true, now.Add(drainWait)
			}
			if !stopping {
				m, err := ln.set.qp.PostSendList(wrs[l][:k])
				outstanding += m
				if err != nil {
					return completed, last.Sub(start), err
				}
			}
		}
		if got {
			continue
		}
		// Nothing completed: look at the clock only now and then (a
		// clock read can cost more than a poll under emulation).
		if polls%256 != 0 {
			continue
		}
		now := time.Now()
		if !stopping && (now.After(end) || ctx.Err() != nil) {
			stopping, drainEnd = true, now.Add(drainWait)
		}
		if stopping && now.After(drainEnd) {
			return completed, last.Sub(start), fmt.Errorf("bw: %d %s requests to %s did not complete within %s after the test", outstanding, op, to, drainWait)
		}
		if !stopping && now.Sub(last) > drainWait {
			return completed, last.Sub(start), fmt.Errorf("bw: no %s completion from %s for %s", op, to, drainWait)
		}
	}
	if err := ctx.Err(); err != nil {
		return completed, last.Sub(start), err
	}
	return completed, last.Sub(start), nil
}
