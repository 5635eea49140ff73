// Package peer probes other nodes over unreliable datagram (UD) queue pairs,
// in the style of R-Pingmesh: on every ACTIVE port of every RDMA device one
// UD QP both sends probes and answers the probes of other nodes. A probe
// carries a sequence number and the prober's send time; the responder
// echoes it with its own receive and send times, so the prober can subtract
// the responder's host delay from the round trip.
//
// The package knows nothing of peers, schedules or health: the daemon
// (daemon/peers) decides whom to probe and when, admits the sources the
// responder answers (learned through its control endpoint), and turns
// replies and timeouts into peer states.
//
// Memory: each port has its own small buffer (send and receive slots of
// 128 bytes), registered for local writes only. UD needs no rkeys, and none
// of the MR pool's memory is reachable from here.
package peer

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmad/rdmad/verbs"
)

// ErrBusy is returned by Probe when every send slot of the port is in
// flight: the caller counts the probe as not sent rather than queueing it.
var ErrBusy = errors.New("all probe send slots are in flight")

// ErrNoPort is returned by Probe and Admit for a port key that is not (or
// no longer) probing.
var ErrNoPort = errors.New("no such probing port")

// An Endpoint is a UD QP on the fabric: where probes go.
type Endpoint struct {
	GID  verbs.GID
	QPN  uint32
	QKey uint32
	LID  uint16 // InfiniBand only
}

// A LocalPort is a port this engine probes from and answers on.
type LocalPort struct {
	Key       string // "rxe0/1"
	Device    string
	Port      int
	GIDIndex  int
	LinkLayer string
	Endpoint
}

// A Reply is an answered probe.
type Reply struct {
	Local string   // the port key that sent the probe
	From  Endpoint // the responder's GID (from the payload) and QPN (from the adapter)
	Seq   uint64
	// RTT is the prober's time from just before posting the probe to
	// polling the reply's completion. It includes the responder's host
	// delay; subtract ResponderDelay for the network's share.
	RTT            time.Duration
	ResponderDelay time.Duration
	At             time.Time
}

// Stats are the engine's counters since New.
type Stats struct {
	Sent        uint64 `json:"sent"`         // probes posted
	Replies     uint64 `json:"replies"`      // well-formed replies received
	Answered    uint64 `json:"answered"`     // probes of other nodes answered
	Malformed   uint64 `json:"malformed"`    // received payloads dropped as malformed
	Unadmitted  uint64 `json:"unadmitted"`   // probes dropped: sender not admitted by the control endpoint
	ReplyErrors uint64 `json:"reply_errors"` // answers that could not be posted
	SendErrors  uint64 `json:"send_errors"`  // send completions with an error status
	Rebuilds    uint64 `json:"rebuilds"`     // ports rebuilt after their QP failed
}

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
	// RecvSlots and SendSlots size each port's queues; defaults 256 and 256.
	// SendSlots bounds the probes and answers in flight per port.
	RecvSlots, SendSlots int
	// MaxAH bounds the cached address handles per port; default 4096.
	MaxAH int
	// TrafficClass of probes (RoCE: DSCP<<2 | ECN); default 0.
	TrafficClass uint8
	// Spin is how long to poll before sleeping on the completion channel;
	// default 0 (never spin: the CPU budget matters more than the
	// microseconds a wakeup adds to RTT).
	Spin time.Duration
	// OnReply is called with every reply from the port's completion
	// goroutine; it must not block.
	OnReply func(Reply)
	// OnPorts is called after the set of probing ports changed.
	OnPorts func([]LocalPort, error)
	Logger  *slog.Logger
}

// An Engine owns the probe QPs of every ACTIVE port.
type Engine struct {
	cfg   Config
	qkey  uint32
	epoch time.Time
	stats Stats
	kick  chan struct{}

	mu          sync.Mutex
	ports       map[string]*udPort
	unavailable error
}

