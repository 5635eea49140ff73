package peer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmad/rdmad/probe/ud"
	"github.com/rdmad/rdmad/verbs"
)

// Slot layout of a port's probe page(s). A UD receive lands behind a 40-byte
// GRH; sends start at the payload. The memory is registered for local
// writes only: a UD QP cannot be the target of RDMA READ or WRITE, and no
// rkey of it ever leaves the host.
const (
	grhSize  = 40
	slotSize = 128
	recvOff  = 0
)

// wrRecv marks receive work request IDs; the low bits are the slot index
// (whose flow is the slot's place: each flow has RecvSlots of its own).
// A send's ID is its slot index with the flow that posted it from bit
// wrFlowShift on, so that its completion returns the slots of that
// flow's queue.
const (
	wrRecv      = uint64(1) << 63
	wrFlowShift = 40
	wrSlotMask  = uint64(1)<<wrFlowShift - 1
)

// A udPort is the prober and responder of one device port: Config.Flows UD
// QPs (flow 0 also answers other nodes' probes; each other flow only sends
// probes and takes their replies, on a UDP source port of its own), one CQ
// with a completion channel that all of them share (one poll loop per
// port, however many flows), RecvSlots posted receives per flow and
// SendSlots send buffers shared by the flows (the bound on probes and
// replies in flight).
type udPort struct {
	key  string // "rxe0/1"
	dev  string
	num  int
	ll   verbs.LinkLayer
	gid  verbs.GIDEntry
	lid  uint16
	qkey uint32
	e    *Engine

	buf  *verbs.Buffer
	pd   *verbs.PD
	mr   *verbs.MR
	ch   *verbs.CompChannel
	cq   *verbs.CQ
	qp   *verbs.QP // flows[0].qp
	mtu  verbs.MTU
	nrec int

	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex // guards everything below and serialises posts
	closed bool
	free   []int // free send slots
	// flows are the port's QPs. Sends are signalled only every
	// signalEvery-th post of a flow: a UD send queue completes in order,
	// so one completion returns the slots of every send the flow posted
	// before it. As long as SendSlots >= 2*Flows*signalEvery, the slots
	// held by unsignalled sends of every flow are at most half of them,
	// and a full queue always holds a signalled send, so slots can never
	// all be stuck.
	flows       []flowQP
	signalEvery int
	wrs         []verbs.SendWR // scratch for one chained post
	wrItem      []int          // wrs[j] posts out[wrItem[j]]
	out         []outgoing     // replies to post after a completion batch
	probeOut    []outgoing     // scratch of ProbeBatch
	ahs         map[ahKey]*ahEntry
	// tclass is the traffic class of the handles in ahs (written with
	// mu held, read without by local). retired holds the handles of the
	// class before, destroyed once idle for ahIdle since retiredAt: sends
	// in flight may still refer to them.
	tclass    atomic.Uint32
	retired   []*verbs.AH
	retiredAt time.Time
	// admitted is the sources the responder answers, under its own lock
	// admMu (taken inside mu, never around it): Admit, which the control
	// endpoint calls for every query, must not wait for mu, which a post
	// holds for as long as the provider takes to return (rxe retrying a
	// dropped send holds it for seconds), or one stuck port would stop
	// the control endpoint for every port.
	admMu    sync.Mutex
	admitted admTable
	pend     pendingTable // this port's probes awaiting replies
	// mac tags and checks version-2 payloads with the key of macFor,
	// the engine's authentication settings when they were last looked at
	// (authLocked); nil when authentication is off.
	mac    *tagger
	macFor *authConf
	pkt    [grhSize + PayloadSize]byte // a received packet, copied out of its slot
	broken error                       // set when the QP left RTS; the engine rebuilds the port

	// macAlso check tags with macFor's other keys (a rotation).
	macAlso []*tagger
}

// A flowQP is one of a port's QPs and its sends in flight: posted holds
// their slots in posting order, unsignalled counts the posts since the
// last signalled one.
type flowQP struct {
	qp          *verbs.QP
	posted      ring
	unsignalled int
	sport       uint16 // UDP source port (rxeSourcePort), 0 when unknown
}

