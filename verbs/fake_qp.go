//go:build linux && verbsfake

package verbs

import (
	"encoding/binary"
	"fmt"
	"syscall"
	"time"
)

// A QP is a queue pair of the fake NIC.
type QP struct {
	c         *Context
	pd        *PD
	id        uint64
	typ       QPType
	num       uint32
	scq, rcq  *CQ
	maxSend   int
	maxRecv   int
	maxInline int

	// Guarded by fab.mu.
	dead    bool
	state   QPState
	port    int
	access  Access // RC: the remote operations it accepts
	qkey    uint32 // UD
	global  bool   // RC: the path has a GRH
	sgid    GID    // RC: the source GID of the path
	rgid    GID    // RC: the peer's GID
	rlid    uint16 // RC without GRH: the peer's LID
	rqpn    uint32 // RC: the peer's QPN
	timeout uint8
	retry   uint8
	sq      []*pendingWR // posted sends not executed yet, in order
	rq      []recvWR
	waiters map[*QP]bool // RC QPs whose SEND waits for a receive here
	pumping bool
}

// A pendingWR is a send work request waiting to execute: behind another,
// for a receive at the peer (RNR), or for its next retry (timer).
type pendingWR struct {
	wr    SendWR
	tries int
	timer *time.Timer
}

type recvWR struct {
	id  uint64
	sge SGE
}

// NewQP creates a queue pair in the RESET state.
func (p *PD) NewQP(cfg QPConfig) (*QP, error) {
	fab.mu.Lock()
	defer fab.mu.Unlock()
	if err := p.c.usable("ibv_create_qp"); err != nil {
		return nil, err
	}
	if cfg.SendCQ == nil || cfg.RecvCQ == nil {
		return nil, &Error{Verb: "ibv_create_qp", Object: p.c.name, Err: syscall.EINVAL, Hint: "SendCQ and RecvCQ are required"}
	}
	obj := fmt.Sprintf("%s on %s", cfg.Type, p.c.name)
	if (cfg.Type != QPTypeRC && cfg.Type != QPTypeUD) || p.dead || cfg.SendCQ.dead || cfg.RecvCQ.dead ||
		cfg.SendCQ.c != p.c || cfg.RecvCQ.c != p.c || cfg.MaxSendWR < 1 || cfg.MaxRecvWR < 1 ||
		cfg.MaxSendWR > 1<<14 || cfg.MaxRecvWR > 1<<14 || cfg.MaxSGE > 1 {
		return nil, &Error{Verb: "ibv_create_qp", Object: obj, Err: syscall.EINVAL, Hint: "check max_qp and max_qp_wr of the device"}
	}
	d := p.c.dev
	if d.nextQPN == 0 {
		d.nextQPN = 0x10 // as rxe: the first QPs are special
	}
	d.nextQPN++
	q := &QP{c: p.c, pd: p, typ: cfg.Type, num: d.nextQPN, scq: cfg.SendCQ, rcq: cfg.RecvCQ,
		maxSend: cfg.MaxSendWR, maxRecv: cfg.MaxRecvWR, maxInline: cfg.MaxInline}
	id, err := p.c.add(q.destroy)
	if err != nil {
		return nil, err
	}
	q.id = id
	d.qps[q.num] = q
	p.refs++
	q.scq.qps++
	q.rcq.qps++
	fab.live["qp"]++
	return q, nil
}

// Num returns the QP number.
func (q *QP) Num() uint32 { return q.num }

func (q *QP) obj() string { return fmt.Sprintf("%s QP 0x%x on %s", q.typ, q.num, q.c.name) }

func (q *QP) destroy() error {
	fab.mu.Lock()
	defer fab.mu.Unlock()
	if q.dead {
		return nil
	}
	q.dead = true
	q.stopTimers()
	q.sq, q.rq = nil, nil
	delete(q.c.dev.qps, q.num)
	q.pd.refs--
	q.scq.qps--
	q.rcq.qps--
	fab.live["qp"]--
	q.wakeWaiters()
	return nil
}

// Close destroys the queue pair.
func (q *QP) Close() error {
	fab.mu.Lock()
	q.c.remove(q.id)
	fab.mu.Unlock()
	return q.destroy()
}

// modifiable fails when q cannot be modified. Called with fab.mu held.
func (q *QP) modifiable(verb string) error {
	if q.dead {
		return fmt.Errorf("verbs: %s: %w", q.obj(), ErrClosed)
	}
	if q.c.dev.fatal {
		return &Error{Verb: verb, Object: q.obj(), Err: errFatal}
	}
	return nil
}

