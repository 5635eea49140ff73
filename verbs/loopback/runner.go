// Package loopback runs loopback probes: on every ACTIVE port of every RDMA
// device, a pair of RC queue pairs connected to each other through the port
// moves a small, verified payload by RDMA WRITE, RDMA READ and SEND/RECV
// every interval, and records round-trip latencies per operation.
//
// A probe's memory is one page of its own, registered for the probe only:
// it is separate from the MR pool and exposes nothing else.
package loopback

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rdmad/rdmad/verbs"
)

// Config configures a Runner. Zero values take the defaults.
type Config struct {
	// Interval between probe rounds on each port; default 1s
	// (config [probe] loopback_interval).
	Interval time.Duration
	// Timeout for one round (WRITE, READ and SEND/RECV) to complete;
	// default 500ms, at most Interval.
	Timeout time.Duration
	// Rescan is how long after a device's probing ended (the device went
	// away or failed) the device list is read again to start it anew;
	// default 5s. Devices that appear are found when Rescan is called
	// (the daemon does on uevents and at its periodic resync).
	Rescan time.Duration
	// Window is the number of samples per operation that percentiles are
	// computed over; default 300 (five minutes at 1 Hz).
	Window int
	// Payload is the bytes moved per operation; default 64, at most 512.
	Payload int
	// Spin is how long to poll the CQ for a completion before sleeping on
	// the completion channel. Polling stops at the completion, so on a
	// healthy port it costs the RTT (microseconds on hardware); sleeping
	// costs a wakeup through the poller, which adds tens of microseconds to
	// the measured RTT and, in an emulated VM, more CPU than the spin.
	// At most three Spins of CPU per round; default 1ms; negative disables
	// spinning. Used in PollEvent mode.
	Spin time.Duration
	// Poll is how the probe waits for a completion (config [probe] poll):
	// PollEvent (the default) polls for up to Spin, then sleeps on the
	// completion channel; PollBusy polls until the completion arrives, for
	// up to BusySpinLimit per wait, and only then sleeps.
	Poll PollMode
	// Devices limits probing to these devices; empty probes all.
	Devices []string
	// TrafficClass, if set, gives the GRH traffic class (RoCE v2: the IP
	// ToS byte, DSCP<<2 | ECN) of a port's probe QPs; nil uses 0. It is
	// asked before every round: when the answer changes, the port's QPs
	// are rebuilt with the new class (an address vector is fixed at RTR).
	// It must be safe to call from any goroutine and must not block.
	TrafficClass func(dev string, port int) uint8
	// OnResult, if set, is called with each port's new result from the
	// probing goroutine; it must not block.
	OnResult func(PortResult)
	// OnAsyncEvent, if set, is called with each asynchronous event of a
	// probed device (port active or down, GID table change, device fatal),
	// so the daemon can read the device again; it must not block.
	OnAsyncEvent func(verbs.AsyncEvent)
	// Logger; default slog.Default().
	Logger *slog.Logger
}

