// Package peer probes other nodes over unreliable datagram (UD) queue pairs,
// in the style of R-Pingmesh: on every ACTIVE port of every RDMA device one
// UD QP both sends probes and answers the probes of other nodes. A probe
// carries a sequence number and the prober's send time; the responder
// echoes it with its own receive and send times, so the prober can show
// the responder's claimed host delay apart from the round trip it measured.
//
// Trust: a peer must not report its own latency, nor speak for another
// node. The prober keeps its own record of every probe in flight (pending.go)
// and measures the round trip from it, accepting a reply only from the QPN
// (as the adapter reports it) and GID (from the packet's GRH) the probe went
// to; the responder answers only sources the control endpoint admitted
// (admit.go), recognised the same way. With a fleet key (SetAuth), payloads
// carry an HMAC tag over their bytes and both GIDs (payload.go).
//
// The package knows nothing of peers, schedules or health: the daemon's
// probe control plane (probe, which this package does not import) decides
// whom to probe and when, admits the sources the responder answers
// (learned through its control endpoint), and turns replies and timeouts
// into peer states. An Engine is its probe.Transport; the values they
// exchange are probe/ud's.
//
// Memory: each port has its own small buffer (send and receive slots of
// 128 bytes), registered for local writes only. UD needs no rkeys, and none
// of the MR pool's memory is reachable from here.
package peer

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmad/rdmad/probe/ud"
	"github.com/rdmad/rdmad/verbs"
)

// ErrNoPort is returned by Probe and Admit for a port key that is not (or
// no longer) probing.
var ErrNoPort = errors.New("no such probing port")

// ErrNoKey is returned for a probe that should be tagged (Target.Auth) while
// the engine has no key (SetAuth).
var ErrNoKey = errors.New("probe authentication is off (no key)")

// ErrAuthRequired is returned for an untagged probe while SetAuth required
// tags: its reply would be dropped.
var ErrAuthRequired = errors.New("untagged probe while tags are required")

// Config configures an Engine. Zero values take the defaults.
type Config struct {
	// QKey is the queue key of this node's probe QPs; 0 picks a random
	// one. Only senders that learned it through the control endpoint can
	// reach the QP at all.
	QKey uint32
	// Devices limits probing to these devices; empty uses all.
	Devices []string
	// Rescan is how often devices and port states are read again; default 5s.
	Rescan time.Duration
	// RecvSlots (per flow) and SendSlots size each port's queues; defaults
	// 2048 (fewer past one flow, within maxPortSlots) and 2048, twice the
	// probes the manager sends in one batch (MaxBatch): the replies to a
	// batch come back together and must find receives posted, and the
	// answers to other nodes' probes need send slots while a batch is in
	// flight. SendSlots bounds the probes and answers in flight per port.
	// At ten thousand peers a batch window holds 2,500 probes: batches of
	// 256 took ten wakeups a window, of 1,024 three (issue #29).
	RecvSlots, SendSlots int
	// MaxAH bounds the cached address handles per port; default 4096.
	MaxAH int
	// Flows is how many probe QPs each port has ([probe] flows), 1 to
	// ud.MaxFlows; default 1. On RoCE v2 each leaves with a UDP source
	// port of its own, so it takes one of the fabric's equal-cost paths;
	// flow 0 also answers other nodes' probes. Each flow has RecvSlots
	// receives of its own; the send slots are shared.
	Flows int
	// TrafficClass of probes and answers (RoCE v2: the IP ToS byte,
	// DSCP<<2 | ECN); default 0. TrafficClassFor, if set, overrides it
	// per port.
	TrafficClass uint8
	// TrafficClassFor, if set, gives the traffic class of a port's probes
	// and answers. It is asked when the port opens and at every rescan
	// (Rescan, Config.Rescan): when the answer changes, the port's
	// address handles are replaced (the QP, its QPN and its admissions
	// stay), so the next probe and answer carry the new class. It must be
	// safe to call from any goroutine and must not block.
	TrafficClassFor func(dev string, port int) uint8
	// Spin is how long to poll before sleeping on the completion channel;
	// default 0 (never spin: the CPU budget matters more than the
	// microseconds a wakeup adds to RTT).
	Spin time.Duration
	// OnReply is called with every reply from the port's completion
	// goroutine; it must not block.
	OnReply func(ud.Reply)
	// OnPorts is called after the set of probing ports changed.
	OnPorts func([]ud.LocalPort, error)
	Logger  *slog.Logger
}

