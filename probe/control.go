package probe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/probe/ud"
	"github.com/rdmad/rdmad/probe/wire"
)

// A Control is the control endpoint: one UDP socket that answers other
// nodes' queries (only from allowed sources, at a bounded rate per source,
// and with a fleet key only authenticated ones when that is required) and
// sends this node's queries, whose answers it hands to OnAnswer.
type Control struct {
	sock *udpSock // outside the runtime's poller (udpsock.go)
	opts ControlOptions

	allow atomic.Pointer[allowList]
	auth  atomic.Pointer[Auth]
	// fp is this node's encoded fingerprint (wire.Fingerprint.Marshal),
	// sent in version-2 queries and answers; nil: none yet.
	fp atomic.Pointer[[]byte]
	// qext is the extensions of a version-2 query (the fingerprint and its
	// padding), made when the fingerprint is set rather than per query;
	// qbuf is the buffer queries are encoded in.
	qext atomic.Pointer[[]wire.Ext]
	qmu  sync.Mutex
	qbuf []byte
	// qexts and qclock are the extensions of the query being encoded
	// and its clock extension's value (qmu): no allocation per query.
	qexts  []wire.Ext
	qclock []byte
	rate   *rateLimiter // Serve's goroutine only
	// ax is the extensions of the answer being encoded (Serve's
	// goroutine only): no allocation per answer.
	ax answerExts

	n *ControlCounters
}

// ControlCounters count a control endpoint's messages. Endpoints that
// replace each other (a changed [probe] port) can share one.
type ControlCounters struct {
	malformed, refused, answered atomic.Uint64
	// unauthenticated counts messages dropped because a key is required
	// and they carried no tag; badTag those whose tag did not verify;
	// rateLimited the allowed queries over their source's admission rate.
	unauthenticated, badTag, rateLimited atomic.Uint64
	// overflow0 is the receive buffer overflows of the endpoints closed
	// before (the endpoint in force reads its own from the kernel).
	overflow0 atomic.Uint64
}

// ControlStats are a control endpoint's counters at one time.
type ControlStats struct {
	Malformed, Refused, Answered         uint64
	Unauthenticated, BadTag, RateLimited uint64
	// Overflow counts the datagrams the kernel dropped because the
	// socket's receive buffer was full (SetReceiveBuffer).
	Overflow uint64
}

// Auth is how the control endpoint authenticates: a fleet key (nil: none)
// and whether messages without a valid tag are refused (require) or only
// flagged (prefer, for rollouts).
type Auth struct {
	Key     []byte // the fleet key ([probe] key_file): tags, and verifies
	Require bool
	// Others are more keys a tag may verify under, never used to tag:
	// the other keys of a rotation (key_file's further lines).
	Others [][]byte

	control []byte   // wire.ControlKey(Key)
	verify  [][]byte // control, then wire.ControlKey of each of Others
}

// ControlOptions configure a Control.
type ControlOptions struct {
	// NodeID is sent in every message.
	NodeID uint64
	// Ports returns the local probe ports to advertise.
	Ports func() []ud.LocalPort
	// Admit lets a querier's port be answered by local port key.
	// from is the query's source address.
	// authenticated says the query carried a valid tag.
	Admit func(local string, src ud.Endpoint, from netip.Addr, authenticated bool, until time.Time) error
	// AdmitFor is how long an admission lasts; queriers refresh it.
	AdmitFor time.Duration
	// OnAnswer receives answers to this node's queries; it must not block.
	// Answers whose tag does not verify, and with a required key
	// unauthenticated ones, never reach it. m's extensions are in Serve's
	// buffers, which the next message overwrites (wire.DecodeAlias): what
	// is kept past the call must be copied (m.Clone).
	OnAnswer func(from netip.AddrPort, m wire.Message)
	// OnQuery, if set, receives the queries this endpoint answered (from
	// an allowed source, within its rate, authenticated when required),
	// after their port was admitted; it must not block. m is Serve's, as
	// OnAnswer's is.
	OnQuery func(from netip.AddrPort, m wire.Message)
	// Auth is the initial authentication; SetAuth changes it.
	Auth Auth
	// Counters, if set, are counted into (else the Control has its own).
	Counters *ControlCounters
	// Bandwidth, if set, serves the bandwidth test messages
	// (wire.TypeBWRequest, TypeBWDone) that passed serveBW's checks and
	// returns the answer to send, if any; without it they are refused.
	// It runs on Serve's goroutine.
	Bandwidth func(from netip.AddrPort, m wire.Message) (wire.Message, bool)
	// Linger, if set, makes a busy endpoint read in batches: after a
	// message, Serve reads again only at the next tick of a clock that
	// ticks every Linger (multiples of Linger since the Unix epoch, the
	// ticks the manager's passes fall on) and takes what came meanwhile
	// together, until a tick finds the socket empty. An idle endpoint
	// answers at once; a busy one (ten thousand peers re-asking every
	// minute: some 300 messages a second) wakes about once per Linger
	// instead of once per message, with the manager's pass, and answers
	// within Linger.
	Linger time.Duration
}