func (q *QP) invalid(verb string) error {
	return &Error{Verb: verb, Object: q.obj(), Err: syscall.EINVAL}
}

// Init moves the QP from RESET to INIT on port. For RC, access sets the
// remote operations the QP accepts; for UD, qkey is the queue key.
func (q *QP) Init(port int, access Access, qkey uint32) error {
	const verb = "ibv_modify_qp RESET->INIT"
	fab.mu.Lock()
	defer fab.mu.Unlock()
	if err := q.modifiable(verb); err != nil {
		return err
	}
	if q.state != QPStateReset || q.c.dev.port(port) == nil {
		return q.invalid(verb)
	}
	q.port, q.access, q.qkey = port, access, qkey
	q.state = QPStateInit
	return nil
}

// ReadyToReceive moves the QP from INIT to RTR. For RC it connects to rem
// over path; for UD both are ignored.
func (q *QP) ReadyToReceive(path Path, rem Remote) error {
	const verb = "ibv_modify_qp INIT->RTR"
	fab.mu.Lock()
	defer fab.mu.Unlock()
	if err := q.modifiable(verb); err != nil {
		return err
	}
	if q.state != QPStateInit {
		return q.invalid(verb)
	}
	if q.typ == QPTypeRC {
		pt := q.c.dev.port(path.Port)
		if pt == nil || path.Port != q.port || path.MTU < 1 || path.MTU > 5 {
			return q.invalid(verb)
		}
		var sgid GIDEntry
		if path.Global {
			var ok bool
			if sgid, ok = q.c.dev.gidAt(path.Port, path.GIDIndex); !ok {
				return &Error{Verb: verb, Object: q.obj(), Err: syscall.EINVAL,
					Hint: fmt.Sprintf("check GID index %d and path MTU %d against `rdma link` and the port's GID table", path.GIDIndex, path.MTU.Bytes())}
			}
		} else if pt.attr.LinkLayer == LinkLayerEthernet {
			return q.invalid(verb)
		}
		q.global, q.sgid, q.rgid, q.rlid, q.rqpn = path.Global, sgid.GID, path.RemoteGID, path.DLID, rem.QPN
	}
	q.state = QPStateRTR
	return nil
}

// ReadyToSend moves the QP from RTR to RTS with send PSN psn. timeout is the
// local ACK timeout exponent (4.096 us * 2^timeout), retry the transport
// retry count.
func (q *QP) ReadyToSend(psn uint32, timeout, retry uint8) error {
	return q.ReadyToSendReads(psn, timeout, retry, 1)
}

// ReadyToSendReads is ReadyToSend with rdAtomic RDMA READs outstanding at
// once (the fake executes every READ at once, so the bound is only
// checked against the device's).
func (q *QP) ReadyToSendReads(psn uint32, timeout, retry, rdAtomic uint8) error {
	const verb = "ibv_modify_qp RTR->RTS"
	fab.mu.Lock()
	defer fab.mu.Unlock()
	if err := q.modifiable(verb); err != nil {
		return err
	}
	if q.state != QPStateRTR || timeout > 31 || retry > 7 || rdAtomic > 128 {
		return q.invalid(verb)
	}
	q.timeout, q.retry = timeout, retry
	q.state = QPStateRTS
	return nil
}

// SetState moves the QP to state with no other attribute: RESET to recycle
// it, ERR to flush it. Other states need attributes: EINVAL, as the kernel.
func (q *QP) SetState(state QPState) error {
	verb := "ibv_modify_qp ->" + state.String()
	fab.mu.Lock()
	defer fab.mu.Unlock()
	if err := q.modifiable(verb); err != nil {
		return err
	}
	switch state {
	case QPStateReset:
		q.stopTimers()
		q.sq, q.rq = nil, nil
		q.state = QPStateReset
		q.global, q.sgid, q.rgid, q.rlid, q.rqpn = false, GID{}, GID{}, 0, 0
		q.wakeWaiters()
	case QPStateErr:
		q.toErr()
	default:
		return q.invalid(verb)
	}
	return nil
}

// State queries the QP's current state.
func (q *QP) State() (QPState, error) {
	fab.mu.Lock()
	defer fab.mu.Unlock()
	if q.dead {
		return 0, fmt.Errorf("verbs: %s: %w", q.obj(), ErrClosed)
	}
	return q.state, nil
}

