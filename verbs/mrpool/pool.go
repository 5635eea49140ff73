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
package mrpool

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

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
	// memlock is replaced by tests to simulate budgets; nil reads the
	// process's limit.
	memlock func() (verbs.MemlockStatus, error)
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
	p := &Pool{cfg: cfg, wanted: map[string]bool{}, canary: map[string]*canaryStats{}}
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
	p.cfg.Logger.Info("mrpool: registered buffers", "device", name, "bytes", d.registered)
	return nil
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

// RemoveDevice deregisters name's buffers and closes the device, for a
// device that is being removed (the kernel waits for every user of a
// removed rxe device to close it). Buffers still held stay mapped until
// they are Put, but their keys are no longer valid. The device stays
// wanted: Run re-adds it when it returns. Removing an unknown device is a
// no-op.
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