// An outgoing is a probe or reply waiting to be posted.
type outgoing struct {
	dst  ud.Endpoint
	pl   Payload
	flow uint8  // the port's flow to post on (answers: the one the probe came to)
	err  *error // where to report a failure to post it; nil ignores it
}

// rxeVendorID is Soft-RoCE's vendor ID (the kernel's RXE_VENDOR_ID).
const rxeVendorID = 0xffffff

// rxeSourcePort is the UDP source port of a Soft-RoCE QP's packets: the
// kernel's rxe_qp_init_req sets it once, from the QPN alone, as
// 0xc000 + hash_32(qpn, 14) (hash_32: the QPN times the 32-bit golden
// ratio 0x61c88647, top bits kept), and a UD QP keeps it (only an RC or UC
// QP's address vector, in rxe_modify_qp, changes it).
func rxeSourcePort(qpn uint32) uint16 {
	return 0xc000 + uint16((qpn*0x61c88647)>>(32-14))
}

// A ring is a FIFO of send slots.
type ring struct {
	buf        []int
	head, size int
}

func (r *ring) push(v int) {
	r.buf[(r.head+r.size)%len(r.buf)] = v
	r.size++
}

func (r *ring) pop() int {
	v := r.buf[r.head]
	r.head = (r.head + 1) % len(r.buf)
	r.size--
	return v
}

type ahEntry struct {
	ah   *verbs.AH
	used time.Time
}

// An ahKey is what an address handle is for: a destination GID and the
// GRH flow label of the sends to it. Each flow has its own handle to a
// destination, and so its own label: on mlx5 and hns a RoCE v2 UD send's
// UDP source port comes from its handle's flow label (or, without one, a
// random port per handle), not from the QP, so with one handle per
// destination every flow to a peer took one ECMP path (#39 item 1).
type ahKey struct {
	gid   verbs.GID
	label uint32
}

// flowLabel is the GRH flow label of the sends from flow f of this port
// to dst: a hash of the two GIDs and dst's QPN (an answer to another
// node's flow goes back on a label of its own), with the flow added to its
// low 14 bits. Those bits decide the source port that
// ibv_flow_label_to_udp_sport makes of the label (its high 6 bits are
// folded into them), so the K flows to one destination have K distinct
// labels and K distinct source ports. Never 0, which asks for none.
func flowLabel(src, dst verbs.GID, dstQPN uint32, f uint8) uint32 {
	// FNV-1a, inline: this runs for every send, and hash/fnv's
	// interface would allocate.
	h := uint32(2166136261)
	mix := func(b byte) { h = (h ^ uint32(b)) * 16777619 }
	for _, b := range src {
		mix(b)
	}
	for _, b := range dst {
		mix(b)
	}
	for i := range 4 {
		mix(byte(dstQPN >> (8 * i)))
	}
	base := (h ^ h>>20) & 0xfffff
	low := (base + uint32(f)*0x1003) & 0x3fff // an odd stride: distinct for every f < 16384
	l := base&^0x3fff | low
	if l == 0 {
		l = 1 << 14
	}
	return l
}

// FlowLabelSourcePort is the UDP source port rdma-core's
// ibv_flow_label_to_udp_sport derives from a flow label (mlx5, hns), for
// tests and status.
func FlowLabelSourcePort(l uint32) uint16 {
	low, high := l&0x3fff, l&0xfc000
	low ^= high >> 14
	return uint16(low | 0xc000)
}