// An allowList is who may query: configured peers' addresses (sorted,
// unmapped: 24 bytes each, where a map of ten thousand took some 160) and
// CIDRs.
type allowList struct {
	addrs []netip.Addr
	nets  []netip.Prefix
}

func (a *allowList) allows(ip netip.Addr) bool {
	ip = ip.Unmap()
	if _, ok := slices.BinarySearchFunc(a.addrs, ip, netip.Addr.Compare); ok {
		return true
	}
	for _, p := range a.nets {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// ListenControl opens the control endpoint on addr ("[::]:18516").
func ListenControl(addr string, opts ControlOptions) (*Control, error) {
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("peers: control endpoint %s: %w", addr, err)
	}
	sock, err := listenUDP(ua.String())
	if err != nil {
		return nil, fmt.Errorf("peers: listen on control endpoint %s: %w; is another rdmad running, or change [probe] port", addr, err)
	}
	c := &Control{sock: sock, opts: opts, n: opts.Counters, rate: newRateLimiter(admitBurst, admitPerSec, maxRateSrcs)}
	if c.n == nil {
		c.n = &ControlCounters{}
	}
	c.allow.Store(&allowList{})
	c.SetAuth(opts.Auth)
	return c, nil
}

// Addr returns the local address.
func (c *Control) Addr() netip.AddrPort { return c.sock.local }

// Close closes the socket; Serve returns. Its overflows stay counted in
// the counters it shares.
func (c *Control) Close() error {
	c.n.overflow0.Add(c.overflow())
	return c.sock.close()
}

// SetAllow replaces who may query.
func (c *Control) SetAllow(addrs []netip.Addr, nets []netip.Prefix) {
	a := &allowList{addrs: make([]netip.Addr, 0, len(addrs)), nets: nets}
	for _, ip := range addrs {
		a.addrs = append(a.addrs, ip.Unmap())
	}
	slices.SortFunc(a.addrs, netip.Addr.Compare)
	a.addrs = slices.Clip(slices.Compact(a.addrs))
	c.allow.Store(a)
}

// SetAuth replaces the fleet key and mode (a reload).
func (c *Control) SetAuth(a Auth) {
	a.Key = append([]byte(nil), a.Key...)
	a.control = wire.ControlKey(a.Key)
	a.Require = a.Require && len(a.Key) > 0
	a.verify = nil
	if len(a.Key) > 0 {
		a.verify = [][]byte{a.control}
		for _, k := range a.Others {
			if len(k) > 0 {
				a.verify = append(a.verify, wire.ControlKey(k))
			}
		}
	}
	a.Others = nil // kept only in their derived form
	c.auth.Store(&a)
}

// SetFingerprint replaces the encoded fingerprint (wire.Fingerprint's
// Marshal) that version-2 queries and answers carry; nil sends none.
func (c *Control) SetFingerprint(fp []byte) {
	if len(fp) > wire.MaxFingerprint {
		fp = nil
	}
	if fp == nil {
		c.fp.Store(nil)
		c.qext.Store(nil)
		return
	}
	fp = append([]byte(nil), fp...)
	ext := wire.WithFingerprint(fp)
	c.fp.Store(&fp)
	c.qext.Store(&ext)
}

// Stats returns the counters.
func (c *Control) Stats() ControlStats {
	return ControlStats{Malformed: c.n.malformed.Load(), Refused: c.n.refused.Load(), Answered: c.n.answered.Load(),
		Unauthenticated: c.n.unauthenticated.Load(), BadTag: c.n.badTag.Load(), RateLimited: c.n.rateLimited.Load(),
		Overflow: c.n.overflow0.Load() + c.overflow()}
}

// SetReceiveBuffer asks the kernel for a receive buffer of bytes on the
// socket, so that the messages one batch window gathers fit (Linger: at
// ten thousand peers the default buffer overflowed and answers were lost,
// issue #29): SO_RCVBUFFORCE where the process may (CAP_NET_ADMIN, which
// rdmad.service grants), else SO_RCVBUF, which the kernel caps at
// net.core.rmem_max. It never shrinks the buffer, and returns the size
// the kernel set (it doubles what it is asked for, for its bookkeeping).
func (c *Control) SetReceiveBuffer(bytes int) (int, error) {
	var got int
	var serr error
	if err := c.sock.control(func(fd int) {
		cur, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF)
		if err == nil && cur >= 2*bytes {
			got = cur
			return
		}
		if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, bytes) != nil {
			serr = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, bytes)
		}
		got, err = unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF)
		if serr == nil {
			serr = err
		}
	}); err != nil {
		return 0, fmt.Errorf("peers: control endpoint %s: receive buffer: %w", c.Addr(), err)
	}
	if serr != nil {
		return got, fmt.Errorf("peers: control endpoint %s: set the receive buffer to %d bytes: %w", c.Addr(), bytes, serr)
	}
	return got, nil
}

