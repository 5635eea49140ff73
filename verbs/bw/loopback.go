package bw

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/probe/wire"
	"github.com/rdmad/rdmad/verbs"
)

// MaxQPs bounds the queue pairs a test runs in parallel (rdmactl bw
// --qps), a peer test's as the wire carries them: each pair is a buffer of
// up to wire.MaxBWSize bytes on both sides and Depth requests in flight.
const MaxQPs = wire.MaxBWQPs

// CheckQPs checks a test's count of parallel queue pairs.
func CheckQPs(n int) error {
	if n < 1 || n > MaxQPs {
		return fmt.Errorf("%d queue pairs is out of range; use 1 to %d, e.g. 4", n, MaxQPs)
	}
	return nil
}

// A LoopbackRequest is a bandwidth test of one of this node's ports
// against itself: RC between queue pairs of that port, through the
// adapter, as ib_write_bw to the node's own address measures it.
type LoopbackRequest struct {
	// Device and Port name the port; Device "" takes the first device
	// with an ACTIVE port, Port 0 the device's first ACTIVE port.
	Device   string
	Port     int
	Op       wire.BWOp
	Size     int
	Duration time.Duration
	// QPs is the queue pairs run in parallel (1 to MaxQPs; 0 is 1).
	QPs int
}

// RunLoopback runs the loopback test r describes and returns its result.
// It takes the node's one test slot as Run does: a peer test this node
// runs or serves makes it fail at once with a *BusyError, and while it
// runs the node refuses peers' tests (busy) and runs none of its own.
func (n *Node) RunLoopback(ctx context.Context, r LoopbackRequest) (apitype.BandwidthResult, error) {
	var res apitype.BandwidthResult
	if r.QPs == 0 {
		r.QPs = 1
	}
	if err := CheckParams(r.Size, r.Duration); err != nil {
		return res, fmt.Errorf("bw: %w", err)
	}
	if err := CheckQPs(r.QPs); err != nil {
		return res, fmt.Errorf("bw: %w", err)
	}
	if r.Op < wire.BWWrite || r.Op > wire.BWSend {
		return res, fmt.Errorf("bw: operation %d: use write, read or send", r.Op)
	}
	if r.Port < 0 || (r.Port > 0 && r.Device == "") {
		return res, fmt.Errorf("bw: port %d: name a device and its port (rxe0:1), or the device alone", r.Port)
	}
	what := "a loopback bandwidth test"
	if r.Device != "" {
		what += " of " + r.Device
	}
	if err := n.acquire(what); err != nil {
		return res, err
	}
	defer n.release()
	res, err := n.runLoopback(ctx, r)
	if err == nil {
		n.mu.Lock()
		if n.stats.Loopback == nil {
			n.stats.Loopback = map[string]apitype.BandwidthResult{}
		}
		n.stats.Loopback[res.Local] = res
		n.mu.Unlock()
		n.notify()
	}
	return res, err
}

// A loopPair is one lane of a loopback test: the requester's QP (src) and
// the QP whose memory it targets (dst), connected to each other on one
// port, and for SEND the receives dst keeps posted.
type loopPair struct {
	src, dst *qpSet
	recv     *session
}

func (lp *loopPair) close() {
	if lp.recv != nil {
		lp.recv.teardown() // frees dst
	} else if lp.dst != nil {
		lp.dst.close()
	}
	if lp.src != nil {
		lp.src.close()
	}
}

func (n *Node) runLoopback(ctx context.Context, r LoopbackRequest) (apitype.BandwidthResult, error) {
	res := apitype.BandwidthResult{Loopback: true, Op: r.Op.String(), Size: r.Size, Duration: r.Duration, QPs: r.QPs, Polling: "busy"}
	var p *port
	var err error
	if r.Device == "" {
		p, err = openPort()
	} else {
		p, err = openDevicePort(r.Device, r.Port)
	}
	if err != nil {
		return res, fmt.Errorf("bw: loopback test: %w", err)
	}
	p.shared = true
	defer p.vctx.Close()
	res.Local = p.key()
	pairs := make([]*loopPair, 0, r.QPs)
	defer func() {
		for _, lp := range pairs {
			lp.close()
		}
	}()
	lanes := make([]lane, 0, r.QPs)
	for i := 0; i < r.QPs; i++ {
		lp, err := n.connectPair(p, r)
		if err != nil {
			return res, fmt.Errorf("bw: loopback test on %s: set up queue pair %d of %d: %w", p.key(), i+1, r.QPs, err)
		}
		pairs = append(pairs, lp)
		ln := lane{set: lp.src}
		if r.Op != wire.BWSend {
			ln.addr, ln.rkey = lp.dst.mr.Addr(), lp.dst.mr.RKey()
		}
		lanes = append(lanes, ln)
	}
	n.log.Info("loopback bandwidth test", "port", p.key(), "op", r.Op.String(), "size", r.Size,
		"duration", r.Duration.String(), "qps", r.QPs)
	msgs, elapsed, err := blastLanes(ctx, lanes, r.Op, r.Size, r.Duration, p.key()+" (loopback)")
	return measured(res, msgs, r.Size, elapsed, err)
}