func openPort(e *Engine, vctx *verbs.Context, num int, pa verbs.PortAttr, vendor uint32) (p *udPort, err error) {
	p = &udPort{key: fmt.Sprintf("%s/%d", vctx.Name(), num), dev: vctx.Name(), num: num, ll: pa.LinkLayer, lid: pa.LID,
		qkey: e.qkey, e: e, mtu: pa.ActiveMTU, nrec: e.cfg.RecvSlots,
		ahs: map[ahKey]*ahEntry{}, admitted: newAdmTable(4*e.cfg.MaxAH, admitPerSource*e.cfg.Flows),
		// The daemon walks a path's flows one probe a turn, but after a
		// loss a turn probes every flow (probe's burst): when one bad
		// link makes every path burst at once, the sequence numbers go
		// K times as fast, and the table grows with them so that an
		// entry lives as long as with one flow.
		pend: newPendingTable(pendingSlots * e.cfg.Flows), done: make(chan struct{})}
	p.tclass.Store(uint32(e.trafficClass(vctx.Name(), num)))
	// The port being built, released on an error: the early returns
	// below set p to nil before this runs (a port without a usable GID,
	// as rxe's is for a moment after its link came back, crashed here).
	built := p
	defer func() {
		if err != nil {
			built.release()
			p = nil
		}
	}()
	table, err := vctx.GIDTable(num)
	if err != nil {
		return nil, err
	}
	gid, ok := verbs.PickGID(table, pa.LinkLayer)
	if !ok {
		return nil, fmt.Errorf("peer probe: %s has no usable GID; give its netdev an IP address", p.key)
	}
	p.gid = gid
	nflows := e.cfg.Flows
	recvs := nflows * e.cfg.RecvSlots
	n := recvs + e.cfg.SendSlots
	if p.buf, err = verbs.AllocBuffer(n * slotSize); err != nil {
		return nil, err
	}
	if p.pd, err = vctx.AllocPD(); err != nil {
		return nil, err
	}
	if p.mr, err = p.pd.RegMR(p.buf, verbs.AccessLocalWrite); err != nil {
		return nil, err
	}
	if p.ch, err = vctx.NewCompChannel(); err != nil {
		return nil, err
	}
	if p.cq, err = vctx.NewCQ(n, p.ch); err != nil {
		return nil, err
	}
	for f := range nflows {
		// Every flow's QP shares the port's CQ: one poll loop, one
		// wakeup per batch of completions, whatever the number of flows.
		qp, err := p.pd.NewQP(verbs.QPConfig{Type: verbs.QPTypeUD, SendCQ: p.cq, RecvCQ: p.cq,
			MaxSendWR: e.cfg.SendSlots, MaxRecvWR: e.cfg.RecvSlots, MaxSGE: 1})
		if err != nil {
			return nil, fmt.Errorf("peer probe: %s: QP of flow %d: %w", p.key, f, err)
		}
		p.flows = append(p.flows, flowQP{qp: qp, posted: ring{buf: make([]int, e.cfg.SendSlots)}})
		if vendor == rxeVendorID && pa.LinkLayer != verbs.LinkLayerInfiniBand {
			p.flows[f].sport = rxeSourcePort(qp.Num())
		}
		if err = qp.Init(num, 0, p.qkey); err != nil {
			return nil, err
		}
		if err = qp.ReadyToReceive(verbs.Path{}, verbs.Remote{}); err != nil {
			return nil, err
		}
		if err = qp.ReadyToSend(0, 0, 0); err != nil {
			return nil, err
		}
	}
	p.qp = p.flows[0].qp
	for i := 0; i < recvs; i++ {
		if err = p.postRecv(i); err != nil {
			return nil, err
		}
	}
	for i := recvs; i < n; i++ {
		p.free = append(p.free, i)
	}
	p.signalEvery = max(1, min(maxUnsignalled, e.cfg.SendSlots/(2*nflows)))
	p.wrs = make([]verbs.SendWR, 0, e.cfg.SendSlots)
	p.wrItem = make([]int, 0, e.cfg.SendSlots)
	return p, nil
}

// start runs the completion loop until close.
func (p *udPort) start() {
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	go func() {
		defer close(p.done)
		p.pollLoop(ctx)
	}()
}

// close stops the completion loop, then destroys the port's resources.
func (p *udPort) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	if p.cancel != nil {
		p.cancel()
		<-p.done
	}
	p.release()
}

