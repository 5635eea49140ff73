//go:build linux && cgo && !verbsfake

package verbs

/*
#cgo noescape rdmad_post_send_list
#cgo nocallback rdmad_post_send_list
#cgo noescape rdmad_post_poll
#cgo nocallback rdmad_post_poll
#include <infiniband/verbs.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

// The functions below wrap libibverbs entry points that are static inline
// functions or macros (not callable from cgo) and build work requests on
// the C stack, so no Go pointer is ever kept by C.

// One send work request as Go hands it over: flat, and with no pointer into
// Go memory (the address handle is C memory).
struct rdmad_swr {
	uint64_t id, addr, raddr;
	struct ibv_ah *ah;
	uint32_t len, lkey, rkey, rqpn, rqkey;
	int opcode, flags;
};

#define RDMAD_MAX_SEND_LIST 32

// rdmad_post_send_list posts n requests as one chain: one call into the
// provider and one doorbell (one system call on Soft-RoCE) for all of them.
// *posted is how many the provider took; on an error the rest were not
// posted.
static int rdmad_post_send_list(struct ibv_qp *qp, const struct rdmad_swr *w, int n, int *posted) {
	struct ibv_send_wr wr[RDMAD_MAX_SEND_LIST], *bad = NULL;
	struct ibv_sge sge[RDMAD_MAX_SEND_LIST];
	*posted = 0;
	if (n < 1 || n > RDMAD_MAX_SEND_LIST)
		return EINVAL;
	memset(wr, 0, n * sizeof wr[0]);
	for (int i = 0; i < n; i++) {
		sge[i].addr = w[i].addr;
		sge[i].length = w[i].len;
		sge[i].lkey = w[i].lkey;
		wr[i].wr_id = w[i].id;
		wr[i].sg_list = &sge[i];
		wr[i].num_sge = w[i].len ? 1 : 0;
		wr[i].opcode = w[i].opcode;
		wr[i].send_flags = w[i].flags;
		wr[i].next = i + 1 < n ? &wr[i + 1] : NULL;
		if (w[i].ah) {
			wr[i].wr.ud.ah = w[i].ah;
			wr[i].wr.ud.remote_qpn = w[i].rqpn;
			wr[i].wr.ud.remote_qkey = w[i].rqkey;
		} else {
			wr[i].wr.rdma.remote_addr = w[i].raddr;
			wr[i].wr.rdma.rkey = w[i].rkey;
		}
	}
	int r = ibv_post_send(qp, wr, &bad);
	*posted = r == 0 ? n : (bad ? (int)(bad - wr) : 0);
	return r;
}

static int64_t rdmad_mono_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

// rdmad_post_poll posts one request and polls cq until want completions
// came or spin_ns passed, in one call from Go: the clock is read right
// before ibv_post_send (*t0) and right after the last completion (*t1, 0
// when they did not all come within the spin), so that the time between is
// what the provider and the NIC take, without the cost of entering and
// leaving C around each verb. The completions go to wc (at most wcn);
// *got is how many. It returns the post's errno (then nothing was polled),
// -1 when the CQ failed, else 0. The clock is read every 32 polls, as
// CQ.PollWait does.
static int rdmad_post_poll(struct ibv_qp *qp, const struct rdmad_swr *w, struct ibv_cq *cq, int want,
		int64_t spin_ns, struct ibv_wc *wc, int wcn, int *got, int64_t *t0, int64_t *t1) {
	int posted;
	*got = 0;
	*t1 = 0;
	*t0 = rdmad_mono_ns();
	int r = rdmad_post_send_list(qp, w, 1, &posted);
	if (r != 0)
		return r;
	int64_t deadline = *t0 + spin_ns;
	for (unsigned i = 1;; i++) {
		int n = ibv_poll_cq(cq, wcn - *got, wc + *got);
		if (n < 0)
			return -1;
		*got += n;
		if (*got >= want || *got >= wcn) {
			*t1 = rdmad_mono_ns();
			return 0;
		}
		if (i % 32 == 0 && rdmad_mono_ns() >= deadline)
			return 0;
	}
}

static int rdmad_post_recv(struct ibv_qp *qp, uint64_t id, uint64_t addr, uint32_t len, uint32_t lkey) {
	struct ibv_sge sge = { .addr = addr, .length = len, .lkey = lkey };
	struct ibv_recv_wr wr, *bad = NULL;
	memset(&wr, 0, sizeof wr);
	wr.wr_id = id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	return ibv_post_recv(qp, &wr, &bad);
}

static struct ibv_qp *rdmad_create_qp(struct ibv_pd *pd, int type, struct ibv_cq *scq, struct ibv_cq *rcq,
		uint32_t max_send_wr, uint32_t max_recv_wr, uint32_t max_sge, uint32_t max_inline) {
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof a);
	a.qp_type = type;
	a.send_cq = scq;
	a.recv_cq = rcq;
	a.cap.max_send_wr = max_send_wr;
	a.cap.max_recv_wr = max_recv_wr;
	a.cap.max_send_sge = max_sge;
	a.cap.max_recv_sge = max_sge;
	a.cap.max_inline_data = max_inline;
	a.sq_sig_all = 0;
	return ibv_create_qp(pd, &a);
}

static uint32_t rdmad_qp_num(struct ibv_qp *qp) { return qp->qp_num; }

static int rdmad_qp_to_init(struct ibv_qp *qp, uint8_t port, uint16_t pkey_index, int access, int ud, uint32_t qkey) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = pkey_index;
	a.port_num = port;
	int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
	if (ud) {
		a.qkey = qkey;
		mask |= IBV_QP_QKEY;
	} else {
		a.qp_access_flags = access;
		mask |= IBV_QP_ACCESS_FLAGS;
	}
	return ibv_modify_qp(qp, &a, mask);
}

static int rdmad_qp_to_rtr(struct ibv_qp *qp, int ud, int mtu, uint32_t dqpn, uint32_t rq_psn,
		uint8_t port, int global, const uint8_t *dgid, uint8_t sgid_index, uint16_t dlid,
		uint8_t sl, uint8_t tclass, uint8_t hop_limit, uint8_t max_dest_rd_atomic, uint8_t min_rnr_timer) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	if (ud) return ibv_modify_qp(qp, &a, IBV_QP_STATE);
	a.path_mtu = mtu;
	a.dest_qp_num = dqpn;
	a.rq_psn = rq_psn;
	a.max_dest_rd_atomic = max_dest_rd_atomic;
	a.min_rnr_timer = min_rnr_timer;
	a.ah_attr.port_num = port;
	a.ah_attr.dlid = dlid;
	a.ah_attr.sl = sl;
	if (global) {
		a.ah_attr.is_global = 1;
		memcpy(a.ah_attr.grh.dgid.raw, dgid, 16);
		a.ah_attr.grh.sgid_index = sgid_index;
		a.ah_attr.grh.hop_limit = hop_limit;
		a.ah_attr.grh.traffic_class = tclass;
	}
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
		IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

static int rdmad_qp_to_rts(struct ibv_qp *qp, int ud, uint32_t sq_psn, uint8_t timeout, uint8_t retry,
		uint8_t rnr_retry, uint8_t max_rd_atomic) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = sq_psn;
	if (ud) return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
	a.timeout = timeout;
	a.retry_cnt = retry;
	a.rnr_retry = rnr_retry;
	a.max_rd_atomic = max_rd_atomic;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
		IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
}

static int rdmad_qp_set_state(struct ibv_qp *qp, int state) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = state;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE);
}

static int rdmad_qp_state(struct ibv_qp *qp, int *state) {
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	int r = ibv_query_qp(qp, &a, IBV_QP_STATE, &ia);
	if (r == 0) *state = a.qp_state;
	return r;
}
*/
import "C"

