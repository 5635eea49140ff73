//go:build linux && verbsfake

package verbs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// This file and fake_*.go are the fake NIC, the build with -tags verbsfake
// (with or without cgo): the verbs method set over an in-memory fabric, so
// the data plane (loopback prober, peer engine, MR pool, bandwidth test)
// runs on a CPU under -race. It models what those callers depend on:
//
//   - devices and ports with GID tables and states, listed by Devices while
//     present; a removed device is no longer listed and its contexts stop
//     being Alive, but keep working until closed (rxe, which does not
//     disassociate);
//   - memory regions over the caller's real buffer, whose keys, bounds and
//     access flags are checked on every access;
//   - QPs with the RESET/INIT/RTR/RTS/ERR state machine of ibv_modify_qp as
//     rdmad drives it; RC WRITE, READ and SEND copy bytes between the two
//     QPs' regions and complete on both sides' CQs; a SEND without a posted
//     receive waits for one (rdmad's RNR retry is infinite); a peer that
//     cannot be reached is retried every ACK timeout and fails with
//     "transport retry counter exceeded" after the retry count, as hardware
//     does; an error completion moves the QP to ERR and flushes its queues;
//   - UD sends delivered to the QP the address handle's GID and the
//     request's QPN name, with the right qkey, into its next receive,
//     behind the 40 bytes a real adapter writes (a GRH, or the IPv4 header
//     of RoCE v2 over IPv4 in the last 20), or dropped as UD drops;
//   - completion channels and the async event queue on real eventfds, so
//     waiting goes through the runtime's poller as in production
//     (CQ.PollWait is the production code, pollwait.go).
//
// Work executes when it is posted (or, waiting, when what it waits for
// comes), on the poster's goroutine: completions are in the CQ when the
// post returns. One mutex, fab.mu, guards the whole fabric.
//
// Tests drive it with the Fake* functions of fakectl.go.

// fab is the fabric: every device of the fake NIC.
var fab = fabric{devs: map[string]*fdev{}, live: map[string]int{}, drop: map[GID]bool{}}

type fabric struct {
	mu   sync.Mutex
	devs map[string]*fdev // listed devices, by name
	live map[string]int   // live objects by kind (FakeLive)
	drop map[GID]bool     // destinations whose packets are lost (FakeDrop)
	seq  uint64           // devices ever added: GUIDs and default GIDs
	// moved counts the bytes RC WRITEs, READs and SENDs copied
	// (FakeBytesMoved).
	moved uint64
	// udSends records the UD sends posted while a test asks for them
	// (FakeRecordUDSends); nil: not recorded.
	udSends *[]FakeUDSend
}

// An fdev is one instance of a device: a removed and re-added device is a
// new fdev, and contexts of the old one keep it.
type fdev struct {
	name       string
	guid       uint64
	ports      []*fport // ports[0] is port 1
	gone       bool     // removed: not listed, not reachable
	fatal      bool     // DEVICE_FATAL: every verb fails
	failN      int      // the next failN work requests fail with failStatus
	failStatus WCStatus
	// postBlock holds the ports whose posts block (FakeBlockPost) until
	// their channel is closed.
	postBlock map[int]chan struct{}
	nextQPN   uint32
	nextKey   uint32
	qps       map[uint32]*QP
	mrs       map[uint32]*MR // by key (lkey == rkey, as rxe)
	ctxs      map[*Context]bool
}

type fport struct {
	attr PortAttr
	gids []GIDEntry
}

func (d *fdev) port(n int) *fport {
	if n < 1 || n > len(d.ports) {
		return nil
	}
	return d.ports[n-1]
}

// gidAt returns the GID at index i of port n, or false.
func (d *fdev) gidAt(n, i int) (GIDEntry, bool) {
	p := d.port(n)
	if p == nil {
		return GIDEntry{}, false
	}
	for _, e := range p.gids {
		if e.Index == i {
			return e, true
		}
	}
	return GIDEntry{}, false
}

// route finds the ACTIVE port of a listed device that owns g, where a
// packet to g arrives. Called with fab.mu held.
func route(g GID) (*fdev, int, bool) {
	if fab.drop[g] {
		return nil, 0, false
	}
	for _, d := range fab.devs {
		if d.gone {
			continue
		}
		for i, p := range d.ports {
			if p.attr.State != PortActive {
				continue
			}
			for _, e := range p.gids {
				if e.GID == g {
					return d, i + 1, true
				}
			}
		}
	}
	return nil, 0, false
}