// release destroys what was created, newest first (QPs before their CQ,
// CQs before their channel). Safe on a partly built port.
func (p *udPort) release() {
	for _, a := range p.ahs {
		a.ah.Close()
	}
	p.ahs = nil
	for _, a := range p.retired {
		a.Close()
	}
	p.retired = nil
	for i := len(p.flows) - 1; i >= 0; i-- {
		p.flows[i].qp.Close()
	}
	if p.cq != nil {
		p.cq.Close()
	}
	if p.ch != nil {
		p.ch.Close()
	}
	if p.mr != nil {
		p.mr.Close()
	}
	if p.pd != nil {
		p.pd.Close()
	}
	if p.buf != nil {
		p.buf.Close()
	}
}

func (p *udPort) slot(i int) []byte { return p.buf.Bytes()[i*slotSize : (i+1)*slotSize] }

// postRecv posts receive slot i to the QP of its flow (each flow has
// nrec slots, in flow order).
func (p *udPort) postRecv(i int) error {
	return p.flows[i/p.nrec].qp.PostRecv(wrRecv|uint64(i), verbs.SGE{Addr: p.mr.Addr() + uint64(i*slotSize), Length: grhSize + PayloadSize, LKey: p.mr.LKey()})
}

// recvFlow returns the flow whose QP a receive completion with work
// request ID wrid came from: its slot's.
func (p *udPort) recvFlow(wrid uint64) uint8 {
	if p.nrec == 0 {
		return 0
	}
	return uint8(int(wrid&^wrRecv) / p.nrec)
}

// local describes the port as the control endpoint advertises it.
func (p *udPort) local() ud.LocalPort {
	// Without p.mu (the control endpoint asks while a post may hold it):
	// only the fields fixed when the port was opened are read, not a copy
	// of each flowQP, whose send counts the posts change.
	flows := make([]ud.Flow, len(p.flows))
	for i := range p.flows {
		flows[i] = ud.Flow{QPN: p.flows[i].qp.Num(), SourcePort: p.flows[i].sport}
	}
	return ud.LocalPort{Key: p.key, Device: p.dev, Port: p.num, GIDIndex: p.gid.Index, LinkLayer: p.ll.String(), TrafficClass: uint8(p.tclass.Load()),
		Endpoint: ud.Endpoint{GID: p.gid.GID, QPN: p.qp.Num(), QKey: p.qkey, LID: p.lid}, Flows: flows}
}

// ahIdle is how long an address handle must be unused before it is
// destroyed: sends in flight may still refer to a recently used one.
const ahIdle = 10 * time.Second

// setTrafficClass makes tc the class of the port's probes and answers from
// the next one on, and reports whether it changed. The handles of the old
// class are retired, not destroyed: sends in flight may refer to them.
//
// A port whose post has not returned (it holds p.mu) is left as it is and
// reports false: the engine's scan, which calls this, must not stand in
// one port's post; the next scan sets the class.
func (p *udPort) setTrafficClass(tc uint8, now time.Time) bool {
	if !p.mu.TryLock() {
		return false
	}
	defer p.mu.Unlock()
	if p.closed || uint32(tc) == p.tclass.Load() {
		return false
	}
	p.dropRetired(now)
	for _, a := range p.ahs {
		p.retired = append(p.retired, a.ah)
	}
	clear(p.ahs)
	p.retiredAt = now
	p.tclass.Store(uint32(tc))
	return true
}

// dropRetired destroys the retired handles once they have been idle for
// ahIdle. Called with p.mu held.
func (p *udPort) dropRetired(now time.Time) {
	if len(p.retired) == 0 || now.Sub(p.retiredAt) < ahIdle {
		return
	}
	for _, a := range p.retired {
		a.Close()
	}
	p.retired = nil
}