// toErr moves q to ERR and flushes its queues: every send and receive not
// executed completes with WCFlushErr. Called with fab.mu held.
func (q *QP) toErr() {
	if q.state == QPStateErr {
		return
	}
	q.state = QPStateErr
	q.stopTimers()
	for _, w := range q.sq {
		q.scq.push(WorkCompletion{WRID: w.wr.ID, Status: WCFlushErr, Opcode: wcOpcode(w.wr.Opcode), QPNum: q.num})
	}
	q.sq = nil
	for _, r := range q.rq {
		q.rcq.push(WorkCompletion{WRID: r.id, Status: WCFlushErr, Opcode: WCOpRecv, QPNum: q.num})
	}
	q.rq = nil
	q.wakeWaiters()
}

func (q *QP) stopTimers() {
	for _, w := range q.sq {
		if w.timer != nil {
			w.timer.Stop()
			w.timer = nil
		}
	}
}

// wakeWaiters lets the QPs whose SEND waited for a receive here look again
// (a receive came, or q can never answer now). Called with fab.mu held.
func (q *QP) wakeWaiters() {
	ws := q.waiters
	q.waiters = nil
	for w := range ws {
		w.pump()
	}
}

func wcOpcode(o Opcode) int {
	switch o {
	case OpRDMAWrite:
		return WCOpRDMAWrite
	case OpRDMARead:
		return WCOpRDMARead
	}
	return WCOpSend
}

// PostSend posts one send work request.
func (q *QP) PostSend(wr SendWR) error {
	wrs := [1]SendWR{wr}
	_, err := q.PostSendList(wrs[:])
	return err
}

// MaxSendList is the most work requests the cgo build posts with one call
// into the provider; the fake takes any number.
const MaxSendList = 32

// PostSendList posts wrs in order and executes what can execute now. It
// returns how many were posted; on an error the rest were not.
func (q *QP) PostSendList(wrs []SendWR) (int, error) {
	fab.mu.Lock()
	defer fab.mu.Unlock()
	for b := q.c.dev.postBlock[q.port]; b != nil; b = q.c.dev.postBlock[q.port] {
		// A blocked post (FakeBlockPost) waits without the fabric's
		// lock: everything else goes on meanwhile.
		fab.mu.Unlock()
		<-b
		fab.mu.Lock()
	}
	if q.dead {
		return 0, fmt.Errorf("verbs: %s: %w", q.obj(), ErrClosed)
	}
	for i, wr := range wrs {
		if errno := q.checkSend(wr); errno != 0 {
			return i, &Error{Verb: "ibv_post_send " + wr.Opcode.String(), Object: q.obj(), Err: errno, Hint: postHint(int(errno))}
		}
		if q.state == QPStateErr {
			q.scq.push(WorkCompletion{WRID: wr.ID, Status: WCFlushErr, Opcode: wcOpcode(wr.Opcode), QPNum: q.num})
			continue
		}
		if q.typ == QPTypeUD && fab.udSends != nil {
			*fab.udSends = append(*fab.udSends, FakeUDSend{Device: q.c.name, QPN: q.num, RemoteQPN: wr.RemoteQPN,
				AH: wr.AH.id, RemoteGID: wr.AH.path.RemoteGID, FlowLabel: wr.AH.path.FlowLabel & 0xfffff})
		}
		q.sq = append(q.sq, &pendingWR{wr: wr})
		q.pump()
	}
	return len(wrs), nil
}

// checkSend is what ibv_post_send refuses. Called with fab.mu held.
func (q *QP) checkSend(wr SendWR) syscall.Errno {
	switch {
	case q.c.dev.fatal:
		return errFatal
	case q.state != QPStateRTS && q.state != QPStateErr:
		return syscall.EINVAL
	case q.typ == QPTypeUD && (wr.Opcode != OpSend || wr.AH == nil || wr.AH.dead || wr.AH.c != q.c):
		return syscall.EINVAL
	case q.typ == QPTypeRC && wr.Opcode != OpSend && wr.Opcode != OpRDMAWrite && wr.Opcode != OpRDMARead:
		return syscall.EINVAL
	case wr.Inline && (int(wr.SGE.Length) > q.maxInline || wr.Opcode == OpRDMARead):
		return syscall.EINVAL
	case len(q.sq) >= q.maxSend:
		return syscall.ENOMEM
	}
	return 0
}