// An Engine owns the probe QPs of every ACTIVE port.
type Engine struct {
	cfg   Config
	qkey  uint32
	epoch time.Time
	stats ud.Stats
	kick  chan struct{}
	auth  atomic.Pointer[authConf] // nil: authentication off

	mu          sync.Mutex
	ports       map[string]*udPort
	unavailable error
	released    map[string]bool // devices ReleaseDevice asked Run to close
}

// maxPortSlots bounds a port's receive and send slots together (its buffer
// and its completion queue): 1 MiB of 128-byte slots.
const maxPortSlots = 8192

// MaxBatch returns how many probes one ProbeBatch of a port may carry so
// that their replies find receives posted and the port keeps send slots
// for its answers to other nodes: half the send slots, and no more than
// one flow's receive slots (a batch to peers that admit only flow 0
// brings every reply to flow 0; spread over the flows, each has room to
// spare). The manager sends no larger batches (probe's batchLimit):
// 1,024 with the default slots for up to 4 flows, 384 with 16.
func (e *Engine) MaxBatch() int {
	return max(1, min(e.cfg.SendSlots/2, e.cfg.RecvSlots))
}

// New returns an Engine; Run starts it.
func New(cfg Config) (*Engine, error) {
	if cfg.Rescan == 0 {
		cfg.Rescan = 5 * time.Second
	}
	if cfg.SendSlots == 0 {
		cfg.SendSlots = 2048
	}
	if cfg.Flows == 0 {
		cfg.Flows = 1
	}
	if cfg.Flows < 1 || cfg.Flows > ud.MaxFlows {
		return nil, fmt.Errorf("peer probe: %d flows: from 1 to %d", cfg.Flows, ud.MaxFlows)
	}
	if cfg.RecvSlots == 0 {
		// 2048 for one flow, fewer for more so that the port stays
		// within maxPortSlots: a batch's probes are spread over the
		// flows, so each flow's replies to it are fewer too.
		cfg.RecvSlots = min(2048, (maxPortSlots-cfg.SendSlots)/cfg.Flows)
	}
	if cfg.RecvSlots < 1 || cfg.SendSlots < 1 || cfg.Flows*cfg.RecvSlots+cfg.SendSlots > maxPortSlots {
		return nil, fmt.Errorf("peer probe: %d flows of %d receive slots and %d send slots: each must be at least 1, together at most %d", cfg.Flows, cfg.RecvSlots, cfg.SendSlots, maxPortSlots)
	}
	if cfg.MaxAH == 0 {
		cfg.MaxAH = 4096
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	qkey := cfg.QKey
	for qkey == 0 || qkey&0x80000000 != 0 {
		// The high bit marks a controlled qkey that only privileged QPs
		// may send with; stay below it.
		var b [4]byte
		rand.Read(b[:])
		qkey = binary.BigEndian.Uint32(b[:]) &^ 0x80000000
	}
	return &Engine{cfg: cfg, qkey: qkey, epoch: time.Now(), ports: map[string]*udPort{}, kick: make(chan struct{}, 1)}, nil
}

// stamp is the engine's clock for payload times: monotonic nanoseconds
// since New at t (a time.Now reading), never 0.
func (e *Engine) stamp(t time.Time) int64 { return int64(t.Sub(e.epoch)) + 1 }

func (e *Engine) count(c *uint64) { atomic.AddUint64(c, 1) }

// Stats returns the counters.
func (e *Engine) Stats() ud.Stats {
	return ud.Stats{
		Sent: atomic.LoadUint64(&e.stats.Sent), Replies: atomic.LoadUint64(&e.stats.Replies),
		Answered: atomic.LoadUint64(&e.stats.Answered), Malformed: atomic.LoadUint64(&e.stats.Malformed),
		Unadmitted: atomic.LoadUint64(&e.stats.Unadmitted), ReplyErrors: atomic.LoadUint64(&e.stats.ReplyErrors),
		SendErrors: atomic.LoadUint64(&e.stats.SendErrors), Rebuilds: atomic.LoadUint64(&e.stats.Rebuilds),
		Unsolicited: atomic.LoadUint64(&e.stats.Unsolicited), BadTag: atomic.LoadUint64(&e.stats.BadTag),
		Untagged: atomic.LoadUint64(&e.stats.Untagged),
	}
}

// authConf is one setting of SetAuth. It is never modified once stored:
// ports compare pointers to notice a change.
type authConf struct {
	key     []byte
	require bool
	// also are the other keys of a rotation: a tag that verifies under
	// one of them is good too; key alone tags.
	also [][]byte
}

// SetAuth sets the fleet key that tags probe payloads (version 2, see
// PayloadTag) and whether tags are required. With a key, version-2 probes
// and replies are checked and those with a wrong tag dropped (Stats.BadTag);
// version-1 ones are still answered and accepted unless require is set,
// when they are dropped (Stats.Untagged) and ProbeBatch refuses to send
// them. A nil or empty key turns authentication off, whatever require says:
// version-2 packets are then dropped as unverifiable. The key is copied. It
// is safe to call at any time; each port applies the change from its next
// batch of probes or completions.
func (e *Engine) SetAuth(key []byte, require bool) {
	if len(key) == 0 {
		e.auth.Store(nil)
		return
	}
	e.auth.Store(&authConf{key: bytes.Clone(key), require: require})
}

// SetAuthKeys is SetAuth for a key rotation ([probe] key_file with several
// keys): keys[0] tags, and a tag that verifies under any of keys is good.
// No keys (or an empty first one) turns authentication off.
func (e *Engine) SetAuthKeys(keys [][]byte, require bool) {
	if len(keys) == 0 || len(keys[0]) == 0 {
		e.auth.Store(nil)
		return
	}
	a := &authConf{key: bytes.Clone(keys[0]), require: require}
	for _, k := range keys[1:] {
		if len(k) > 0 {
			a.also = append(a.also, bytes.Clone(k))
		}
	}
	e.auth.Store(a)
}

// Ports returns the probing ports, sorted by key, or the reason there are
// none (wrapping verbs.ErrUnavailable when verbs cannot be used here).
func (e *Engine) Ports() ([]ud.LocalPort, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.portsLocked(), e.unavailable
}

func (e *Engine) portsLocked() []ud.LocalPort {
	out := make([]ud.LocalPort, 0, len(e.ports))
	for _, p := range e.ports {
		out = append(out, p.local())
	}
	slices.SortFunc(out, func(a, b ud.LocalPort) int {
		if a.Key < b.Key {
			return -1
		}
		if a.Key > b.Key {
			return 1
		}
		return 0
	})
	return out
}

func (e *Engine) port(key string) (*udPort, error) {
	e.mu.Lock()
	p := e.ports[key]
	e.mu.Unlock()
	if p == nil {
		return nil, fmt.Errorf("peer probe: port %s: %w", key, ErrNoPort)
	}
	return p, nil
}

// ProbeBatch sends every target's probe from the local port as one chained
// post (one doorbell per verbs.MaxSendList probes) and returns how many
// went; each target that did not go says why in its Err. It does not wait:
// the answers arrive through Config.OnReply, and a probe without one is
// the caller's to time out.
func (e *Engine) ProbeBatch(local string, ts []ud.Target) int {
	p, err := e.port(local)
	if err != nil {
		for i := range ts {
			ts[i].Err = err
		}
		return 0
	}
	p.mu.Lock()
	auth := p.authLocked()
	out := p.probeOut[:0]
	for i := range ts {
		if o, ok := p.probeOutgoing(&ts[i], auth); ok {
			out = append(out, o)
		}
	}
	n := p.post(out)
	clear(out) // drop the pointers into ts
	p.probeOut = out[:0]
	p.mu.Unlock()
	atomic.AddUint64(&e.stats.Sent, uint64(n))
	return n
}

// probeOutgoing turns t into the probe to post, in the version t asks for,
// or reports false with t.Err set when the authentication settings auth
// (from authLocked) do not allow it. Called with p.mu held.
func (p *udPort) probeOutgoing(t *ud.Target, auth *authConf) (outgoing, bool) {
	t.Err = nil
	pl := Payload{Version: PayloadV1, Kind: KindProbe, Seq: t.Seq, GID: p.gid.GID}
	switch {
	case t.Auth && auth == nil:
		t.Err = fmt.Errorf("peer probe: %s: %w", p.key, ErrNoKey)
		return outgoing{}, false
	case t.Auth:
		// Version 2 carries no GID: the responder reads it from the GRH.
		pl = Payload{Version: PayloadV2, Kind: KindProbe, Seq: t.Seq}
	case auth != nil && auth.require:
		t.Err = fmt.Errorf("peer probe: %s: %w", p.key, ErrAuthRequired)
		return outgoing{}, false
	}
	if int(t.Flow) >= len(p.flows) && p.flows != nil {
		t.Err = fmt.Errorf("peer probe: %s has %d flows, not %d", p.key, len(p.flows), t.Flow+1)
		return outgoing{}, false
	}
	return outgoing{dst: t.Dst, pl: pl, flow: t.Flow, err: &t.Err}, true
}

// Admit lets the local port answer probes from src (its GID and QPN as
// the packets' GRH and the adapter will report them) until the time until.
// The daemon calls it when src's node asked the control endpoint for this
// port; from is the address that query came from. Probes from anyone else
// are dropped and counted.
//
// Admissions are bounded per port: admitPerSource (32) per from address,
// where a new one replaces that address's oldest (unconfirmed ones first),
// and 4*MaxAH in all, where a new one replaces the oldest unconfirmed one
// of any address. An admission is confirmed by the first probe that passes
// every check (a valid tag when one is required). So one address, however
// many queries it sends (or spoofs), cannot crowd out another address's
// admission nor a confirmed one; Admit fails only when the table is full
// of live confirmed admissions.
//
// authenticated says the query carried a valid fleet-key tag. Only such a
// query changes the qkey or LID of a live admission at once; without one,
// other parameters, or another address's, are a candidate that is answered
// beside the admitted ones (admit.go), and nothing changes an admission a
// tagged query made.
func (e *Engine) Admit(local string, src ud.Endpoint, from netip.Addr, authenticated bool, until time.Time) error {
	p, err := e.port(local)
	if err != nil {
		return err
	}
	p.admMu.Lock()
	defer p.admMu.Unlock()
	if err := p.admitted.admit(srcKey{gid: src.GID, qpn: src.QPN}, from, src.QKey, src.LID, authenticated, until, time.Now()); err != nil {
		return fmt.Errorf("peer probe: %s: %w", local, err)
	}
	return nil
}

// trafficClass is the class dev's port sends with.
func (e *Engine) trafficClass(dev string, port int) uint8 {
	if e.cfg.TrafficClassFor != nil {
		return e.cfg.TrafficClassFor(dev, port)
	}
	return e.cfg.TrafficClass
}

// rebuild asks Run to rebuild broken ports now.
func (e *Engine) rebuild() {
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// Rescan makes Run read devices and ports now (on an infiniband uevent).
func (e *Engine) Rescan() { e.rebuild() }

// ReleaseDevice makes Run close name's probe ports and device context now,
// for a device that is being removed (the kernel's unregistration of an rxe
// device waits until every user closed it): the daemon calls it when any
// part of rdmad or the kernel reports the removal, and the engine's own
// reader of the device's async events on DEVICE_FATAL. Run opens the device
// again when it is listed again. It never blocks.
func (e *Engine) ReleaseDevice(name string) {
	e.mu.Lock()
	if e.released == nil {
		e.released = map[string]bool{}
	}
	e.released[name] = true
	e.mu.Unlock()
	e.rebuild()
}

// watchDevice reads vctx's asynchronous events until vctx is closed (which
// ends the wait); DEVICE_FATAL releases the device.
func (e *Engine) watchDevice(vctx *verbs.Context) {
	vctx.WatchAsyncEvents(context.Background(), func(ev verbs.AsyncEvent) {
		switch ev.Type {
		case verbs.EventDeviceFatal:
			e.cfg.Logger.Warn("peer probe: device reported DEVICE_FATAL; closing it", "device", ev.Device)
			e.ReleaseDevice(ev.Device)
		case verbs.EventPortActive, verbs.EventPortErr, verbs.EventGIDChange:
			// A port that went down or came back is scanned now, not
			// at the next rescan: its probe QPs close or open (and the
			// peers learn the new ones) within the event's latency,
			// which a link's return (the partition drill) waits on.
			// GID_CHANGE too: rxe's port is ACTIVE again before the
			// kernel has put its addresses' GIDs back, so the scan on
			// PORT_ACTIVE can find no usable GID, and the port would
			// wait for the next rescan (5 s) without this event.
			e.rebuild()
		}
	})
}

// A device is an open device and the reader of its async events
// (watchDevice), which ends when the context is closed.
type device struct {
	ctx     *verbs.Context
	watcher sync.WaitGroup
}

func openDevice(e *Engine, name string) (*device, error) {
	vctx, err := verbs.Open(name)
	if err != nil {
		return nil, err
	}
	d := &device{ctx: vctx}
	d.watcher.Go(func() { e.watchDevice(vctx) })
	return d, nil
}

// close closes the context, which ends the watcher's wait, and waits for
// the watcher to return.
func (d *device) close() {
	d.ctx.Close()
	d.watcher.Wait()
}

// Run opens a probe QP on every ACTIVE port, follows devices and port
// states every Config.Rescan, rebuilds ports whose QP failed, and closes
// everything when ctx is done. Verbs being unavailable is not an error
// here: Ports reports it, and Run keeps looking.
func (e *Engine) Run(ctx context.Context) error {
	devs := map[string]*device{}
	defer func() {
		e.mu.Lock()
		ports := e.ports
		e.ports = map[string]*udPort{}
		e.mu.Unlock()
		for _, p := range ports {
			p.close()
		}
		for _, d := range devs {
			d.close()
		}
	}()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-e.kick:
		}
		e.scan(devs)
		t.Reset(e.cfg.Rescan)
	}
}

