package loopback

import (
	"context"
	"fmt"
	"time"

	"github.com/rdmad/rdmad/verbs"
)

const (
	opWrite = iota
	opRead
	opSend
	// opWarmup is the round's first operation, an RDMA WRITE like opWrite.
	// It comes first so that its RTT, not the measured operations', pays
	// for waking the path after the probe slept (interrupts, the scheduler,
	// the device's or Soft-RoCE's tasks, an emulator's idle vCPUs): the
	// operations after it measure the device path, and the warm-up's own
	// RTT shows the host's share separately.
	opWarmup
	numOps
)

var opNames = [numOps]string{opWrite: "RDMA WRITE", opRead: "RDMA READ", opSend: "SEND/RECV", opWarmup: "warm-up RDMA WRITE"}

// The probe's page is cut into slots, one per role, so that no operation
// can pass by finding the bytes another one left.
const slotSize = 512

const (
	slotWriteSrc = iota // A's payload for WRITE
	slotWriteDst        // B's memory WRITE lands in
	slotReadSrc         // B's memory READ fetches
	slotReadDst         // A's memory READ lands in
	slotSendSrc         // A's payload for SEND
	slotRecvDst         // B's receive buffer
	numSlots
)

// A session is one port's probe: QP a and QP b, connected to each other
// through the port, sharing one CQ and completion channel and one
// registered page.
type session struct {
	port    int
	payload int
	timeout time.Duration
	// spin is how long a wait polls the CQ before it sleeps on the
	// completion channel: Config.Spin, or BusySpinLimit with PollBusy.
	spin   time.Duration
	gid    verbs.GIDEntry
	tclass uint8 // GRH traffic class of both QPs' address vectors

	buf  *verbs.Buffer
	mem  []byte
	pd   *verbs.PD
	mr   *verbs.MR
	ch   *verbs.CompChannel
	cq   *verbs.CQ
	a, b *verbs.QP
	wcs  []verbs.WorkCompletion
}

