// Package mrpool keeps pre-registered memory regions per RDMA device in
// size classes, so that a caller needing a registered buffer takes one in
// nanoseconds instead of paying for ibv_reg_mr (page pinning, IOMMU and
// adapter table updates) on its data path.
//
// Each class is one mmap'd region registered as one MR; buffers are fixed
// slices of it. Get and Put are lock-free and allocation-free: free buffers
// sit on a Treiber stack of indices with an ABA tag. The Pool follows
// devices that disappear and return: RemoveDevice deregisters (the memory
// of buffers still held is unmapped when the last one is Put), AddDevice
// registers again, and Run does both on its own when it sees the device go
// and come back.
//
// A removed device must be let go at once: for providers without
// disassociate support (rxe in Linux 6.1, the test bed's kernel) the
// kernel's ib_unregister_device, and so `rdma link del`, waits until every
// user has closed its context. The pool learns of a removal from whoever notices it
// first: its own reader of each device's asynchronous events
// (IBV_EVENT_DEVICE_FATAL, sent by providers that disassociate), its check
// of the device's uverbs node (Tick), or the daemon calling RemoveDevice on
// a kernel uevent or another part's report. Config.OnDeviceGone tells the
// daemon about the removals the pool noticed itself.
package mrpool

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmad/rdmad/internal/cgroupmem"
	"github.com/rdmad/rdmad/internal/size"
	"github.com/rdmad/rdmad/verbs"
)

// Config configures a Pool.
type Config struct {
	Classes []Class
	// Access is the access of every MR; default local write, remote read
	// and remote write.
	Access verbs.Access
	// CanarySize is the buffer the canary registers; default 64 KiB.
	CanarySize size.Size
	// CanaryInterval is how often Run registers the canary and checks
	// that each device is still there; default 30s.
	CanaryInterval time.Duration
	// Logger receives device add/remove and canary failures; default
	// slog.Default().
	Logger *slog.Logger
	// OnAsyncEvent, if set, is called with each asynchronous event of a
	// registered device, from the pool's event reader; it must not block
	// and must not call back into the pool.
	OnAsyncEvent func(verbs.AsyncEvent)
	// OnDeviceGone, if set, is called after the pool let a device go
	// because it noticed the removal itself (DEVICE_FATAL, its async event
	// file failing, or its uverbs node gone at a Tick), so that the other
	// holders of the device can close it too. It is not called for
	// RemoveDevice, Forget or Close. It must not block.
	OnDeviceGone func(device, reason string)
	// memlock is replaced by tests to simulate budgets; nil reads the
	// process's limit.
	memlock func() (verbs.MemlockStatus, error)
	// memcg is replaced by tests to simulate a memory cgroup; nil reads
	// the process's own (cgroupmem.Own).
	memcg func() (cgroupmem.Limit, error)
}

// A Pool holds a DevicePool per device.
type Pool struct {
	cfg Config

	mu     sync.Mutex // serialises AddDevice/RemoveDevice/Close and writes of devs
	wanted map[string]bool
	closed bool
	devs   atomic.Pointer[map[string]*DevicePool] // copy-on-write snapshot, read lock-free

	canaryBuf *verbs.Buffer
	canary    map[string]*canaryStats // guarded by mu

	watchers sync.WaitGroup // the async event readers of open devices

	// noVerbs is Tick's finding that every wanted device failed for
	// want of verbs; while nothing was ever registered (registered)
	// too, Run's rounds wait eventRetry. added tells Run that AddDevice
	// registered a device.
	noVerbs    atomic.Bool
	registered atomic.Bool
	added      chan struct{}
}