import (
	"fmt"
	"syscall"
	"time"
	"unsafe"
)

// A QP is a queue pair.
type QP struct {
	c   *Context
	pd  *PD
	qp  *C.struct_ibv_qp
	id  uint64
	typ QPType
	num uint32
}

// NewQP creates a queue pair in the RESET state.
func (p *PD) NewQP(cfg QPConfig) (*QP, error) {
	if err := p.c.usable(); err != nil {
		return nil, err
	}
	if cfg.SendCQ == nil || cfg.RecvCQ == nil {
		return nil, &Error{Verb: "ibv_create_qp", Object: p.c.name, Err: syscall.EINVAL, Hint: "SendCQ and RecvCQ are required"}
	}
	if cfg.MaxSGE == 0 {
		cfg.MaxSGE = 1
	}
	qp, err := C.rdmad_create_qp(p.pd, C.int(cfg.Type), cfg.SendCQ.cq, cfg.RecvCQ.cq,
		C.uint32_t(cfg.MaxSendWR), C.uint32_t(cfg.MaxRecvWR), C.uint32_t(cfg.MaxSGE), C.uint32_t(cfg.MaxInline))
	if qp == nil {
		return nil, &Error{Verb: "ibv_create_qp", Object: fmt.Sprintf("%s on %s", cfg.Type, p.c.name), Err: errnoOf(0, err), Hint: "check max_qp and max_qp_wr of the device"}
	}
	q := &QP{c: p.c, pd: p, qp: qp, typ: cfg.Type, num: uint32(C.rdmad_qp_num(qp))}
	id, err := p.c.add(q.destroy)
	if err != nil {
		C.ibv_destroy_qp(qp)
		return nil, err
	}
	q.id = id
	return q, nil
}