func newSession(vctx *verbs.Context, port int, pa verbs.PortAttr, tclass uint8, cfg Config) (s *session, err error) {
	spin := cfg.Spin
	if cfg.Poll == PollBusy {
		// Never longer than the round may take: the wait then sleeps
		// until the round's deadline fails it.
		spin = min(BusySpinLimit, cfg.Timeout)
	}
	// The defer closes what was built through its own variable: every
	// "return nil, err" below sets the result s to nil before it runs
	// (a port going down between two verbs of the build made it close a
	// nil session, which crashed rdmad in the flapping drill).
	built := &session{port: port, payload: cfg.Payload, timeout: cfg.Timeout, spin: spin, tclass: tclass, wcs: make([]verbs.WorkCompletion, 4)}
	s = built
	defer func() {
		if err != nil {
			built.close()
			s = nil
		}
	}()
	table, err := vctx.GIDTable(port)
	if err != nil {
		return nil, err
	}
	gid, ok := verbs.PickGID(table, pa.LinkLayer)
	if !ok && pa.LinkLayer != verbs.LinkLayerInfiniBand {
		return nil, fmt.Errorf("probe: %s port %d has no usable GID; give its netdev an IP address", vctx.Name(), port)
	}
	s.gid = gid
	if s.buf, err = verbs.AllocBuffer(slotSize * numSlots); err != nil {
		return nil, err
	}
	s.mem = s.buf.Bytes()
	if s.pd, err = vctx.AllocPD(); err != nil {
		return nil, err
	}
	access := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead
	if s.mr, err = s.pd.RegMR(s.buf, access); err != nil {
		return nil, err
	}
	if s.ch, err = vctx.NewCompChannel(); err != nil {
		return nil, err
	}
	if s.cq, err = vctx.NewCQ(16, s.ch); err != nil {
		return nil, err
	}
	qcfg := verbs.QPConfig{Type: verbs.QPTypeRC, SendCQ: s.cq, RecvCQ: s.cq, MaxSendWR: 4, MaxRecvWR: 4, MaxSGE: 1}
	if s.a, err = s.pd.NewQP(qcfg); err != nil {
		return nil, err
	}
	if s.b, err = s.pd.NewQP(qcfg); err != nil {
		return nil, err
	}
	path := verbs.Path{Port: port, GIDIndex: gid.Index, Global: pa.LinkLayer != verbs.LinkLayerInfiniBand,
		MTU: min(pa.ActiveMTU, 3 /* 1024: the payload is small */), DLID: pa.LID, RemoteGID: gid.GID, TClass: tclass}
	for _, pair := range [][2]*verbs.QP{{s.a, s.b}, {s.b, s.a}} {
		q, peer := pair[0], pair[1]
		if err = q.Init(port, access, 0); err != nil {
			return nil, err
		}
		if err = q.ReadyToReceive(path, verbs.Remote{QPN: peer.Num(), PSN: 0}); err != nil {
			return nil, err
		}
		// timeout 14: 67 ms ACK timeout, far above a loopback RTT but
		// inside the op timeout; 7 retries is the InfiniBand maximum.
		if err = q.ReadyToSend(0, 14, 7); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// close releases the session; it is safe on a partly built session and
// after the device's Context was closed (its resources are then gone).
func (s *session) close() {
	if s == nil {
		return
	}
	if s.a != nil {
		s.a.Close()
	}
	if s.b != nil {
		s.b.Close()
	}
	if s.cq != nil {
		s.cq.Close()
	}
	if s.ch != nil {
		s.ch.Close()
	}
	if s.mr != nil {
		s.mr.Close()
	}
	if s.pd != nil {
		s.pd.Close()
	}
	if s.buf != nil {
		s.buf.Close()
	}
}

func (s *session) slot(i int) []byte { return s.mem[i*slotSize : i*slotSize+s.payload] }

func (s *session) sge(i int) verbs.SGE {
	return verbs.SGE{Addr: s.mr.Addr() + uint64(i*slotSize), Length: uint32(s.payload), LKey: s.mr.LKey()}
}

// fill writes the pattern of (seq, op) into b: the sequence number first,
// so a stale payload from an earlier round never matches, then bytes that
// differ per position and operation.
func fill(b []byte, seq uint64, op int) {
	for i := range b {
		if i < 8 {
			b[i] = byte(seq >> (8 * i))
			continue
		}
		b[i] = byte(uint64(i)*7 + seq*131 + uint64(op)*29 + 1)
	}
}

// A mismatchError is data that arrived different from what was sent.
type mismatchError struct {
	op     string
	offset int
	want   byte
	got    byte
}

func (e *mismatchError) Error() string {
	return fmt.Sprintf("probe: %s data mismatch at byte %d: sent 0x%02x, received 0x%02x", e.op, e.offset, e.want, e.got)
}

func check(op int, got []byte, seq uint64) error {
	want := make([]byte, len(got))
	fill(want, seq, op)
	for i := range got {
		if got[i] != want[i] {
			return &mismatchError{op: opNames[op], offset: i, want: want[i], got: got[i]}
		}
	}
	return nil
}

func wrid(seq uint64, op int) uint64 { return seq<<4 | uint64(op) }

// round runs a warm-up WRITE, then WRITE, READ and SEND/RECV once each,
// back to back, and returns their RTTs. On failure it returns the RTTs of
// the operations that succeeded, the index of the one that failed, and the
// error.
func (s *session) round(ctx context.Context, seq uint64) (rtts [numOps]time.Duration, failed int, err error) {
	// One deadline for the round rather than one timer per operation:
	// each operation still fails as a timeout if the round runs out.
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	mr := s.mr
	// One-sided operations, A's QP acting on B's memory: the warm-up
	// WRITE (its data is checked too: it is a probe of its own), the
	// measured WRITE, and a READ that fetches B's memory. Each fills the
	// slot the data comes from, clears the one it goes to and checks it.
	for _, o := range [...]struct {
		op            int
		opcode        verbs.Opcode
		local, remote int // slots: A's scatter/gather entry, B's memory
		from, to      int // where the data comes from and lands
	}{
		{opWarmup, verbs.OpRDMAWrite, slotWriteSrc, slotWriteDst, slotWriteSrc, slotWriteDst},
		{opWrite, verbs.OpRDMAWrite, slotWriteSrc, slotWriteDst, slotWriteSrc, slotWriteDst},
		{opRead, verbs.OpRDMARead, slotReadDst, slotReadSrc, slotReadSrc, slotReadDst},
	} {
		fill(s.slot(o.from), seq, o.op)
		clear(s.slot(o.to))
		rtts[o.op], err = s.op(ctx, o.op, seq, 1, verbs.SendWR{ID: wrid(seq, o.op), Opcode: o.opcode, SGE: s.sge(o.local),
			RemoteAddr: mr.Addr() + uint64(o.remote*slotSize), RKey: mr.RKey(), Signaled: true})
		if err == nil {
			err = check(o.op, s.slot(o.to), seq)
		}
		if err != nil {
			rtts[o.op] = 0
			return rtts, o.op, err
		}
	}

	// SEND/RECV: B posts a receive, A sends; both completions count.
	fill(s.slot(slotSendSrc), seq, opSend)
	clear(s.slot(slotRecvDst))
	if err = s.b.PostRecv(wrid(seq, opSend)|1<<3, s.sge(slotRecvDst)); err != nil {
		return rtts, opSend, err
	}
	rtts[opSend], err = s.op(ctx, opSend, seq, 2, verbs.SendWR{ID: wrid(seq, opSend), Opcode: verbs.OpSend, SGE: s.sge(slotSendSrc), Signaled: true})
	if err == nil {
		err = check(opSend, s.slot(slotRecvDst), seq)
	}
	if err != nil {
		rtts[opSend] = 0
		return rtts, opSend, err
	}
	return rtts, 0, nil
}

// op posts wr on A's QP and waits for want completions of this round,
// returning the time from the post to the last completion. The post and
// the polls of the spin are one call into C, which reads the clock around
// them (verbs.QP.PostPoll): on a healthy port the completions come within
// the spin and the RTT is what the provider and the NIC took, as a C
// program would measure it, not the Go runtime's cost of calling C. A
// completion that comes later is waited for on the completion channel and
// timed on the same clock.
func (s *session) op(ctx context.Context, op int, seq uint64, want int, wr verbs.SendWR) (time.Duration, error) {
	n, posted, rtt, err := s.a.PostPoll(wr, s.cq, s.wcs, want, s.spin)
	if err != nil {
		return 0, err
	}
	got := 0
	for {
		if err := s.checkCompletions(op, seq, s.wcs[:n]); err != nil {
			return 0, err
		}
		if got += n; got >= want {
			break
		}
		if n, err = s.cq.PollWait(ctx, s.wcs, s.spin); err != nil {
			if ctx.Err() == context.DeadlineExceeded {
				return 0, fmt.Errorf("probe: %s on port %d: no completion within the round's %v: %w", opNames[op], s.port, s.timeout, context.DeadlineExceeded)
			}
			return 0, err
		}
		rtt = 0
	}
	if rtt == 0 {
		rtt = time.Duration(verbs.MonoNow() - posted)
	}
	return rtt, nil
}

// checkCompletions fails on a completion in error or one that is not of
// op in round seq.
func (s *session) checkCompletions(op int, seq uint64, wcs []verbs.WorkCompletion) error {
	for _, wc := range wcs {
		if err := wc.Err(); err != nil {
			return fmt.Errorf("probe: %s on port %d: %w", opNames[op], s.port, err)
		}
		if wc.WRID>>4 != seq || int(wc.WRID&7) != op {
			return fmt.Errorf("probe: %s on port %d: unexpected completion %#x (round %d)", opNames[op], s.port, wc.WRID, seq)
		}
	}
	return nil
}