// ah returns the cached address handle for sends from flow f to dst,
// creating it. Called with p.mu held. Idle handles are evicted when the
// cache is full: it holds MaxAH handles per flow for the probes and as
// many for the answers (each of a peer's flows is answered on a label of
// its own).
func (p *udPort) ah(dst ud.Endpoint, f uint8, now time.Time) (*verbs.AH, error) {
	p.dropRetired(now)
	global := p.ll != verbs.LinkLayerInfiniBand || !dst.GID.IsZero()
	key := ahKey{gid: dst.GID}
	if global {
		key.label = flowLabel(p.gid.GID, dst.GID, dst.QPN, f)
	}
	if a := p.ahs[key]; a != nil {
		a.used = now
		return a.ah, nil
	}
	if bound := 2 * p.e.cfg.MaxAH * len(p.flows); len(p.ahs) >= bound {
		var oldest ahKey
		var t time.Time
		for k, a := range p.ahs {
			if t.IsZero() || a.used.Before(t) {
				oldest, t = k, a.used
			}
		}
		// Only a handle idle for a while goes: sends in flight may still
		// refer to a recently used one.
		if now.Sub(t) < ahIdle {
			return nil, fmt.Errorf("peer probe: %s: %d address handles in use; lower [probe] max_peers or flows", p.key, len(p.ahs))
		}
		p.ahs[oldest].ah.Close()
		delete(p.ahs, oldest)
	}
	path := verbs.Path{Port: p.num, GIDIndex: p.gid.Index, Global: global,
		DLID: dst.LID, RemoteGID: dst.GID, TClass: uint8(p.tclass.Load()), FlowLabel: key.label}
	a, err := p.pd.NewAH(path)
	if err != nil {
		return nil, err
	}
	p.ahs[key] = &ahEntry{ah: a, used: now}
	return a, nil
}

// maxUnsignalled bounds the sends posted without asking for a completion.
const maxUnsignalled = 32

// post sends every item of out that it can, in order, as one chained post
// per flow it uses (one flow but for a batch of probes on several),
// stamping probes' SentAt and replies' ReplyAt with one clock read just
// before posting (for a reply that is after the batch was handled, so the
// handling counts as the responder's host delay). An item that cannot go
// (no free slot, no address handle, no such flow, the port closed or
// broken, the post failed) gets its error through item.err. It returns how
// many were posted. Called with p.mu held.
func (p *udPort) post(out []outgoing) int {
	fail := func(o *outgoing, err error) {
		if o.err != nil {
			*o.err = err
		}
	}
	var state error
	switch {
	case p.closed:
		state = fmt.Errorf("peer probe: %s: %w", p.key, verbs.ErrClosed)
	case p.broken != nil:
		state = fmt.Errorf("peer probe: %s is being rebuilt: %w", p.key, p.broken)
	}
	now := time.Now()
	stamp := p.e.stamp(now)
	// The flows the batch uses: one pass over it per flow, in flow order
	// (answers all go on flow 0; a batch of probes spreads over them).
	var used uint32
	for k := range out {
		if int(out[k].flow) >= len(p.flows) && state == nil {
			fail(&out[k], fmt.Errorf("peer probe: %s has %d flows, not %d", p.key, len(p.flows), out[k].flow+1))
			continue
		}
		used |= 1 << out[k].flow
	}
	if state != nil {
		for k := range out {
			fail(&out[k], state)
		}
		return 0
	}
	total := 0
	for f := range p.flows {
		if used&(1<<f) != 0 {
			total += p.postFlow(out, uint8(f), now, stamp, fail)
		}
	}
	return total
}