// overflow returns how many datagrams the kernel dropped on the socket
// because its receive buffer was full (SO_MEMINFO's SK_MEMINFO_DROPS);
// 0 when it cannot tell.
func (c *Control) overflow() uint64 {
	var mi [unix.SK_MEMINFO_VARS]uint32
	c.sock.control(func(fd int) {
		n := uint32(unsafe.Sizeof(mi))
		if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_MEMINFO,
			uintptr(unsafe.Pointer(&mi[0])), uintptr(unsafe.Pointer(&n)), 0); e != 0 {
			mi = [unix.SK_MEMINFO_VARS]uint32{}
		}
	})
	return uint64(mi[unix.SK_MEMINFO_DROPS])
}

// Counters returns malformed, refused and answered message counts.
func (c *Control) Counters() (malformed, refused, answered uint64) {
	s := c.Stats()
	return s.Malformed, s.Refused, s.Answered
}

// Query sends m as a query to to, in m.Version (0: the newest), tagged when
// a fleet key is set and the version can carry a tag. A version-2 query
// carries the fingerprint, then m.Ext; a version-1 one no extensions. A version-1 query is
// never sent while a key is required: its answer could not be trusted.
func (c *Control) Query(to netip.AddrPort, m wire.Message) error {
	_, err := c.QueryClock(to, m)
	return err
}

// QueryClock is Query, and a version-2 query also carries this node's
// realtime clock (wire.ExtClock's T1), read just before the query is
// encoded and returned (with its monotonic reading, for the round trip):
// the querier keeps it to compute the clock offset from the answer. It is
// the zero time for a version-1 query, which carries none.
func (c *Control) QueryClock(to netip.AddrPort, m wire.Message) (time.Time, error) {
	m.Type = wire.TypeQuery
	m.NodeID = c.opts.NodeID
	var fpExt []wire.Ext
	if m.Version == wire.Version1 {
		m.Ext = nil // version 1 has no extensions (a peer that reads only it gets only flow 0)
	} else if ext := c.qext.Load(); ext != nil {
		// Padded, so that the answer's fingerprint fits the size an
		// answer may have (no larger than the query and a tag). The
		// caller's extensions (the flows) follow, then the clock.
		fpExt = *ext
	}
	a := c.auth.Load()
	var key []byte
	if m.Version != wire.Version1 {
		key = a.control
	} else if a.Require {
		return time.Time{}, fmt.Errorf("peers: query %s: version 1 has no authentication and [probe] auth = \"require\"", to)
	}
	c.qmu.Lock()
	defer c.qmu.Unlock()
	var t1 time.Time
	if m.Version != wire.Version1 {
		t1 = time.Now()
		c.qclock = wire.AppendClockQuery(c.qclock[:0], t1)
		c.qexts = append(append(append(c.qexts[:0], fpExt...), m.Ext...), wire.Ext{Type: wire.ExtClock, Value: c.qclock})
		m.Ext = c.qexts
	}
	b, err := m.Append(c.qbuf[:0], key)
	if err != nil {
		return time.Time{}, fmt.Errorf("peers: query %s: %w", to, err)
	}
	c.qbuf = b
	if err := c.sock.sendTo(b, to); err != nil {
		return time.Time{}, fmt.Errorf("peers: query control endpoint %s: %w", to, err)
	}
	return t1, nil
}