// New returns an empty pool; add devices with AddDevice.
func New(cfg Config) (*Pool, error) {
	if err := validate(cfg.Classes); err != nil {
		return nil, err
	}
	if cfg.Access == 0 {
		cfg.Access = verbs.AccessLocalWrite | verbs.AccessRemoteRead | verbs.AccessRemoteWrite
	}
	if cfg.CanarySize == 0 {
		cfg.CanarySize = 64 << 10
	}
	if cfg.CanaryInterval == 0 {
		cfg.CanaryInterval = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.memlock == nil {
		cfg.memlock = verbs.ReadMemlock
	}
	if cfg.memcg == nil {
		cfg.memcg = cgroupmem.Own
	}
	p := &Pool{cfg: cfg, wanted: map[string]bool{}, canary: map[string]*canaryStats{}, added: make(chan struct{}, 1)}
	empty := map[string]*DevicePool{}
	p.devs.Store(&empty)
	return p, nil
}

// Device returns the device pool of name, or nil if it is not registered
// (never added, removed, or failed). It takes no lock; callers on a data
// path may call it per operation or keep the result until Get reports
// false.
func (p *Pool) Device(name string) *DevicePool { return (*p.devs.Load())[name] }

// AddDevice opens name and registers every class on it within the memlock
// budget. On a budget shortfall it registers nothing and returns a
// *BudgetError. The device is remembered: Run re-adds it when it returns
// after a removal. Adding a registered device is a no-op.
func (p *Pool) AddDevice(name string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("mrpool: add %s: pool closed", name)
	}
	p.wanted[name] = true
	if p.Device(name) != nil {
		return nil
	}
	d, err := p.openDevice(name)
	if err != nil {
		return err
	}
	p.publish(name, d)
	p.watch(d)
	p.cfg.Logger.Info("mrpool: registered buffers", "device", name, "bytes", d.registered)
	p.registered.Store(true)
	select {
	case p.added <- struct{}{}:
	default:
	}
	return nil
}

// watch reads d's asynchronous events until d is closed. DEVICE_FATAL, or
// the event file failing, makes the pool let d go at once (see gone). The
// reader stops its own wait before it closes anything: Context.Close waits
// for a running WatchAsyncEvents, so closing from inside the callback would
// never return.
func (p *Pool) watch(d *DevicePool) {
	ctx, cancel := context.WithCancel(context.Background())
	d.stopWatch = cancel
	p.watchers.Add(1)
	go func() {
		defer p.watchers.Done()
		defer cancel()
		fatal := false
		err := d.vctx.WatchAsyncEvents(ctx, func(ev verbs.AsyncEvent) {
			if p.cfg.OnAsyncEvent != nil {
				p.cfg.OnAsyncEvent(ev)
			}
			if ev.Type == verbs.EventDeviceFatal {
				fatal = true
				cancel()
			}
		})
		switch {
		case fatal:
			p.gone(d, "the device reported DEVICE_FATAL")
		case d.closed.Load(), errors.Is(err, verbs.ErrClosed):
			// RemoveDevice or Close: nothing to report.
		case err != nil && !errors.Is(err, context.Canceled):
			p.gone(d, fmt.Sprintf("its async event file failed (%v)", err))
		}
	}()
}

// gone lets d go after the pool noticed its removal itself, unless it was
// already removed (or replaced by a new instance of the device), and tells
// Config.OnDeviceGone. The device stays wanted: it is registered again
// when it returns.
func (p *Pool) gone(d *DevicePool, reason string) {
	p.mu.Lock()
	if p.Device(d.name) != d {
		p.mu.Unlock()
		return
	}
	p.publish(d.name, nil)
	p.cfg.Logger.Warn("mrpool: device removed, deregistered its buffers and closed it", "device", d.name, "reason", reason)
	err := d.close()
	p.mu.Unlock()
	if err != nil {
		p.cfg.Logger.Debug("mrpool: close of a removed device", "device", d.name, "err", err)
	}
	if p.cfg.OnDeviceGone != nil {
		p.cfg.OnDeviceGone(d.name, reason)
	}
}