// New returns an Engine; Run starts it.
func New(cfg Config) (*Engine, error) {
	if cfg.Rescan == 0 {
		cfg.Rescan = 5 * time.Second
	}
	if cfg.RecvSlots == 0 {
		cfg.RecvSlots = 256
	}
	if cfg.SendSlots == 0 {
		cfg.SendSlots = 256
	}
	if cfg.RecvSlots < 1 || cfg.SendSlots < 1 || cfg.RecvSlots+cfg.SendSlots > 8192 {
		return nil, fmt.Errorf("peer probe: %d receive and %d send slots: each must be at least 1, together at most 8192", cfg.RecvSlots, cfg.SendSlots)
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
func (e *Engine) Stats() Stats {
	return Stats{
		Sent: atomic.LoadUint64(&e.stats.Sent), Replies: atomic.LoadUint64(&e.stats.Replies),
		Answered: atomic.LoadUint64(&e.stats.Answered), Malformed: atomic.LoadUint64(&e.stats.Malformed),
		Unadmitted: atomic.LoadUint64(&e.stats.Unadmitted), ReplyErrors: atomic.LoadUint64(&e.stats.ReplyErrors),
		SendErrors: atomic.LoadUint64(&e.stats.SendErrors), Rebuilds: atomic.LoadUint64(&e.stats.Rebuilds),
	}
}

// Ports returns the probing ports, sorted by key, or the reason there are
// none (wrapping verbs.ErrUnavailable when verbs cannot be used here).
func (e *Engine) Ports() ([]LocalPort, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.portsLocked(), e.unavailable
}

func (e *Engine) portsLocked() []LocalPort {
	out := make([]LocalPort, 0, len(e.ports))
	for _, p := range e.ports {
		out = append(out, p.local())
	}
	slices.SortFunc(out, func(a, b LocalPort) int {
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

// A Target is one probe of a batch: where it goes, its sequence number,
// and, after ProbeBatch, why it was not sent (nil when it was).
type Target struct {
	Dst Endpoint
	Seq uint64
	Err error
}

// ProbeBatch sends every target's probe from the local port as one chained
// post (one doorbell per verbs.MaxSendList probes) and returns how many
// went; each target that did not go says why in its Err. It does not wait:
// the answers arrive through Config.OnReply, and a probe without one is
// the caller's to time out.
func (e *Engine) ProbeBatch(local string, ts []Target) int {
	p, err := e.port(local)
	if err != nil {
		for i := range ts {
			ts[i].Err = err
		}
		return 0
	}
	p.mu.Lock()
	out := p.probeOut[:0]
	for i := range ts {
		ts[i].Err = nil
		out = append(out, outgoing{dst: ts[i].Dst, pl: Payload{Kind: KindProbe, Seq: ts[i].Seq, GID: p.gid.GID}, err: &ts[i].Err})
	}
	n := p.post(out)
	clear(out) // drop the pointers into ts
	p.probeOut = out[:0]
	p.mu.Unlock()
	atomic.AddUint64(&e.stats.Sent, uint64(n))
	return n
}

// Admit lets the local port answer probes from src until the time until.
// The daemon calls it when src's node asked the control endpoint for this
// port; probes from anyone else are dropped and counted.
func (e *Engine) Admit(local string, src Endpoint, until time.Time) error {
	p, err := e.port(local)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	k := srcKey{gid: src.GID, qpn: src.QPN}
	if _, ok := p.admitted[k]; !ok && len(p.admitted) >= 4*p.e.cfg.MaxAH {
		// Bounded: drop expired admissions first, then refuse.
		now := time.Now()
		for k, a := range p.admitted {
			if now.After(a.until) {
				delete(p.admitted, k)
			}
		}
		if len(p.admitted) >= 4*p.e.cfg.MaxAH {
			return fmt.Errorf("peer probe: %s: %d admitted probers; too many", local, len(p.admitted))
		}
	}
	p.admitted[k] = admission{qkey: src.QKey, lid: src.LID, until: until}
	return nil
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

type device struct {
	ctx *verbs.Context
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
			d.ctx.Close()
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
	var drop []*udPort
	for k, p := range e.ports {
		p.mu.Lock()
		broken := p.broken
		p.mu.Unlock()
		d := devs[p.dev]
		if !present[p.dev] || broken != nil || d == nil || !d.ctx.Alive() {
			if broken != nil {
				e.cfg.Logger.Warn("rebuilding probe port", "port", k, "err", broken)
				e.count(&e.stats.Rebuilds)
			}
			drop = append(drop, p)
			delete(e.ports, k)
			changed = true
		}
	}
	e.mu.Unlock()
	for _, p := range drop {
		p.close()
	}
	for name, d := range devs {
		if !present[name] || !d.ctx.Alive() {
			d.ctx.Close()
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
			vctx, err := verbs.Open(name)
			if err != nil {
				lastErr = err
				continue
			}
			d = &device{ctx: vctx}
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
				np, err := openPort(e, d.ctx, num, pa)
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