// Serve reads messages until ctx is done or the socket is closed. A
// malformed message, a query from a source that is not allowed, one over
// its source's rate, and with a required key one without a valid tag, is
// dropped and counted; nothing a peer sends can stop the loop.
func (c *Control) Serve(ctx context.Context) error {
	stop := context.AfterFunc(ctx, c.sock.shutdown)
	defer stop()
	// One byte more than the largest message, so that an oversized
	// datagram is seen as oversized rather than silently truncated into
	// a valid one.
	buf := make([]byte, wire.MaxSize+1)
	out := make([]byte, 0, wire.MaxSize)
	// exts is the decoded message's extensions: they and their values
	// (in buf) are Serve's, reused for the next message (DecodeAlias).
	exts := make([]wire.Ext, 0, 8)
	// busy: a message came since a tick last found the socket empty.
	busy := false
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	defer linger.Stop()
	for {
		n, from, err := c.sock.tryRecv(buf)
		if err == errEmpty {
			if c.opts.Linger > 0 && busy {
				// What comes next is read together at the next tick
				// of the batch window, the one the manager's pass
				// falls on (alignUp): one timer wakes both. A tick
				// that finds nothing ends the busy spell: the next
				// message is read when it comes.
				now := time.Now()
				linger.Reset(alignUp(now.Add(time.Nanosecond), c.opts.Linger).Sub(now))
				select {
				case <-linger.C:
				case <-ctx.Done():
					return nil
				}
				busy = false
				continue
			}
			err = c.sock.wait()
			if err == nil {
				continue
			}
		}
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("peers: read control endpoint: %w", err)
		}
		rx := time.Now() // T2 of a query's clock exchange
		busy = true
		a := c.auth.Load()
		m, err := wire.DecodeAlias(buf[:n], exts, a.verify...)
		if cap(m.Ext) > cap(exts) {
			exts = m.Ext[:0]
		}
		switch {
		case errors.Is(err, wire.ErrBadTag):
			c.n.badTag.Add(1)
			continue
		case err != nil:
			c.n.malformed.Add(1)
			continue
		case a.Require && !m.Authenticated:
			// Neither an unauthenticated query (it would admit a QP
			// anyone could name) nor an unauthenticated answer (it
			// could point this node's probes anywhere) is taken.
			c.n.unauthenticated.Add(1)
			continue
		}
		if wire.IsBW(m.Type) {
			// The handler may keep the message: it gets its own.
			out = c.serveBW(out[:0], from, m.Clone(), a)
			continue
		}
		if m.Type == wire.TypeAnswer {
			// The manager takes an answer only from the exact address
			// and port it queried and only for a nonce outstanding.
			if c.opts.OnAnswer != nil {
				c.opts.OnAnswer(from, m)
			}
			continue
		}
		if !c.allow.Load().allows(from.Addr()) {
			c.n.refused.Add(1)
			continue
		}
		if !c.rate.allow(from.Addr(), time.Now()) {
			c.n.rateLimited.Add(1)
			continue
		}
		var ok bool
		out, ok = c.answer(out[:0], from, m, a, n, rx)
		if ok && c.opts.OnQuery != nil {
			c.opts.OnQuery(from, m)
		}
	}
}