// PostPoll posts wr and polls cq for want completions for up to spin, as
// the cgo build does in one call into C: the RTT is from just before the
// post to the last completion, 0 when they did not all come within spin.
func (q *QP) PostPoll(wr SendWR, cq *CQ, out []WorkCompletion, want int, spin time.Duration) (n int, posted int64, rtt time.Duration, err error) {
	fab.mu.Lock()
	dead := cq.dead
	fab.mu.Unlock()
	if dead {
		return 0, 0, 0, fmt.Errorf("verbs: poll CQ of %s: %w", cq.c.name, ErrClosed)
	}
	out = out[:min(len(out), 16)] // the cgo build's C array of completions
	t0 := MonoNow()
	if err := q.PostSend(wr); err != nil {
		return 0, 0, 0, err
	}
	deadline := t0 + int64(spin)
	for i := 1; ; i++ {
		k, err := cq.Poll(out[n:])
		if err != nil {
			return 0, t0, 0, err
		}
		n += k
		if n >= want || n >= len(out) {
			return n, t0, time.Duration(MonoNow() - t0), nil
		}
		if i%32 == 0 && MonoNow() >= deadline {
			return n, t0, 0, nil
		}
	}
}

// PostRecv posts one receive work request.
func (q *QP) PostRecv(id uint64, sge SGE) error {
	fab.mu.Lock()
	defer fab.mu.Unlock()
	if q.dead {
		return fmt.Errorf("verbs: %s: %w", q.obj(), ErrClosed)
	}
	var errno syscall.Errno
	switch {
	case q.c.dev.fatal:
		errno = errFatal
	case q.state == QPStateReset:
		errno = syscall.EINVAL
	case q.state == QPStateErr:
		q.rcq.push(WorkCompletion{WRID: id, Status: WCFlushErr, Opcode: WCOpRecv, QPNum: q.num})
		return nil
	case len(q.rq) >= q.maxRecv:
		errno = syscall.ENOMEM
	}
	if errno != 0 {
		return &Error{Verb: "ibv_post_recv", Object: q.obj(), Err: errno, Hint: postHint(int(errno))}
	}
	q.rq = append(q.rq, recvWR{id: id, sge: sge})
	q.wakeWaiters()
	return nil
}

// An outcome is what executing a send work request came to.
type outcome int

const (
	outDone outcome = iota // executed
	outFail                // completed in error: the QP goes to ERR
	outWait                // a SEND waits for a receive at the peer
	outLost                // the peer did not answer: retry after the ACK timeout
)

// pump executes q's sends from the head of its queue while they can.
// Called with fab.mu held.
func (q *QP) pump() {
	if q.pumping {
		return // the outer call continues
	}
	q.pumping = true
	defer func() { q.pumping = false }()
	for !q.dead && q.state == QPStateRTS && len(q.sq) > 0 {
		w := q.sq[0]
		if w.timer != nil {
			return
		}
		var out outcome
		var st WCStatus
		if q.typ == QPTypeUD {
			out, st = q.execUD(w.wr)
		} else {
			out, st = q.execRC(w.wr)
		}
		switch out {
		case outWait:
			return
		case outLost:
			q.retryLater(w)
			return
		}
		q.sq = q.sq[1:]
		if out == outFail {
			q.scq.push(WorkCompletion{WRID: w.wr.ID, Status: st, Opcode: wcOpcode(w.wr.Opcode), QPNum: q.num})
			q.toErr()
			return
		}
		if w.wr.Signaled {
			q.scq.push(WorkCompletion{WRID: w.wr.ID, Opcode: wcOpcode(w.wr.Opcode), ByteLen: w.wr.SGE.Length, QPNum: q.num})
		}
	}
}

// retryLater tries w again after the QP's ACK timeout (4.096 us *
// 2^timeout; 0, which hardware takes as infinite, retries every second
// for ever) and fails it with "transport retry counter exceeded" after
// the retry count. Called with fab.mu held.
func (q *QP) retryLater(w *pendingWR) {
	d := time.Second
	if q.timeout > 0 {
		d = time.Duration(4096<<q.timeout) * time.Nanosecond
	}
	w.timer = time.AfterFunc(d, func() {
		fab.mu.Lock()
		defer fab.mu.Unlock()
		if q.dead || q.state != QPStateRTS || len(q.sq) == 0 || q.sq[0] != w || w.timer == nil {
			return // stopped: the QP was reset, flushed or destroyed
		}
		w.timer = nil
		if q.timeout > 0 && w.tries >= int(q.retry) {
			q.sq = q.sq[1:]
			q.scq.push(WorkCompletion{WRID: w.wr.ID, Status: wcRetryExc, Opcode: wcOpcode(w.wr.Opcode), QPNum: q.num})
			q.toErr()
			return
		}
		w.tries++
		q.pump()
	})
}

