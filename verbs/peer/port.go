package peer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

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

// wrRecv marks receive work request IDs; the low bits are the slot index.
const wrRecv = uint64(1) << 63

// A udPort is the prober and responder of one device port: one UD QP, one
// CQ with a completion channel, RecvSlots posted receives and SendSlots
// send buffers (the bound on probes and replies in flight).
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
	qp   *verbs.QP
	mtu  verbs.MTU
	nrec int

	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex // guards everything below and serialises posts
	closed bool
	free   []int // free send slots
	// Sends are signalled only every signalEvery-th post: a UD send
	// queue completes in order, so one completion returns the slots of
	// every send posted before it. posted holds the slots in flight in
	// posting order; unsignalled counts the posts since the last
	// signalled one. As long as SendSlots >= 2*signalEvery, a full queue
	// always holds a signalled send, so slots can never all be stuck.
	posted      ring
	unsignalled int
	signalEvery int
	wrs         []verbs.SendWR // scratch for one chained post
	wrItem      []int          // wrs[j] posts out[wrItem[j]]
	out         []outgoing     // replies to post after a completion batch
	probeOut    []outgoing     // scratch of ProbeBatch
	ahs         map[verbs.GID]*ahEntry
	admitted    map[srcKey]admission // sources the responder answers
	broken      error                // set when the QP left RTS; the engine rebuilds the port
}

// A srcKey is what a probe's sender is recognised by: the QPN the adapter
// reports for the sender (not forgeable by the payload) and the GID it
// asks to be answered at.
type srcKey struct {
	gid verbs.GID
	qpn uint32
}

// An admission is a source the control endpoint vouched for.
type admission struct {
	qkey  uint32
	lid   uint16
	until time.Time
}