// Num returns the QP number.
func (q *QP) Num() uint32 { return q.num }

func (q *QP) obj() string { return fmt.Sprintf("%s QP 0x%x on %s", q.typ, q.num, q.c.name) }

func (q *QP) destroy() error {
	if q.qp == nil {
		return nil
	}
	r, err := C.ibv_destroy_qp(q.qp)
	q.qp = nil
	if r != 0 {
		return &Error{Verb: "ibv_destroy_qp", Object: q.obj(), Err: errnoOf(int(r), err)}
	}
	return nil
}

// Close destroys the queue pair.
func (q *QP) Close() error {
	q.c.remove(q.id)
	return q.destroy()
}

func (q *QP) alive() error {
	if q.qp == nil {
		return fmt.Errorf("verbs: %s: %w", q.obj(), ErrClosed)
	}
	return nil
}

// Init moves the QP from RESET to INIT on port. For RC, access sets the
// remote operations the QP accepts; for UD, qkey is the queue key.
func (q *QP) Init(port int, access Access, qkey uint32) error {
	if err := q.alive(); err != nil {
		return err
	}
	ud := 0
	if q.typ == QPTypeUD {
		ud = 1
	}
	if r, err := C.rdmad_qp_to_init(q.qp, C.uint8_t(port), 0, C.int(access), C.int(ud), C.uint32_t(qkey)); r != 0 {
		return &Error{Verb: "ibv_modify_qp RESET->INIT", Object: q.obj(), Err: errnoOf(int(r), err)}
	}
	return nil
}