// takeFault consumes one FakeFailWork failure of q's device.
func (q *QP) takeFault() (WCStatus, bool) {
	d := q.c.dev
	if d.failN == 0 {
		return 0, false
	}
	d.failN--
	return d.failStatus, true
}

// local returns the local memory of sge: in an MR of q's PD (any MR of the
// device for inline data, whose key the adapter ignores), within bounds,
// writable when write is set. Called with fab.mu held.
func (q *QP) local(sge SGE, write, inline bool) ([]byte, bool) {
	if sge.Length == 0 {
		return nil, true
	}
	if inline {
		for _, m := range q.c.dev.mrs {
			if b, ok := m.span(sge.Addr, sge.Length); ok {
				return b, true
			}
		}
		return nil, false
	}
	m := q.c.dev.mrs[sge.LKey]
	if m == nil || m.pd != q.pd || (write && m.access&AccessLocalWrite == 0) {
		return nil, false
	}
	return m.span(sge.Addr, sge.Length)
}

// routeTo finds where a packet to gid (with a GRH) or lid (without) goes.
func routeTo(global bool, gid GID, lid uint16) (*fdev, int, bool) {
	if global {
		return route(gid)
	}
	for _, d := range fab.devs {
		for i, p := range d.ports {
			if !d.gone && !d.fatal && p.attr.State == PortActive && p.attr.LinkLayer == LinkLayerInfiniBand && p.attr.LID == lid {
				return d, i + 1, true
			}
		}
	}
	return nil, 0, false
}

// peer returns the RC QP q is connected to, if a packet reaches it and it
// would answer: in RTR or RTS, on the port the path leads to, connected
// back to q. Called with fab.mu held.
func (q *QP) peer() *QP {
	if !q.c.dev.canSend(q.port) {
		return nil
	}
	d, port, ok := routeTo(q.global, q.rgid, q.rlid)
	if !ok {
		return nil
	}
	r := d.qps[q.rqpn]
	if r == nil || r.typ != QPTypeRC || (r.state != QPStateRTR && r.state != QPStateRTS) || r.port != port || r.rqpn != q.num {
		return nil
	}
	if q.global && r.rgid != q.sgid {
		return nil
	}
	return r
}

// execRC executes an RC send work request. Called with fab.mu held.
func (q *QP) execRC(wr SendWR) (outcome, WCStatus) {
	if st, ok := q.takeFault(); ok {
		return outFail, st
	}
	read := wr.Opcode == OpRDMARead
	src, ok := q.local(wr.SGE, read, wr.Inline)
	if !ok {
		return outFail, wcLocProtErr
	}
	r := q.peer()
	if r == nil {
		return outLost, 0
	}
	if wr.Opcode == OpSend {
		if len(r.rq) == 0 {
			if r.waiters == nil {
				r.waiters = map[*QP]bool{}
			}
			r.waiters[q] = true
			return outWait, 0
		}
		rv := r.rq[0]
		r.rq = r.rq[1:]
		dst, ok := r.local(rv.sge, true, false)
		if !ok || uint32(len(dst)) < wr.SGE.Length {
			r.rcq.push(WorkCompletion{WRID: rv.id, Status: wcLocLenErr, Opcode: WCOpRecv, QPNum: r.num})
			r.toErr()
			return outFail, wcRemInvReq
		}
		fab.moved += uint64(copy(dst, src))
		r.rcq.push(WorkCompletion{WRID: rv.id, Opcode: WCOpRecv, ByteLen: wr.SGE.Length, QPNum: r.num, SrcQP: q.num})
		return outDone, 0
	}
	need := AccessRemoteWrite
	if read {
		need = AccessRemoteRead
	}
	if r.access&need == 0 {
		return outFail, wcRemAccess
	}
	if wr.SGE.Length == 0 {
		return outDone, 0
	}
	m := r.c.dev.mrs[wr.RKey]
	if m == nil || m.pd != r.pd || m.access&need == 0 {
		return outFail, wcRemAccess
	}
	rem, ok := m.span(wr.RemoteAddr, wr.SGE.Length)
	if !ok {
		return outFail, wcRemAccess
	}
	if read {
		fab.moved += uint64(copy(src, rem))
	} else {
		fab.moved += uint64(copy(rem, src))
	}
	return outDone, 0
}