// postFlow posts the items of out on flow f as one chained post; see post.
func (p *udPort) postFlow(out []outgoing, f uint8, now time.Time, stamp int64, fail func(*outgoing, error)) int {
	fq := &p.flows[f]
	wrs := p.wrs[:0]
	p.wrItem = p.wrItem[:0]
	for k := range out {
		o := &out[k]
		if o.flow != f {
			continue
		}
		if o.pl.Version == PayloadV2 && p.mac == nil {
			// The key went away (SetAuth(nil)) after the batch was made.
			fail(o, fmt.Errorf("peer probe: %s: %w", p.key, ErrNoKey))
			continue
		}
		if len(p.free) == 0 {
			fail(o, fmt.Errorf("peer probe: %s: %w", p.key, ud.ErrBusy))
			continue
		}
		ah, err := p.ah(o.dst, f, now)
		if err != nil {
			fail(o, err)
			continue
		}
		i := p.free[len(p.free)-1]
		p.free = p.free[:len(p.free)-1]
		p.encodeOut(o, p.slot(i)[:PayloadSize], stamp)
		fq.unsignalled++
		signalled := fq.unsignalled >= p.signalEvery
		if signalled {
			fq.unsignalled = 0
		}
		p.wrItem = append(p.wrItem, k)
		wrs = append(wrs, verbs.SendWR{ID: uint64(i) | uint64(f)<<wrFlowShift, Opcode: verbs.OpSend, Signaled: signalled, AH: ah,
			RemoteQPN: o.dst.QPN, RemoteQKey: o.dst.QKey,
			SGE: verbs.SGE{Addr: p.mr.Addr() + uint64(i*slotSize), Length: PayloadSize, LKey: p.mr.LKey()}})
	}
	if len(wrs) == 0 {
		return 0
	}
	n, err := fq.qp.PostSendList(wrs)
	for _, wr := range wrs[:n] {
		fq.posted.push(int(wr.ID & wrSlotMask))
	}
	// Only probes that went await a reply. No completion can be handled
	// before this: the completion loop needs p.mu, which the caller holds.
	for _, k := range p.wrItem[:n] {
		p.sent(&out[k], stamp)
	}
	if err != nil {
		// What did not go gives its slot back; the signalling count
		// restarts so the next post asks for a completion.
		for _, wr := range wrs[n:] {
			p.free = append(p.free, int(wr.ID&wrSlotMask))
		}
		fq.unsignalled = p.signalEvery
		for _, k := range p.wrItem[n:len(wrs)] {
			fail(&out[k], err)
		}
	}
	return n
}

// reclaim returns the slots of every send flow f posted up to and
// including the one in slot last, which just completed.
func (p *udPort) reclaim(f *flowQP, last int) {
	for f.posted.size > 0 {
		i := f.posted.pop()
		p.free = append(p.free, i)
		if i == last {
			return
		}
	}
}

// pollLoop handles completions until ctx is done: it answers probes from
// admitted sources, hands replies to the engine and recycles slots. It
// sleeps on the completion channel; it never spins. A wakeup takes every
// completion that is there (up to len(wcs)), and the answers to the probes
// among them go out as one chained post.
func (p *udPort) pollLoop(ctx context.Context) {
	wcs := make([]verbs.WorkCompletion, 64)
	var replies []ud.Reply
	for {
		n, err := p.cq.PollWait(ctx, wcs, p.e.cfg.Spin)
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, verbs.ErrClosed) {
				p.setBroken(fmt.Errorf("peer probe: %s: poll: %w", p.key, err))
			}
			if ctx.Err() == nil {
				// A broken CQ cannot be waited on; wait for the rebuild.
				<-ctx.Done()
			}
			return
		}
		replies = p.completions(wcs[:n], replies[:0])
		if p.e.cfg.OnReply != nil {
			for _, r := range replies {
				p.e.cfg.OnReply(r)
			}
		}
	}
}

func (p *udPort) setBroken(err error) {
	p.mu.Lock()
	p.setBrokenLocked(err)
	p.mu.Unlock()
}

func (p *udPort) setBrokenLocked(err error) {
	if p.broken == nil {
		p.broken = err
	}
	p.e.rebuild()
}