func (c *Config) setDefaults() error {
	if c.Interval == 0 {
		c.Interval = time.Second
	}
	if c.Interval < 0 {
		return fmt.Errorf("probe: interval %v must be positive", c.Interval)
	}
	if c.Timeout == 0 {
		c.Timeout = 500 * time.Millisecond
	}
	c.Timeout = min(c.Timeout, c.Interval)
	if c.Rescan == 0 {
		c.Rescan = 5 * time.Second
	}
	if c.Window == 0 {
		c.Window = 300
	}
	if c.Payload == 0 {
		c.Payload = 64
	}
	if c.Payload < 8 || c.Payload > slotSize {
		return fmt.Errorf("probe: payload %d bytes must be between 8 and %d", c.Payload, slotSize)
	}
	if c.Spin == 0 {
		c.Spin = time.Millisecond
	}
	if c.Spin < 0 {
		c.Spin = 0
	}
	switch c.Poll {
	case "":
		c.Poll = PollEvent
	case PollEvent, PollBusy:
	default:
		return fmt.Errorf("probe: poll mode %q: use %q or %q", c.Poll, PollEvent, PollBusy)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// A PollMode is how the loopback probe waits for its completions.
type PollMode string

// Poll modes.
const (
	// PollEvent polls the CQ for up to Config.Spin (1 ms by default),
	// then arms it and sleeps on the completion channel: a completion
	// that takes longer costs a wakeup (tens of microseconds on hardware)
	// in its RTT, and the probe holds a CPU for at most Spin per wait.
	PollEvent PollMode = "event"
	// PollBusy polls the CQ until the completion arrives, for up to
	// BusySpinLimit per wait (then it sleeps on the channel like
	// PollEvent), so no RTT under the limit includes a wakeup. It holds a
	// CPU for as long as each operation takes: the RTT on a healthy port,
	// up to BusySpinLimit per round on a port whose completion is late or
	// lost.
	PollBusy PollMode = "busy"
)

// BusySpinLimit bounds one busy-poll wait (PollBusy). Beyond it a wakeup's
// tens of microseconds are under a thousandth of the RTT, so spinning
// longer would buy no precision and only burn a core on a sick port.
const BusySpinLimit = 100 * time.Millisecond

// A Runner probes every ACTIVE port until its Run's context is done. Read
// results with Snapshot or receive them through Config.OnResult.
type Runner struct {
	cfg Config

	rescan chan struct{} // Rescan's trigger, buffered 1

	mu          sync.Mutex
	ports       map[portKey]*portState
	inject      map[portKey]bool
	unavailable string
	// running holds the cancel function of each device Run probes, for
	// ReleaseDevice.
	running map[string]context.CancelCauseFunc
}

// errReleased is the cause of a device's context that ReleaseDevice ended.
var errReleased = errors.New("released")

// ReleaseDevice closes name's QPs, memory and device context now, for a
// device that is being removed (the kernel's unregistration of an rxe
// device waits until every user closed it): the daemon calls it when any
// part of rdmad or the kernel reports the removal. Its ports are reported
// as device_gone; Run opens the device again when it is listed again. A
// device that is not being probed is left alone. It never blocks.
func (r *Runner) ReleaseDevice(name string) {
	r.mu.Lock()
	cancel := r.running[name]
	r.mu.Unlock()
	if cancel != nil {
		cancel(errReleased)
		r.Rescan()
	}
}

func (r *Runner) setRunning(name string, cancel context.CancelCauseFunc) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.running == nil {
		r.running = map[string]context.CancelCauseFunc{}
	}
	if cancel == nil {
		delete(r.running, name)
	} else {
		r.running[name] = cancel
	}
}

type portKey struct {
	dev  string
	port int
}

// portState is a port's result plus its latency windows, kept across QP
// and device lifetimes. Guarded by Runner.mu.
type portState struct {
	res PortResult
	win [numOps]*window
}

// New returns a Runner for cfg.
func New(cfg Config) (*Runner, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	return &Runner{cfg: cfg, ports: map[portKey]*portState{}, inject: map[portKey]bool{}, rescan: make(chan struct{}, 1)}, nil
}

// Rescan makes Run look for new devices now instead of at the next Rescan
// interval; the daemon calls it on an infiniband uevent. It never blocks.
func (r *Runner) Rescan() {
	select {
	case r.rescan <- struct{}{}:
	default:
	}
}

// uverbsDir lists the uverbs character devices; a change in it is what
// makes a new ibv_get_device_list worthwhile.
const uverbsDir = "/sys/class/infiniband_verbs"

// uverbsNames returns the entries of uverbsDir, or nil if it is missing.
// Reading one sysfs directory costs a few syscalls, ibv_get_device_list
// reads dozens of sysfs files per device; the cheap check runs on every
// rescan tick and the expensive one only when the set changed.
func uverbsNames() []string {
	ents, err := os.ReadDir(uverbsDir)
	if err != nil {
		return nil
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// InjectQPError makes the next round on dev's port move the probe's QP to
// the error state (a real ibv_modify_qp to ERR) before it posts. The round
// fails with ErrorKind qp_error and the QPs are rebuilt, proving the
// recovery path on a live port (rdmactl probe --inject, and the e2e tests).
func (r *Runner) InjectQPError(dev string, port int) {
	r.mu.Lock()
	r.inject[portKey{dev, port}] = true
	r.mu.Unlock()
}

func (r *Runner) takeInject(dev string, port int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := portKey{dev, port}
	v := r.inject[k]
	delete(r.inject, k)
	return v
}

// Snapshot returns a copy of the latest results, sorted by device and port.
func (r *Runner) Snapshot() Snapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := Snapshot{Unavailable: r.unavailable, Ports: make([]PortResult, 0, len(r.ports))}
	for _, ps := range r.ports {
		s.Ports = append(s.Ports, ps.res)
	}
	slices.SortFunc(s.Ports, func(a, b PortResult) int {
		if c := strings.Compare(a.Device, b.Device); c != 0 {
			return c
		}
		return a.Port - b.Port
	})
	return s
}

// update applies fn to a port's state under the lock, stamps and returns
// the result, and hands it to OnResult outside the lock.
func (r *Runner) update(dev string, port int, fn func(*portState)) {
	k := portKey{dev, port}
	r.mu.Lock()
	ps := r.ports[k]
	if ps == nil {
		ps = &portState{res: PortResult{Device: dev, Port: port}}
		for i := range ps.win {
			ps.win[i] = newWindow(r.cfg.Window)
		}
		r.ports[k] = ps
	}
	fn(ps)
	ps.res.UpdatedAt = time.Now()
	res := ps.res
	r.mu.Unlock()
	if r.cfg.OnResult != nil {
		r.cfg.OnResult(res)
	}
}

// markDevice sets every known port of dev to state with err.
func (r *Runner) markDevice(dev string, state State, kind ErrorKind, err error) {
	r.mu.Lock()
	var ports []int
	for k := range r.ports {
		if k.dev == dev {
			ports = append(ports, k.port)
		}
	}
	r.mu.Unlock()
	for _, p := range ports {
		r.update(dev, p, func(ps *portState) {
			ps.res.State = state
			ps.res.ErrorKind = kind
			ps.res.LastError = err.Error()
		})
	}
}

func (r *Runner) wanted(name string) bool {
	return len(r.cfg.Devices) == 0 || slices.Contains(r.cfg.Devices, name)
}

// Run probes until ctx is done and returns ctx.Err(). It owns one goroutine
// per device, each stopped and waited for before Run returns.
func (r *Runner) Run(ctx context.Context) error {
	type devRun struct {
		cancel context.CancelCauseFunc
		done   chan struct{}
	}
	running := map[string]*devRun{}
	defer func() {
		for _, d := range running {
			d.cancel(nil)
		}
		for _, d := range running {
			<-d.done
		}
	}()
	// The rescan timer runs only while a device's run has ended and waits
	// to be started again: devices that appear are the daemon's uevents
	// (Rescan), and its periodic resync (Rescan again) catches what the
	// events missed. An idle node does not wake every Rescan for nothing.
	t := time.NewTimer(r.cfg.Rescan)
	t.Stop()
	defer t.Stop()
	armed := false
	// ended is signalled when a device's run returns; buffered 1.
	ended := make(chan struct{}, 1)
	var seen []string
	first := true
	// reap: look for ended runs (not right after one ended: it is started
	// again at the timer).
	reap := true
	for {
		exited := false
		for name, d := range running {
			if !reap {
				break
			}
			select {
			case <-d.done:
				delete(running, name)
				exited = true
			default:
			}
		}
		reap = true
		names := uverbsNames()
		if !first && !exited && slices.Equal(names, seen) {
			var tick <-chan time.Time
			if armed {
				tick = t.C
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-tick:
				armed = false
			case <-ended:
				// Started again at the next rescan, not at once: a
				// device that fails as it opens is not retried in a
				// loop.
				if !armed {
					t.Reset(r.cfg.Rescan)
					armed = true
				}
				reap = false
			case <-r.rescan:
			}
			continue
		}
		first, seen = false, names
		devs, err := verbs.Devices()
		r.mu.Lock()
		if err != nil {
			r.unavailable = err.Error()
		} else {
			r.unavailable = ""
		}
		r.mu.Unlock()
		for _, d := range devs {
			if !r.wanted(d.Name) || running[d.Name] != nil {
				continue
			}
			dctx, cancel := context.WithCancelCause(ctx)
			dr := &devRun{cancel: cancel, done: make(chan struct{})}
			running[d.Name] = dr
			r.setRunning(d.Name, cancel)
			go func(name string) {
				defer func() {
					select {
					case ended <- struct{}{}:
					default:
					}
				}()
				defer close(dr.done)
				defer r.setRunning(name, nil)
				r.runDevice(dctx, name)
			}(d.Name)
		}
		var tick <-chan time.Time
		if armed {
			tick = t.C
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick:
			armed = false
		case <-ended:
			if !armed {
				t.Reset(r.cfg.Rescan)
				armed = true
			}
			reap = false
		case <-r.rescan:
		}
	}
}

// runDevice probes the ports of one device until ctx is done or the device
// goes away.
func (r *Runner) runDevice(ctx context.Context, name string) {
	log := r.cfg.Logger.With("device", name)
	vctx, err := verbs.Open(name)
	if err != nil {
		r.markDevice(name, StateUnavailable, KindDeviceGone, err)
		return
	}
	dctx, cancel := context.WithCancel(ctx)
	wake := make(chan struct{}, 1)
	var fatal bool
	var fatalMu sync.Mutex
	var wg sync.WaitGroup
	wg.Go(func() {
		vctx.WatchAsyncEvents(dctx, func(ev verbs.AsyncEvent) {
			log.Debug("probe: async event", "event", ev.String())
			if r.cfg.OnAsyncEvent != nil {
				r.cfg.OnAsyncEvent(ev)
			}
			if ev.Type == verbs.EventDeviceFatal {
				fatalMu.Lock()
				fatal = true
				fatalMu.Unlock()
				cancel()
			}
			select {
			case wake <- struct{}{}:
			default:
			}
		})
	})
	sessions := map[int]*session{}
	defer func() {
		for _, s := range sessions {
			s.close()
		}
		cancel()
		wg.Wait()
		vctx.Close()
	}()

	attr, err := vctx.QueryDevice()
	if err != nil {
		r.markDevice(name, StateUnavailable, KindVerbs, err)
		return
	}
	recreate := map[int]bool{}
	var seq uint64
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	full := true
	var aliveAt time.Time
	for {
		fatalMu.Lock()
		f := fatal
		fatalMu.Unlock()
		released := errors.Is(context.Cause(ctx), errReleased)
		gone := false
		// (Nine tenths: a round of the default 1 s ticker may come a
		// little early, and must not skip its look.)
		if now := time.Now(); now.Sub(aliveAt) >= aliveEvery*9/10 {
			aliveAt, gone = now, !vctx.Alive()
		}
		if f || released || gone {
			log.Warn("probe: device removed; closing it", "released", released)
			r.markDevice(name, StateUnavailable, KindDeviceGone, fmt.Errorf("probe: device %s was removed", name))
			return
		}
		seq++
		for port := 1; port <= attr.PhysPortCount; port++ {
			r.probePort(dctx, vctx, port, sessions, recreate, seq, full)
		}
		select {
		case <-dctx.Done():
			if ctx.Err() == nil || errors.Is(context.Cause(ctx), errReleased) {
				continue // DEVICE_FATAL or ReleaseDevice: report at the top of the loop
			}
			return
		case <-t.C:
			full = true
		case <-wake:
			// A port event: look at port states now, move data on the tick.
			full = false
		}
	}
}

// aliveEvery bounds how often a round looks at its device's sysfs node
// (verbs.Context.Alive, a stat): every round at the default interval, once
// a second at shorter ones, where a stat per round was a seventh of rdmad's
// CPU in the test bed. A removal is told at once anyway by the uverbs
// node's uevent (the daemon releases the device) or DEVICE_FATAL.
const aliveEvery = time.Second

// probePort runs one round on port, or only refreshes its state when full
// is false.
func (r *Runner) probePort(ctx context.Context, vctx *verbs.Context, port int, sessions map[int]*session, recreate map[int]bool, seq uint64, full bool) {
	dev := vctx.Name()
	pa, err := vctx.QueryPort(port)
	if err != nil {
		if s := sessions[port]; s != nil {
			s.close()
			delete(sessions, port)
		}
		r.update(dev, port, func(ps *portState) {
			ps.res.State, ps.res.ErrorKind, ps.res.LastError = StateFailed, KindVerbs, err.Error()
		})
		return
	}
	if pa.State != verbs.PortActive {
		// QPs on a port that is not ACTIVE cannot move data; rebuild them
		// when the port returns.
		if s := sessions[port]; s != nil {
			s.close()
			delete(sessions, port)
		}
		r.update(dev, port, func(ps *portState) {
			ps.res.State, ps.res.PortState = StatePaused, pa.State.String()
			ps.res.ErrorKind, ps.res.LastError = "", fmt.Sprintf("port %d is %s; probing resumes when it is ACTIVE", port, pa.State)
		})
		return
	}
	if !full {
		return
	}
	tclass := r.trafficClass(dev, port)
	s := sessions[port]
	if s != nil && s.tclass != tclass {
		r.cfg.Logger.Info("probe: traffic class changed; rebuilding the port's QPs", "device", dev, "port", port,
			"from", s.tclass, "to", tclass)
		s.close()
		delete(sessions, port)
		s = nil
	}
	if s == nil {
		s, err = newSession(vctx, port, pa, tclass, r.cfg)
		if err != nil {
			r.update(dev, port, func(ps *portState) {
				ps.res.State, ps.res.PortState = StateFailed, pa.State.String()
				ps.res.Rounds++
				ps.res.Failures++
				ps.res.ErrorKind, ps.res.LastError = KindSetup, err.Error()
			})
			return
		}
		sessions[port] = s
		if recreate[port] {
			delete(recreate, port)
			r.update(dev, port, func(ps *portState) { ps.res.QPRecreated++ })
		}
	}
	if r.takeInject(dev, port) {
		if err := s.a.SetState(verbs.QPStateErr); err != nil {
			r.cfg.Logger.Warn("probe: inject QP error", "device", dev, "port", port, "err", err)
		}
	}
	rtts, failedOp, err := s.round(ctx, seq)
	if err != nil && ctx.Err() != nil {
		return // stopping or device fatal: not a probe failure
	}
	kind := ErrorKind("")
	if err != nil {
		kind = s.classify(err)
		// Whatever failed, the QPs may hold outstanding or flushed work:
		// rebuild them rather than reason about their queues.
		s.close()
		delete(sessions, port)
		recreate[port] = true
	}
	r.update(dev, port, func(ps *portState) {
		ps.res.PortState = pa.State.String()
		ps.res.GID, ps.res.GIDIndex, ps.res.GIDType = s.gid.GID.String(), s.gid.Index, s.gid.Type.String()
		ps.res.TrafficClass = s.tclass
		ps.res.Poll = r.cfg.Poll
		ps.res.Rounds++
		stats := [numOps]*OpStats{&ps.res.Write, &ps.res.Read, &ps.res.Send, &ps.res.Warmup}
		for op := range numOps {
			if rtts[op] > 0 {
				ps.win[op].add(rtts[op])
				st := stats[op]
				st.LastRTT = rtts[op]
				st.Count++
				st.RTTHist.Observe(rtts[op])
				st.P50, st.P99, st.Max = ps.win[op].quantiles()
			}
		}
		if err != nil {
			stats[failedOp].Errors++
			ps.res.State, ps.res.Failures = StateFailed, ps.res.Failures+1
			ps.res.ErrorKind, ps.res.LastError = kind, err.Error()
			return
		}
		ps.res.State, ps.res.ErrorKind, ps.res.LastError = StateOK, "", ""
	})
}

// trafficClass is the class of dev's port's probe QPs.
func (r *Runner) trafficClass(dev string, port int) uint8 {
	if r.cfg.TrafficClass == nil {
		return 0
	}
	return r.cfg.TrafficClass(dev, port)
}

// classify names the kind of a round's failure, looking at the QPs' states
// because a QP in ERR explains most failures.
func (s *session) classify(err error) ErrorKind {
	for _, qp := range []*verbs.QP{s.a, s.b} {
		if st, qerr := qp.State(); qerr == nil && st == verbs.QPStateErr {
			return KindQPError
		}
	}
	var wce *verbs.WCError
	var mm *mismatchError
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return KindTimeout
	case errors.As(err, &mm):
		return KindDataMismatch
	case errors.As(err, &wce):
		return KindCompletion
	}
	return KindVerbs
}