// canSend reports whether a packet can leave port n of d.
func (d *fdev) canSend(n int) bool {
	p := d.port(n)
	return !d.gone && !d.fatal && p != nil && p.attr.State == PortActive
}

var errFatal = syscall.EIO

// Devices lists the fake NIC's devices (FakeAddDevice). With none it
// returns an error matching ErrUnavailable, as the real build does on a
// host without RDMA devices.
func Devices() ([]DeviceInfo, error) {
	fab.mu.Lock()
	defer fab.mu.Unlock()
	var out []DeviceInfo
	for _, d := range fab.devs {
		out = append(out, DeviceInfo{Name: d.name, GUID: d.guid, NodeType: "CA", UverbsDev: "uverbs-" + d.name})
	}
	if len(out) == 0 {
		return nil, &UnavailableError{Reason: "the fake NIC (verbsfake build) has no device; a test adds one with FakeAddDevice"}
	}
	slices.SortFunc(out, func(a, b DeviceInfo) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	return out, nil
}

// A Context is an open device of the fake NIC. As in the cgo build it owns
// every resource created through it, and Close releases them newest first.
type Context struct {
	dev  *fdev
	name string

	// Guarded by fab.mu.
	closed   bool
	nextID   uint64
	children map[uint64]func() error
	asyncQ   []AsyncEvent

	async     *os.File // eventfd: one count per event in asyncQ
	asyncWait sync.WaitGroup
}

// Open opens the device with the given name.
func Open(name string) (*Context, error) {
	fab.mu.Lock()
	defer fab.mu.Unlock()
	if len(fab.devs) == 0 {
		return nil, fmt.Errorf("verbs: open %s: %w", name, &UnavailableError{Reason: "no RDMA devices found (fake NIC)"})
	}
	d := fab.devs[name]
	if d == nil {
		return nil, fmt.Errorf("verbs: open %s: %w (see `rdma link show`)", name, ErrNoDevice)
	}
	f, err := newEventFile(name + "-async")
	if err != nil {
		return nil, &Error{Verb: "eventfd", Object: "async events of " + name, Err: err}
	}
	c := &Context{dev: d, name: name, children: map[uint64]func() error{}, async: f}
	d.ctxs[c] = true
	fab.live["context"]++
	return c, nil
}

// newEventFile returns a non-blocking semaphore eventfd as a pollable file:
// each read takes one count, as each ibv_get_*_event takes one event.
func newEventFile(name string) (*os.File, error) {
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC|unix.EFD_SEMAPHORE)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), name), nil
}

var one = [8]byte{1} // an eventfd increment of 1 (host order, little endian)

// readEvent is the rc.Read callback of an eventfd wait: it takes one count,
// or asks the poller to wait on EAGAIN.
func readEvent(fd uintptr, cerr *error) bool {
	var b [8]byte
	_, *cerr = unix.Read(int(fd), b[:])
	return !errors.Is(*cerr, unix.EAGAIN)
}

// event queues ev for the context's watcher. Called with fab.mu held.
func (c *Context) event(ev AsyncEvent) {
	if c.closed {
		return
	}
	ev.Device = c.name
	c.asyncQ = append(c.asyncQ, ev)
	c.async.Write(one[:])
}

// Name returns the device's name.
func (c *Context) Name() string { return c.name }

// Alive reports whether the device is still present (not FakeRemoveDevice'd).
func (c *Context) Alive() bool {
	fab.mu.Lock()
	defer fab.mu.Unlock()
	return !c.dev.gone
}

// add registers a child's destroy function. Called with fab.mu held.
func (c *Context) add(closeFn func() error) (uint64, error) {
	if c.closed {
		return 0, fmt.Errorf("verbs: %s: %w", c.name, ErrClosed)
	}
	c.nextID++
	c.children[c.nextID] = closeFn
	return c.nextID, nil
}

// remove forgets a child. Called with fab.mu held.
func (c *Context) remove(id uint64) {
	if c.children != nil {
		delete(c.children, id)
	}
}

// usable fails on a closed context or a device that reported
// DEVICE_FATAL. Called with fab.mu held.
func (c *Context) usable(verb string) error {
	if c.closed {
		return fmt.Errorf("verbs: %s: %w", c.name, ErrClosed)
	}
	if c.dev.fatal {
		return &Error{Verb: verb, Object: c.name, Err: errFatal, Hint: "the device reported DEVICE_FATAL; reopen it"}
	}
	return nil
}