// ReadyToReceive moves the QP from INIT to RTR. For RC it connects to rem
// over path; for UD both are ignored.
func (q *QP) ReadyToReceive(path Path, rem Remote) error {
	if err := q.alive(); err != nil {
		return err
	}
	ud, global := 0, 0
	if q.typ == QPTypeUD {
		ud = 1
	}
	if path.Global {
		global = 1
	}
	hop := path.HopLimit
	if hop == 0 {
		hop = 64
	}
	dgid := (*C.uint8_t)(C.CBytes(path.RemoteGID[:]))
	defer C.free(unsafe.Pointer(dgid))
	r, err := C.rdmad_qp_to_rtr(q.qp, C.int(ud), C.int(path.MTU), C.uint32_t(rem.QPN), C.uint32_t(rem.PSN),
		C.uint8_t(path.Port), C.int(global), dgid, C.uint8_t(path.GIDIndex), C.uint16_t(path.DLID),
		C.uint8_t(path.SL), C.uint8_t(path.TClass), C.uint8_t(hop), C.uint8_t(max(path.RdAtomic, 1)), 12)
	if r != 0 {
		return &Error{Verb: "ibv_modify_qp INIT->RTR", Object: q.obj(), Err: errnoOf(int(r), err),
			Hint: fmt.Sprintf("check GID index %d and path MTU %d against `rdma link` and the port's GID table", path.GIDIndex, path.MTU.Bytes())}
	}
	return nil
}

// ReadyToSend moves the QP from RTR to RTS with send PSN psn. timeout is the
// local ACK timeout exponent (4.096 us * 2^timeout), retry the transport
// retry count.
func (q *QP) ReadyToSend(psn uint32, timeout, retry uint8) error {
	return q.ReadyToSendReads(psn, timeout, retry, 1)
}

// ReadyToSendReads is ReadyToSend with rdAtomic RDMA READs outstanding at
// once (RC max_rd_atomic, at most the peer's max_dest_rd_atomic; 0 means
// 1); the RNR retry count is infinite (7), so a SEND waits for a receive.
func (q *QP) ReadyToSendReads(psn uint32, timeout, retry, rdAtomic uint8) error {
	if err := q.alive(); err != nil {
		return err
	}
	ud := 0
	if q.typ == QPTypeUD {
		ud = 1
	}
	if r, err := C.rdmad_qp_to_rts(q.qp, C.int(ud), C.uint32_t(psn), C.uint8_t(timeout), C.uint8_t(retry), 7, C.uint8_t(max(rdAtomic, 1))); r != 0 {
		return &Error{Verb: "ibv_modify_qp RTR->RTS", Object: q.obj(), Err: errnoOf(int(r), err)}
	}
	return nil
}

// SetState moves the QP to state with no other attribute: RESET to recycle
// it, ERR to flush it.
func (q *QP) SetState(state QPState) error {
	if err := q.alive(); err != nil {
		return err
	}
	if r, err := C.rdmad_qp_set_state(q.qp, C.int(state)); r != 0 {
		return &Error{Verb: "ibv_modify_qp ->" + state.String(), Object: q.obj(), Err: errnoOf(int(r), err)}
	}
	return nil
}

// State queries the QP's current state.
func (q *QP) State() (QPState, error) {
	if err := q.alive(); err != nil {
		return 0, err
	}
	var s C.int
	if r, err := C.rdmad_qp_state(q.qp, &s); r != 0 {
		return 0, &Error{Verb: "ibv_query_qp", Object: q.obj(), Err: errnoOf(int(r), err)}
	}
	return QPState(s), nil
}

// PostSend posts one send work request.
func (q *QP) PostSend(wr SendWR) error {
	wrs := [1]SendWR{wr}
	_, err := q.PostSendList(wrs[:])
	return err
}

// MaxSendList is the most work requests PostSendList posts with one call
// into the provider; longer lists take several.
const MaxSendList = C.RDMAD_MAX_SEND_LIST

// PostSendList posts wrs in order, chained: one call into the provider and
// one doorbell per MaxSendList requests (on Soft-RoCE a doorbell is a
// system call, and the kernel builds the packets in it). It returns how
// many were posted; on an error the rest were not.
func (q *QP) PostSendList(wrs []SendWR) (int, error) {
	if err := q.alive(); err != nil {
		return 0, err
	}
	done := 0
	for done < len(wrs) {
		var cw [C.RDMAD_MAX_SEND_LIST]C.struct_rdmad_swr
		n := min(len(wrs)-done, len(cw))
		for i, wr := range wrs[done : done+n] {
			cw[i] = cSendWR(wr)
		}
		var posted C.int
		r := C.rdmad_post_send_list(q.qp, &cw[0], C.int(n), &posted)
		done += int(posted)
		if r != 0 {
			return done, &Error{Verb: "ibv_post_send " + wrs[done].Opcode.String(), Object: q.obj(), Err: errnoOf(int(r), nil), Hint: postHint(int(r))}
		}
	}
	return done, nil
}