// grhSize is the space in front of a UD receive's data where the adapter
// writes the packet's GRH (or IPv4 header).
const grhSize = 40

// execUD executes a UD send: delivered into the next receive of the QP the
// address handle and RemoteQPN name, if a packet reaches it, its qkey is
// the request's and it has a receive posted; else dropped, as UD drops.
// The send completes either way. Called with fab.mu held.
func (q *QP) execUD(wr SendWR) (outcome, WCStatus) {
	if st, ok := q.takeFault(); ok {
		return outFail, st
	}
	src, ok := q.local(wr.SGE, false, wr.Inline)
	if !ok {
		return outFail, wcLocProtErr
	}
	a := wr.AH
	if !q.c.dev.canSend(q.port) {
		return outDone, 0
	}
	d, port, ok := routeTo(a.path.Global, a.path.RemoteGID, a.path.DLID)
	if !ok {
		return outDone, 0
	}
	r := d.qps[wr.RemoteQPN]
	if r == nil || r.typ != QPTypeUD || (r.state != QPStateRTR && r.state != QPStateRTS) || r.port != port ||
		r.qkey != wr.RemoteQKey || len(r.rq) == 0 {
		return outDone, 0
	}
	rv := r.rq[0]
	r.rq = r.rq[1:]
	n := grhSize + len(src)
	dst, ok := r.local(rv.sge, true, false)
	if !ok || len(dst) < n {
		r.rcq.push(WorkCompletion{WRID: rv.id, Status: wcLocLenErr, Opcode: WCOpRecv, QPNum: r.num})
		r.toErr()
		return outDone, 0
	}
	var flags uint32
	if a.path.Global {
		writeGRH(dst[:grhSize], a.sgid, a.path.RemoteGID, a.path.TClass, a.path.HopLimit, len(src))
		flags = WCGRH
	}
	copy(dst[grhSize:], src)
	r.rcq.push(WorkCompletion{WRID: rv.id, Opcode: WCOpRecv, ByteLen: uint32(n), QPNum: r.num, SrcQP: q.num, Flags: flags})
	return outDone, 0
}

// writeGRH writes the 40 bytes a UD receive finds in front of its data:
// for RoCE v2 between IPv4-mapped GIDs the IPv4 header in the last 20
// (the first 20 zero, as rxe leaves them), else a GRH (or RoCE v2's IPv6
// header, which has the same layout) with both GIDs.
func writeGRH(b []byte, sgid GIDEntry, dst GID, tclass, hop uint8, payload int) {
	clear(b)
	src := sgid.GID
	const udp, bth, deth, icrc = 8, 12, 8, 4
	if sgid.Type == GIDTypeRoCEv2 && isV4Mapped(src) && isV4Mapped(dst) {
		h := b[20:40]
		h[0] = 0x45
		h[1] = tclass
		binary.BigEndian.PutUint16(h[2:], uint16(20+udp+bth+deth+payload+icrc))
		h[6] = 0x40 // don't fragment
		h[8] = hop
		h[9] = 17 // UDP
		copy(h[12:16], src[12:])
		copy(h[16:20], dst[12:])
		binary.BigEndian.PutUint16(h[10:], ipv4Sum(h))
		return
	}
	b[0] = 6<<4 | tclass>>4
	b[1] = tclass << 4
	if sgid.Type == GIDTypeRoCEv2 {
		binary.BigEndian.PutUint16(b[4:], uint16(udp+bth+deth+payload+icrc))
		b[6] = 17 // the IPv6 header of RoCE v2: UDP next
	} else {
		binary.BigEndian.PutUint16(b[4:], uint16(bth+deth+payload+icrc))
		b[6] = 0x1b // a GRH (IB, RoCE v1): BTH next
	}
	b[7] = hop
	copy(b[8:24], src[:])
	copy(b[24:40], dst[:])
}

// ipv4Sum is the IPv4 header checksum of h (whose checksum field is 0).
func ipv4Sum(h []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(h); i += 2 {
		s += uint32(h[i])<<8 | uint32(h[i+1])
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}