// Close destroys every resource created through c, newest first, then
// closes the device. Waits in progress on c's async events or completion
// channels return ErrClosed. Close is idempotent.
func (c *Context) Close() error {
	fab.mu.Lock()
	if c.closed {
		fab.mu.Unlock()
		return nil
	}
	c.closed = true
	fns := newestFirst(c.children)
	c.children = nil
	fab.mu.Unlock()

	errs := closeAll(fns)
	c.async.Close()
	c.asyncWait.Wait()
	fab.mu.Lock()
	delete(c.dev.ctxs, c)
	fab.live["context"]--
	fab.mu.Unlock()
	return errors.Join(errs...)
}

// QueryDevice returns the device's attributes.
func (c *Context) QueryDevice() (DeviceAttr, error) {
	fab.mu.Lock()
	defer fab.mu.Unlock()
	if err := c.usable("ibv_query_device"); err != nil {
		return DeviceAttr{}, err
	}
	return DeviceAttr{FirmwareVersion: "fake", NodeGUID: c.dev.guid, PhysPortCount: len(c.dev.ports),
		MaxMRSize: 1 << 40, MaxQP: 1 << 14, MaxQPWR: 1 << 14, MaxSGE: 1, MaxCQ: 1 << 14, MaxCQE: 1 << 16,
		MaxMR: 1 << 16, MaxPD: 1 << 14, MaxQPRdAtom: 128}, nil
}

// QueryPort returns the attributes of port (1-based).
func (c *Context) QueryPort(port int) (PortAttr, error) {
	fab.mu.Lock()
	defer fab.mu.Unlock()
	if err := c.usable("ibv_query_port"); err != nil {
		return PortAttr{}, err
	}
	p := c.dev.port(port)
	if p == nil {
		return PortAttr{}, &Error{Verb: "ibv_query_port", Object: fmt.Sprintf("%s port %d", c.name, port), Err: syscall.EINVAL}
	}
	return p.attr, nil
}

// GIDTable returns the valid entries of port's GID table.
func (c *Context) GIDTable(port int) ([]GIDEntry, error) {
	pa, err := c.QueryPort(port)
	if err != nil {
		return nil, err
	}
	fab.mu.Lock()
	defer fab.mu.Unlock()
	out := slices.Clone(c.dev.port(port).gids)
	if len(out) > pa.GIDTableLen {
		out = out[:pa.GIDTableLen]
	}
	return out, nil
}

// WatchAsyncEvents calls fn with every asynchronous event of the device
// until ctx is done (it returns ctx.Err()) or c is closed (ErrClosed),
// waiting in the runtime's poller on the context's eventfd. fn runs on the
// calling goroutine. At most one watcher per Context.
func (c *Context) WatchAsyncEvents(ctx context.Context, fn func(AsyncEvent)) error {
	fab.mu.Lock()
	if c.closed {
		fab.mu.Unlock()
		return fmt.Errorf("verbs: watch async events of %s: %w", c.name, ErrClosed)
	}
	c.asyncWait.Add(1)
	fab.mu.Unlock()
	defer c.asyncWait.Done()

	rc, err := c.async.SyscallConn()
	if err != nil {
		return fmt.Errorf("verbs: watch async events of %s: %w", c.name, err)
	}
	stop := context.AfterFunc(ctx, func() { c.async.SetReadDeadline(time.Unix(1, 0)) })
	defer func() {
		if !stop() {
			c.async.SetReadDeadline(time.Time{})
		}
	}()
	for {
		var cerr error
		err := rc.Read(func(fd uintptr) bool { return readEvent(fd, &cerr) })
		var ev AsyncEvent
		got := err == nil && cerr == nil
		if got {
			// One count, one event: taken even when ctx is done, as
			// ibv_get_async_event acknowledges the event it returns.
			fab.mu.Lock()
			if len(c.asyncQ) > 0 {
				ev, c.asyncQ = c.asyncQ[0], c.asyncQ[1:]
			}
			fab.mu.Unlock()
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			fab.mu.Lock()
			closed := c.closed
			fab.mu.Unlock()
			if closed || errors.Is(err, os.ErrClosed) {
				return fmt.Errorf("verbs: watch async events of %s: %w", c.name, ErrClosed)
			}
			return fmt.Errorf("verbs: watch async events of %s: %w", c.name, err)
		}
		if cerr != nil {
			return &Error{Verb: "read async eventfd", Object: c.name, Err: cerr}
		}
		fn(ev)
	}
}

// MonoNow returns CLOCK_MONOTONIC in nanoseconds, as the cgo build does.
func MonoNow() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}