// answer admits the querier's port and answers in the query's version: a
// node that sent version 1 cannot read version 2. A version-2 answer is
// tagged when this node has a key, whether or not the query was, and
// carries this node's fingerprint when the answer stays within the query's
// size (qlen) plus a tag: the endpoint never amplifies more than that. It
// reports whether the querier's port was admitted. A version-2 query with
// a clock (wire.ExtClock) gets this node's receive time rx and send time in
// the answer, within the same bound (after the fingerprint).
func (c *Control) answer(out []byte, from netip.AddrPort, q wire.Message, a *Auth, qlen int, rx time.Time) ([]byte, bool) {
	ports := c.opts.Ports()
	ans := wire.Message{Version: q.Version, Type: wire.TypeAnswer, Nonce: q.Nonce, NodeID: c.opts.NodeID}
	flows := -1 // the query names no further flows: the answer says nothing of them
	if len(ports) > 0 {
		p := ports[int(q.Index)%len(ports)]
		src := ud.Endpoint{GID: q.GID, QPN: q.QPN, QKey: q.QKey, LID: q.LID}
		until := time.Now().Add(c.opts.AdmitFor)
		if err := c.opts.Admit(p.Key, src, from.Addr(), q.Authenticated, until); err != nil {
			c.n.refused.Add(1)
			return out, false
		}
		flows = admitFlows(c.opts.Admit, p.Key, src, from.Addr(), until, q)
		ans.Index, ans.Count = uint8(int(q.Index)%len(ports)), uint8(min(len(ports), 255))
		ans.QPN, ans.QKey, ans.LID, ans.GID = p.QPN, p.QKey, p.LID, p.GID
	}
	var key []byte
	if ans.Version == wire.Version2 {
		key = a.control
		size := wire.Size + len(key)
		// The extensions and their values are in Serve's buffers
		// (c.ax): the answer is encoded before the next is made.
		ans.Ext = c.ax.ext[:0]
		if flows >= 0 {
			// The query named at least one QPN (7 bytes), so the 5 of
			// this never make the answer larger than the query.
			c.ax.flows[0] = wire.FlowsAcceptedValue(flows)
			ans.Ext = append(ans.Ext, wire.Ext{Type: wire.ExtFlows, Value: c.ax.flows[:]})
			size += 5
		}
		if fp := c.fp.Load(); fp != nil && size+4+len(*fp) <= qlen+wire.TagSize {
			ans.Ext = append(ans.Ext, wire.Ext{Type: wire.ExtFingerprint, Value: *fp})
			size += 4 + len(*fp)
		}
		if _, ok := wire.QueryClock(&q); ok && size+wire.ClockExtLen <= qlen+wire.TagSize {
			// T3 as late as the encoding allows: what the answer waits
			// for after this is the tag and the send, both small.
			ans.Ext = append(ans.Ext, wire.Ext{Type: wire.ExtClock, Value: wire.AppendClockAnswer(c.ax.clock[:0], rx, time.Now())})
		}
	}
	out, err := ans.Append(out, key)
	if err != nil {
		return out[:0], true
	}
	if err := c.sock.sendTo(out, from); err == nil {
		c.n.answered.Add(1)
	}
	return out, true
}

// answerExts is the room of an answer's extensions: flows, fingerprint,
// clock.
type answerExts struct {
	ext   [3]wire.Ext
	flows [1]byte
	clock [16]byte
}

// admitFlows admits the further flows a version-2 query names (at most
// wire.MaxFlowQPNs, checked by Decode), each as the header's endpoint with
// the flow's QPN, from the first on until one is refused, and returns how
// many were admitted; -1 when the query names none. The querier probes on
// those flows only: a flow the responder does not answer would look lossy.
// Every admission counts against the querier's address in the engine's
// bounded table, as the header's does; none of them sends anything.
func admitFlows(admit func(string, ud.Endpoint, netip.Addr, bool, time.Time) error, local string, src ud.Endpoint, from netip.Addr, until time.Time, q wire.Message) int {
	var room [wire.MaxFlowQPNs]uint32
	qpns, ok := wire.AppendQueryFlows(room[:0], q)
	if q.Version != wire.Version2 || !ok {
		return -1
	}
	n := 0
	for _, qpn := range qpns {
		s := src
		s.QPN = qpn
		if admit(local, s, from, q.Authenticated, until) != nil {
			break
		}
		n++
	}
	return n
}