// completions handles one batch of completions and appends the replies to
// this node's probes to replies. One clock read stamps the whole batch: it
// is when this host learnt of them, so the time a batch takes to handle
// counts as host delay (reported apart by the prober), not as network time.
func (p *udPort) completions(wcs []verbs.WorkCompletion, replies []ud.Reply) []ud.Reply {
	now := time.Now()
	t := p.e.stamp(now)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.authLocked()
	p.out = p.out[:0]
	for k := range wcs {
		wc := &wcs[k]
		if wc.WRID&wrRecv == 0 {
			// A signalled send (or any send, flushed in error) finished:
			// its slot and those of the sends its flow posted before it
			// are free.
			if f := int(wc.WRID >> wrFlowShift); f < len(p.flows) {
				p.reclaim(&p.flows[f], int(wc.WRID&wrSlotMask))
			}
			if err := wc.Err(); err != nil && wc.Status != verbs.WCFlushErr {
				p.e.count(&p.e.stats.SendErrors)
				p.setBrokenLocked(fmt.Errorf("peer probe: %s: send: %w", p.key, err))
			}
			continue
		}
		i := int(wc.WRID &^ wrRecv)
		if err := wc.Err(); err != nil {
			if wc.Status != verbs.WCFlushErr {
				p.setBrokenLocked(fmt.Errorf("peer probe: %s: receive: %w", p.key, err))
			}
			continue
		}
		// Copy the packet out before the receive goes back: from then on
		// the adapter may overwrite the slot. The receive goes back before
		// anything else so that a burst cannot drain the receive queue.
		n := copy(p.pkt[:], p.slot(i)[:grhSize+PayloadSize])
		if !p.closed {
			if err := p.postRecv(i); err != nil {
				p.setBrokenLocked(err)
			}
		}
		replies = p.receive(wc, p.pkt[:n], t, now, replies)
	}
	if len(p.out) > 0 {
		n := p.post(p.out)
		atomic.AddUint64(&p.e.stats.Answered, uint64(n))
		atomic.AddUint64(&p.e.stats.ReplyErrors, uint64(len(p.out)-n))
	}
	return replies
}

// authLocked brings p.mac up to date with the engine's authentication
// settings and returns them (nil: off). SetAuth may change them at any
// time; a port picks the change up at its next batch of completions or
// probes, and builds a new tagger only then. Called with p.mu held.
func (p *udPort) authLocked() *authConf {
	a := p.e.auth.Load()
	if a != p.macFor {
		p.macFor, p.mac, p.macAlso = a, nil, nil
		if a != nil {
			p.mac = newTagger(a.key)
			for _, k := range a.also {
				p.macAlso = append(p.macAlso, newTagger(k))
			}
		}
	}
	return a
}

// encodeOut stamps the probe's SentAt or the reply's ReplyAt with stamp,
// encodes it into b and, for version 2, tags it from this port's GID to
// the destination's. The caller checked that a version-2 item has p.mac.
func (p *udPort) encodeOut(o *outgoing, b []byte, stamp int64) {
	if o.pl.Kind == KindReply {
		o.pl.ReplyAt = stamp
	} else {
		o.pl.SentAt = stamp
	}
	o.pl.Encode(b)
	if o.pl.Version == PayloadV2 {
		p.mac.seal(b, p.gid.GID, o.dst.GID)
	}
}

// sent records a posted probe (a reply needs no record) as awaiting its
// reply: the prober's own send time and destination, which is all a reply
// is judged by.
func (p *udPort) sent(o *outgoing, stamp int64) {
	if o.pl.Kind == KindProbe {
		p.pend.add(o.pl.Seq, stamp, o.dst, o.pl.Version, o.flow)
	}
}