// cSendWR is wr as rdmad_post_send_list takes it.
func cSendWR(wr SendWR) C.struct_rdmad_swr {
	flags := 0
	if wr.Signaled {
		flags |= C.IBV_SEND_SIGNALED
	}
	if wr.Inline {
		flags |= C.IBV_SEND_INLINE
	}
	var c C.struct_rdmad_swr
	c.id, c.addr, c.len, c.lkey = C.uint64_t(wr.ID), C.uint64_t(wr.SGE.Addr), C.uint32_t(wr.SGE.Length), C.uint32_t(wr.SGE.LKey)
	c.raddr, c.rkey, c.rqpn, c.rqkey = C.uint64_t(wr.RemoteAddr), C.uint32_t(wr.RKey), C.uint32_t(wr.RemoteQPN), C.uint32_t(wr.RemoteQKey)
	c.opcode, c.flags, c.ah = C.int(wr.Opcode), C.int(flags), nil
	if wr.AH != nil {
		c.ah = wr.AH.ah
	}
	return c
}

// PostPoll posts wr and polls cq for want completions for up to spin, in
// one call into C, which reads the clock right before the post and right
// after the last completion: the RTT it returns is what the provider and
// the NIC took, without the Go runtime's cost of entering and leaving C
// for each verb (a probe that times a post and its polls from Go counts
// that cost, which on a busy or emulated host can be larger than the
// operation). It returns the completions polled (into out), the post's
// time on MonoNow's clock, and the RTT when want completions came within
// spin, else 0: the caller then waits for the rest (CQ.PollWait) and
// measures from posted.
func (q *QP) PostPoll(wr SendWR, cq *CQ, out []WorkCompletion, want int, spin time.Duration) (n int, posted int64, rtt time.Duration, err error) {
	if err := q.alive(); err != nil {
		return 0, 0, 0, err
	}
	if cq.cq == nil {
		return 0, 0, 0, fmt.Errorf("verbs: poll CQ of %s: %w", cq.c.name, ErrClosed)
	}
	cw := cSendWR(wr)
	var got C.int
	var t0, t1 C.int64_t
	wcn := min(len(out), cq.wcN)
	r := C.rdmad_post_poll(q.qp, &cw, cq.cq, C.int(want), C.int64_t(spin), cq.wc, C.int(wcn), &got, &t0, &t1)
	switch {
	case r > 0:
		return 0, 0, 0, &Error{Verb: "ibv_post_send " + wr.Opcode.String(), Object: q.obj(), Err: errnoOf(int(r), nil), Hint: postHint(int(r))}
	case r < 0:
		return 0, int64(t0), 0, cq.pollError()
	}
	cq.convert(out, int(got))
	if t1 != 0 {
		rtt = time.Duration(t1 - t0)
	}
	return int(got), int64(t0), rtt, nil
}

// MonoNow returns CLOCK_MONOTONIC in nanoseconds: the clock of PostPoll's
// posted time.
func MonoNow() int64 { return int64(C.rdmad_mono_ns()) }

// PostRecv posts one receive work request.
func (q *QP) PostRecv(id uint64, sge SGE) error {
	if err := q.alive(); err != nil {
		return err
	}
	if r := C.rdmad_post_recv(q.qp, C.uint64_t(id), C.uint64_t(sge.Addr), C.uint32_t(sge.Length), C.uint32_t(sge.LKey)); r != 0 {
		return &Error{Verb: "ibv_post_recv", Object: q.obj(), Err: errnoOf(int(r), nil), Hint: postHint(int(r))}
	}
	return nil
}