// connectPair makes one lane's two QPs on p and connects each to the
// other with the port's own GID (LID on InfiniBand) as the destination:
// the traffic leaves through the adapter and comes back to it, as it does
// between two processes of the node.
func (n *Node) connectPair(p *port, r LoopbackRequest) (lp *loopPair, err error) {
	// Closed through its own variable: every "return nil, err" below
	// sets the result lp to nil before the defer runs.
	built := &loopPair{}
	lp = built
	defer func() {
		if err != nil {
			built.close()
			lp = nil
		}
	}()
	if lp.src, err = newQPSet(p, r.Size, verbs.AccessLocalWrite, 2*Depth, Depth, 1, false); err != nil {
		return nil, err
	}
	var access verbs.Access
	var recv int
	switch r.Op {
	case wire.BWWrite:
		access = verbs.AccessLocalWrite | verbs.AccessRemoteWrite
	case wire.BWRead:
		access = verbs.AccessRemoteRead
	case wire.BWSend:
		access, recv = verbs.AccessLocalWrite, recvDepth
	}
	if lp.dst, err = newQPSet(p, r.Size, access, max(recv, 1)+1, 1, max(recv, 1), recv > 0); err != nil {
		return nil, err
	}
	if err := lp.src.qp.Init(p.num, 0, 0); err != nil {
		return nil, err
	}
	if err := lp.dst.qp.Init(p.num, access&^verbs.AccessLocalWrite, 0); err != nil {
		return nil, err
	}
	srcPSN, dstPSN := randPSN(), randPSN()
	self := p.path(n.cfg, p.gid.GID, p.attr.LID, 0)
	dstPath := self
	rd := uint8(1)
	if r.Op == wire.BWRead {
		dstPath.RdAtomic = p.rdAtomic()
		rd = p.rdAtomic()
	}
	if err := lp.dst.qp.ReadyToReceive(dstPath, verbs.Remote{QPN: lp.src.qp.Num(), PSN: srcPSN}); err != nil {
		return nil, err
	}
	// RTS as well as RTR, as the peer test's responder: it posts no sends.
	if err := lp.dst.qp.ReadyToSend(dstPSN, 14, 7); err != nil {
		return nil, err
	}
	if err := lp.src.qp.ReadyToReceive(self, verbs.Remote{QPN: lp.dst.qp.Num(), PSN: dstPSN}); err != nil {
		return nil, err
	}
	if err := lp.src.qp.ReadyToSendReads(srcPSN, 14, 7, rd); err != nil {
		return nil, err
	}
	if recv > 0 {
		for i := 0; i < recv; i++ {
			if err := lp.dst.qp.PostRecv(uint64(i), lp.dst.sge(r.Size)); err != nil {
				return nil, err
			}
		}
		// The responder's reposting loop keeps dst's receives posted;
		// the session owns dst from here (its teardown frees it, and
		// leaves the port to runLoopback).
		s := &session{op: r.Op, set: lp.dst}
		lp.recv = s
		s.startReposts(r.Size)
	}
	return lp, nil
}

// LoopbackResults returns the last loopback test's result of every port
// tested since rdmad started, by port ("rxe0/1").
func (n *Node) LoopbackResults() map[string]apitype.BandwidthResult {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make(map[string]apitype.BandwidthResult, len(n.stats.Loopback))
	for k, v := range n.stats.Loopback {
		out[k] = v
	}
	return out
}

// IsBusy reports whether err says the node's test slot was taken.
func IsBusy(err error) bool {
	var b *BusyError
	return errors.As(err, &b)
}