// receive handles one received packet: pkt is the 40-byte GRH region and
// the payload, copied out of its slot, t and now the batch's stamp and
// time. It answers probes from admitted sources (appending to p.out) and
// appends the replies to this port's probes to replies; everything else
// is counted and dropped. Nothing the payload claims about who sent it is
// believed: the source is the QPN the adapter reports and the GID of the
// GRH, the round trip is measured from the prober's own record of the
// send, and a version-2 tag is checked against both GIDs. It allocates
// nothing for a packet that is answered or accepted. Called with p.mu held
// after authLocked.
func (p *udPort) receive(wc *verbs.WorkCompletion, pkt []byte, t int64, now time.Time, replies []ud.Reply) []ud.Reply {
	e := p.e
	flow := p.recvFlow(wc.WRID)
	if wc.ByteLen != grhSize+PayloadSize || len(pkt) != grhSize+PayloadSize || wc.Flags&verbs.WCGRH == 0 {
		// Without a GRH there is no source GID to check or answer; every
		// probe rdmad sends has one (its address handles are global).
		e.count(&e.stats.Malformed)
		return replies
	}
	src, ok := grhSource(pkt[:grhSize])
	if !ok || src.IsZero() {
		e.count(&e.stats.Malformed)
		return replies
	}
	b := pkt[grhSize:]
	pl, err := DecodePayload(b)
	if err != nil {
		e.count(&e.stats.Malformed)
		return replies
	}
	authed := false
	if pl.Version == PayloadV2 {
		// Without a key a tag cannot be checked: as bad as a wrong one.
		if p.mac == nil || !p.verifyTag(b, src) {
			e.count(&e.stats.BadTag)
			return replies
		}
		authed = true
	} else if p.macFor != nil && p.macFor.require {
		e.count(&e.stats.Untagged)
		return replies
	}
	switch pl.Kind {
	case KindProbe:
		p.admMu.Lock()
		adm, ok := p.admitted.lookup(srcKey{gid: src, qpn: wc.SrcQP}, now)
		if !ok {
			p.admMu.Unlock()
			e.count(&e.stats.Unadmitted)
			return replies
		}
		// The source proved it is there (and has the key, if one is
		// required): its admission now outlives floods of claims.
		p.admitted.confirm(adm)
		qkey, lid := adm.qkey, adm.lid
		cqkey, clid, cand := adm.candidate(now)
		p.admMu.Unlock()
		// The answer goes in the probe's version, to the GID of the GRH
		// and the QPN of the completion, with the qkey and LID the
		// admission gave, not to anything the packet claims.
		r := Payload{Version: pl.Version, Kind: KindReply, Seq: pl.Seq, SentAt: pl.SentAt, RecvAt: t}
		if pl.Version == PayloadV1 {
			r.GID = p.gid.GID
		}
		// It leaves from the QP the probe came to: the prober takes a
		// reply only from the QPN it probed.
		p.out = append(p.out, outgoing{dst: ud.Endpoint{GID: src, QPN: wc.SrcQP, QKey: qkey, LID: lid}, pl: r, flow: flow})
		if cand && (cqkey != qkey || clid != lid) {
			// Somebody asked for other parameters and nobody has proved
			// which are the peer's (admit.go): the reply goes to both;
			// the peer's adapter drops the one with a wrong qkey.
			p.out = append(p.out, outgoing{dst: ud.Endpoint{GID: src, QPN: wc.SrcQP, QKey: cqkey, LID: clid}, pl: r, flow: flow})
		}
	case KindReply:
		sent, ok := p.pend.match(pl.Seq, src, wc.SrcQP, pl.Version, flow, t)
		if !ok {
			e.count(&e.stats.Unsolicited)
			return replies
		}
		rtt, delay := t-sent, pl.ReplyAt-pl.RecvAt
		if delay > rtt {
			// The responder claims to have held the probe longer than the
			// whole round trip this host measured: a lie meant to make
			// the network look faster. (Its clock may drift by parts per
			// million, not by whole round trips.)
			e.count(&e.stats.Malformed)
			return replies
		}
		e.count(&e.stats.Replies)
		replies = append(replies, ud.Reply{Local: p.key, Flow: flow, From: ud.Endpoint{GID: src, QPN: wc.SrcQP}, Seq: pl.Seq,
			RTT: time.Duration(rtt), ResponderDelay: time.Duration(delay), At: now, Authenticated: authed})
	}
	return replies
}

// verifyTag reports whether the version-2 payload b from src carries the
// tag of this port's key or of one of a rotation's other keys. Called with
// p.mu held after authLocked, p.mac set.
func (p *udPort) verifyTag(b []byte, src verbs.GID) bool {
	if p.mac.verify(b, src, p.gid.GID) {
		return true
	}
	for _, t := range p.macAlso {
		if t.verify(b, src, p.gid.GID) {
			return true
		}
	}
	return false
}