func (p *Pool) openDevice(name string) (*DevicePool, error) {
	st, err := p.cfg.memlock()
	if err != nil {
		return nil, fmt.Errorf("mrpool: add %s: %w", name, err)
	}
	if avail, enforced := st.Available(); enforced {
		if _, _, err := PlanBudget(p.cfg.Classes, int64(avail)); err != nil {
			var be *BudgetError
			if errors.As(err, &be) {
				be.Device, be.Limit = name, int64(st.Limit)
			}
			return nil, err
		}
	}
	if err := p.checkCgroup(name); err != nil {
		return nil, err
	}
	ctx, err := verbs.Open(name)
	if err != nil {
		return nil, fmt.Errorf("mrpool: add %s: %w", name, err)
	}
	pd, err := ctx.AllocPD()
	if err != nil {
		ctx.Close()
		return nil, fmt.Errorf("mrpool: add %s: %w", name, err)
	}
	d := &DevicePool{name: name, vctx: ctx, pd: pd}
	for _, c := range p.cfg.Classes {
		cl, err := newClass(d, c, pd, p.cfg.Access)
		if err != nil {
			d.close()
			return nil, fmt.Errorf("mrpool: add %s: %w", name, err)
		}
		d.classes = append(d.classes, cl)
		d.registered += int64(len(cl.region.Bytes()))
	}
	// Get takes the first class that fits, so it must see them smallest
	// first whatever order the config lists them in.
	slices.SortFunc(d.classes, func(a, b *class) int { return cmp.Compare(a.size, b.size) })
	return d, nil
}

// cgroupReserve is the room left in the memory cgroup for rdmad itself
// when the pool plans what it registers: the soak's peak RSS at 4,096 peers
// (the most a node probes), 158 MiB, with margin (docs/BENCHMARKS.md,
// "Soak"). The unit's MemoryMax= of 512 MiB leaves about 300 MiB of pool.
const cgroupReserve = 192 << 20

// checkCgroup refuses a device whose classes do not fit in what the memory
// cgroup (the unit's MemoryMax=) leaves, less cgroupReserve: registered
// pages are charged there, and a pool past the limit would have the kernel
// kill rdmad over and over rather than refuse once. An unreadable cgroup
// is logged and does not stop registration (the limit cannot be known;
// RLIMIT_MEMLOCK still applies).
func (p *Pool) checkCgroup(name string) error {
	l, err := p.cfg.memcg()
	if err != nil {
		p.cfg.Logger.Warn("mrpool: cannot read the memory cgroup's limit; registering without checking it", "device", name, "err", err)
		return nil
	}
	if !l.Limited {
		return nil
	}
	avail := int64(l.Available()) - cgroupReserve
	if _, _, err := PlanBudget(p.cfg.Classes, max(avail, 0)); err != nil {
		var be *BudgetError
		if errors.As(err, &be) {
			be.Device, be.Limit, be.Cgroup, be.CgroupUsed = name, int64(l.Max), l.Cgroup, int64(l.Current)
		}
		return err
	}
	return nil
}