// An outgoing is a probe or reply waiting to be posted.
type outgoing struct {
	dst Endpoint
	pl  Payload
	err *error // where to report a failure to post it; nil ignores it
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

func openPort(e *Engine, vctx *verbs.Context, num int, pa verbs.PortAttr) (p *udPort, err error) {
	p = &udPort{key: fmt.Sprintf("%s/%d", vctx.Name(), num), dev: vctx.Name(), num: num, ll: pa.LinkLayer, lid: pa.LID,
		qkey: e.qkey, e: e, mtu: pa.ActiveMTU, nrec: e.cfg.RecvSlots,
		ahs: map[verbs.GID]*ahEntry{}, admitted: map[srcKey]admission{}, done: make(chan struct{})}
	defer func() {
		if err != nil {
			p.release()
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
	n := e.cfg.RecvSlots + e.cfg.SendSlots
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
	if p.qp, err = p.pd.NewQP(verbs.QPConfig{Type: verbs.QPTypeUD, SendCQ: p.cq, RecvCQ: p.cq,
		MaxSendWR: e.cfg.SendSlots, MaxRecvWR: e.cfg.RecvSlots, MaxSGE: 1}); err != nil {
		return nil, err
	}
	if err = p.qp.Init(num, 0, p.qkey); err != nil {
		return nil, err
	}
	if err = p.qp.ReadyToReceive(verbs.Path{}, verbs.Remote{}); err != nil {
		return nil, err
	}
	if err = p.qp.ReadyToSend(0, 0, 0); err != nil {
		return nil, err
	}
	for i := 0; i < e.cfg.RecvSlots; i++ {
		if err = p.postRecv(i); err != nil {
			return nil, err
		}
	}
	for i := e.cfg.RecvSlots; i < n; i++ {
		p.free = append(p.free, i)
	}
	p.posted = ring{buf: make([]int, e.cfg.SendSlots)}
	p.signalEvery = max(1, min(maxUnsignalled, e.cfg.SendSlots/2))
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
	if p.qp != nil {
		p.qp.Close()
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

func (p *udPort) postRecv(i int) error {
	return p.qp.PostRecv(wrRecv|uint64(i), verbs.SGE{Addr: p.mr.Addr() + uint64(i*slotSize), Length: grhSize + PayloadSize, LKey: p.mr.LKey()})
}

// local describes the port as the control endpoint advertises it.
func (p *udPort) local() LocalPort {
	return LocalPort{Key: p.key, Device: p.dev, Port: p.num, GIDIndex: p.gid.Index, LinkLayer: p.ll.String(),
		Endpoint: Endpoint{GID: p.gid.GID, QPN: p.qp.Num(), QKey: p.qkey, LID: p.lid}}
}

// ah returns the cached address handle for dst, creating it. Called with
// p.mu held. Idle handles are evicted when the cache is full.
func (p *udPort) ah(dst Endpoint, now time.Time) (*verbs.AH, error) {
	if a := p.ahs[dst.GID]; a != nil {
		a.used = now
		return a.ah, nil
	}
	if len(p.ahs) >= p.e.cfg.MaxAH {
		var oldest verbs.GID
		var t time.Time
		for g, a := range p.ahs {
			if t.IsZero() || a.used.Before(t) {
				oldest, t = g, a.used
			}
		}
		// Only a handle idle for a while goes: sends in flight may still
		// refer to a recently used one.
		if now.Sub(t) < 10*time.Second {
			return nil, fmt.Errorf("peer probe: %s: %d address handles in use; lower [probe] max_peers", p.key, len(p.ahs))
		}
		p.ahs[oldest].ah.Close()
		delete(p.ahs, oldest)
	}
	path := verbs.Path{Port: p.num, GIDIndex: p.gid.Index, Global: p.ll != verbs.LinkLayerInfiniBand || !dst.GID.IsZero(),
		DLID: dst.LID, RemoteGID: dst.GID, TClass: p.e.cfg.TrafficClass}
	a, err := p.pd.NewAH(path)
	if err != nil {
		return nil, err
	}
	p.ahs[dst.GID] = &ahEntry{ah: a, used: now}
	return a, nil
}

// maxUnsignalled bounds the sends posted without asking for a completion.
const maxUnsignalled = 32

// post sends every item of out that it can, in order, as one chained post,
// stamping probes' SentAt and replies' ReplyAt with one clock read just
// before posting (for a reply that is after the batch was handled, so the
// handling counts as the responder's host delay). An item that cannot go (no free slot, no address handle,
// the port closed or broken, the post failed) gets its error through
// item.err. It returns how many were posted. Called with p.mu held.
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
	wrs := p.wrs[:0]
	p.wrItem = p.wrItem[:0]
	for k := range out {
		o := &out[k]
		if state != nil {
			fail(o, state)
			continue
		}
		if len(p.free) == 0 {
			fail(o, fmt.Errorf("peer probe: %s: %w", p.key, ErrBusy))
			continue
		}
		ah, err := p.ah(o.dst, now)
		if err != nil {
			fail(o, err)
			continue
		}
		i := p.free[len(p.free)-1]
		p.free = p.free[:len(p.free)-1]
		if o.pl.Kind == KindReply {
			o.pl.ReplyAt = stamp
		} else {
			o.pl.SentAt = stamp
		}
		o.pl.Encode(p.slot(i)[:PayloadSize])
		p.unsignalled++
		signalled := p.unsignalled >= p.signalEvery
		if signalled {
			p.unsignalled = 0
		}
		p.wrItem = append(p.wrItem, k)
		wrs = append(wrs, verbs.SendWR{ID: uint64(i), Opcode: verbs.OpSend, Signaled: signalled, AH: ah,
			RemoteQPN: o.dst.QPN, RemoteQKey: o.dst.QKey,
			SGE: verbs.SGE{Addr: p.mr.Addr() + uint64(i*slotSize), Length: PayloadSize, LKey: p.mr.LKey()}})
	}
	if len(wrs) == 0 {
		return 0
	}
	n, err := p.qp.PostSendList(wrs)
	for _, wr := range wrs[:n] {
		p.posted.push(int(wr.ID))
	}
	if err != nil {
		// What did not go gives its slot back; the signalling count
		// restarts so the next post asks for a completion.
		for _, wr := range wrs[n:] {
			p.free = append(p.free, int(wr.ID))
		}
		p.unsignalled = p.signalEvery
		for _, k := range p.wrItem[n:len(wrs)] {
			fail(&out[k], err)
		}
	}
	return n
}

// reclaim returns the slots of every send posted up to and including the
// one in slot last, which just completed.
func (p *udPort) reclaim(last int) {
	for p.posted.size > 0 {
		i := p.posted.pop()
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
	var replies []Reply
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
// counts as host delay (subtracted by the prober), not as network time.
func (p *udPort) completions(wcs []verbs.WorkCompletion, replies []Reply) []Reply {
	now := time.Now()
	t := p.e.stamp(now)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.out = p.out[:0]
	for _, wc := range wcs {
		if wc.WRID&wrRecv == 0 {
			// A signalled send (or any send, flushed in error) finished:
			// its slot and those of the sends before it are free.
			p.reclaim(int(wc.WRID))
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
		var pl Payload
		var derr error
		if wc.ByteLen != grhSize+PayloadSize {
			derr = fmt.Errorf("%w: %d bytes", ErrMalformed, wc.ByteLen)
		} else {
			pl, derr = DecodePayload(p.slot(i)[grhSize : grhSize+PayloadSize])
		}
		// The receive goes back before anything else so that a burst
		// cannot drain the receive queue.
		if !p.closed {
			if err := p.postRecv(i); err != nil {
				p.setBrokenLocked(err)
			}
		}
		switch {
		case derr != nil:
			p.e.count(&p.e.stats.Malformed)
		case pl.Kind == KindProbe:
			k := srcKey{gid: pl.GID, qpn: wc.SrcQP}
			adm, ok := p.admitted[k]
			if !ok || now.After(adm.until) {
				delete(p.admitted, k)
				p.e.count(&p.e.stats.Unadmitted)
				break
			}
			// Only a source the control endpoint admitted gets an answer,
			// and its qkey comes from that admission, not from the packet.
			p.out = append(p.out, outgoing{dst: Endpoint{GID: pl.GID, QPN: wc.SrcQP, QKey: adm.qkey, LID: adm.lid},
				pl: Payload{Kind: KindReply, Seq: pl.Seq, SentAt: pl.SentAt, RecvAt: t, GID: p.gid.GID}})
		case pl.Kind == KindReply:
			rtt := time.Duration(t - pl.SentAt)
			if pl.SentAt <= 0 || rtt < 0 || rtt > time.Minute {
				p.e.count(&p.e.stats.Malformed)
				break
			}
			p.e.count(&p.e.stats.Replies)
			replies = append(replies, Reply{Local: p.key, From: Endpoint{GID: pl.GID, QPN: wc.SrcQP}, Seq: pl.Seq, RTT: rtt,
				ResponderDelay: time.Duration(pl.ReplyAt - pl.RecvAt), At: now})
		}
	}
	if len(p.out) > 0 {
		n := p.post(p.out)
		atomic.AddUint64(&p.e.stats.Answered, uint64(n))
		atomic.AddUint64(&p.e.stats.ReplyErrors, uint64(len(p.out)-n))
	}
	return replies
}