func (e *Engine) scan(devs map[string]*device) {
	list, err := verbs.Devices()
	changed := false
	setUnavail := func(err error) {
		e.mu.Lock()
		if (e.unavailable == nil) != (err == nil) || (err != nil && e.unavailable.Error() != err.Error()) {
			changed = true
		}
		e.unavailable = err
		e.mu.Unlock()
	}
	present := map[string]bool{}
	for _, di := range list {
		if len(e.cfg.Devices) == 0 || slices.Contains(e.cfg.Devices, di.Name) {
			present[di.Name] = true
		}
	}
	// Close what is gone: a device removed (rdma link del) or broken ports.
	e.mu.Lock()
	released := e.released
	e.released = nil
	var drop []*udPort
	for k, p := range e.ports {
		// Not waiting for a port whose post has not returned (it holds
		// p.mu): that would hold e.mu, and with it every other port's
		// ProbeBatch, for as long. Such a port is looked at again at the
		// next scan.
		var broken error
		if p.mu.TryLock() {
			broken = p.broken
			p.mu.Unlock()
		}
		d := devs[p.dev]
		if !present[p.dev] || broken != nil || d == nil || released[p.dev] || !d.ctx.Alive() {
			if broken != nil {
				e.cfg.Logger.Warn("rebuilding probe port", "port", k, "err", broken)
				e.count(&e.stats.Rebuilds)
			}
			drop = append(drop, p)
			delete(e.ports, k)
			changed = true
		}
	}
	keep := make([]*udPort, 0, len(e.ports))
	for _, p := range e.ports {
		keep = append(keep, p)
	}
	e.mu.Unlock()
	for _, p := range drop {
		p.close()
	}
	for _, p := range keep {
		if tc := e.trafficClass(p.dev, p.num); p.setTrafficClass(tc, time.Now()) {
			e.cfg.Logger.Info("probe traffic class changed", "port", p.key, "traffic_class", tc)
			changed = true
		}
	}
	for name, d := range devs {
		if !present[name] || released[name] || !d.ctx.Alive() {
			d.close()
			delete(devs, name)
		}
	}
	if err != nil {
		setUnavail(err)
		e.notifyPorts(changed)
		return
	}
	if len(present) == 0 {
		setUnavail(&verbs.UnavailableError{Reason: "no RDMA device to probe from; load the NIC's RDMA driver or add a Soft-RoCE link (rdma link add rxe0 type rxe netdev eth0)"})
		e.notifyPorts(changed)
		return
	}
	var lastErr error
	for name := range present {
		d := devs[name]
		if d == nil {
			var err error
			if d, err = openDevice(e, name); err != nil {
				lastErr = err
				continue
			}
			devs[name] = d
		}
		attr, err := d.ctx.QueryDevice()
		if err != nil {
			lastErr = err
			continue
		}
		for num := 1; num <= attr.PhysPortCount; num++ {
			key := fmt.Sprintf("%s/%d", name, num)
			pa, err := d.ctx.QueryPort(num)
			e.mu.Lock()
			p := e.ports[key]
			e.mu.Unlock()
			active := err == nil && pa.State == verbs.PortActive
			switch {
			case active && p == nil:
				np, err := openPort(e, d.ctx, num, pa, attr.VendorID)
				if err != nil {
					lastErr = err
					e.cfg.Logger.Warn("cannot open probe port", "port", key, "err", err)
					continue
				}
				np.start()
				e.mu.Lock()
				e.ports[key] = np
				e.mu.Unlock()
				changed = true
			case !active && p != nil:
				e.mu.Lock()
				delete(e.ports, key)
				e.mu.Unlock()
				p.close()
				changed = true
			}
		}
	}
	e.mu.Lock()
	n := len(e.ports)
	e.mu.Unlock()
	switch {
	case n > 0:
		setUnavail(nil)
	case lastErr != nil:
		setUnavail(fmt.Errorf("peer probe: no port can probe: %w", lastErr))
	default:
		setUnavail(&verbs.UnavailableError{Reason: "no ACTIVE RDMA port to probe from; check the link (rdma link show)"})
	}
	e.notifyPorts(changed)
}

func (e *Engine) notifyPorts(changed bool) {
	if !changed || e.cfg.OnPorts == nil {
		return
	}
	ports, err := e.Ports()
	e.cfg.OnPorts(ports, err)
}