// publish replaces the device snapshot with one where name maps to d (or
// is absent for nil). Called with p.mu held.
func (p *Pool) publish(name string, d *DevicePool) {
	old := *p.devs.Load()
	m := make(map[string]*DevicePool, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	if d == nil {
		delete(m, name)
	} else {
		m[name] = d
	}
	p.devs.Store(&m)
}

// RemoveDevice deregisters name's buffers, deallocates the PD and closes
// the device now, for a device that is being removed (the kernel waits for
// every user of a removed rxe device to close it); the daemon calls it as
// soon as any source reports the removal. Buffers still held stay mapped
// until they are Put, but their keys are no longer valid. The device stays
// wanted: Tick and Run re-add it when it returns. Removing an unknown
// device is a no-op.
func (p *Pool) RemoveDevice(name string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	d := p.Device(name)
	if d == nil {
		return nil
	}
	p.publish(name, nil)
	p.cfg.Logger.Info("mrpool: deregistered buffers", "device", name)
	return d.close()
}

// Forget removes name and stops Run from re-adding it.
func (p *Pool) Forget(name string) error {
	p.mu.Lock()
	delete(p.wanted, name)
	p.mu.Unlock()
	return p.RemoveDevice(name)
}

// Close removes every device. Buffers still held are unmapped when Put.
func (p *Pool) Close() error {
	p.mu.Lock()
	p.closed = true
	names := make([]string, 0)
	for n := range *p.devs.Load() {
		names = append(names, n)
	}
	p.mu.Unlock()
	var errs []error
	for _, n := range names {
		errs = append(errs, p.RemoveDevice(n))
	}
	p.watchers.Wait()
	p.mu.Lock()
	if p.canaryBuf != nil {
		errs = append(errs, p.canaryBuf.Close())
		p.canaryBuf = nil
	}
	p.mu.Unlock()
	return errors.Join(errs...)
}

// A DevicePool is the registered buffers of one device.
type DevicePool struct {
	name       string
	vctx       *verbs.Context
	pd         *verbs.PD
	classes    []*class // ascending by config order; Get searches for the best fit
	registered int64

	closed   atomic.Bool
	failures atomic.Uint64 // Gets that returned false
	tooBig   atomic.Uint64 // of those, Gets larger than the largest class
	inUse    atomic.Int64  // buffers held across all classes, for unmapping after close
	unmapped atomic.Bool
	closeErr error

	stopWatch context.CancelFunc // stops the async event reader; nil in tests
}

// Name returns the device's name.
func (d *DevicePool) Name() string { return d.name }

// PD returns the protection domain the buffers are registered in; QPs that
// use the buffers' keys must be created in it.
func (d *DevicePool) PD() *verbs.PD { return d.pd }

// Context returns the open device the pool registered on.
func (d *DevicePool) Context() *verbs.Context { return d.vctx }

// Get takes a free buffer of at least n bytes from the smallest class that
// has one. It reports false when no class is large enough, all fitting
// classes are exhausted, or the device was removed. It neither locks nor
// allocates.
func (d *DevicePool) Get(n int) (Buf, bool) {
	// Count the buffer as held before checking closed, so that close sees
	// it and leaves the memory mapped (see release).
	d.inUse.Add(1)
	if d.closed.Load() {
		d.release()
		return Buf{}, false
	}
	fitted := false
	for _, c := range d.classes {
		if int64(c.size) < int64(n) {
			continue
		}
		fitted = true
		if i, ok := c.pop(); ok {
			c.taken(i)
			return Buf{c: c, i: i}, true
		}
		c.empty.Add(1)
	}
	if !fitted {
		d.tooBig.Add(1)
	}
	d.failures.Add(1)
	d.release()
	return Buf{}, false
}

// Put returns b to its pool. Putting a buffer twice panics: it would hand
// the same memory to two users.
func (d *DevicePool) Put(b Buf) {
	if b.c == nil {
		return
	}
	if b.c.d != d {
		panic("mrpool: Put of a buffer from another device pool")
	}
	b.c.free(b.i)
	d.release()
}

// release drops one hold; the last hold on a closed pool unmaps it.
func (d *DevicePool) release() {
	if d.inUse.Add(-1) == 0 && d.closed.Load() {
		d.unmap()
	}
}

func (d *DevicePool) unmap() {
	if !d.unmapped.CompareAndSwap(false, true) {
		return
	}
	for _, c := range d.classes {
		c.region.Close()
	}
}

// close deregisters everything and closes the device; memory is unmapped
// now or by the last Put.
func (d *DevicePool) close() error {
	d.closed.Store(true)
	if d.stopWatch != nil {
		d.stopWatch()
	}
	var err error
	if d.vctx != nil {
		err = d.vctx.Close() // closes MRs and the PD too
	}
	if d.inUse.Load() == 0 {
		d.unmap()
	}
	if err != nil {
		return fmt.Errorf("mrpool: close %s: %w", d.name, err)
	}
	return nil
}
