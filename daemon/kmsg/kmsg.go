// Package kmsg follows the kernel log (/dev/kmsg) and turns the kernel's
// messages about RDMA devices into faults: any message of severity err or
// worse about a device, and the known NIC fault messages of Catalog, some
// of which come at warning or info. A message is about a device only by
// what the kernel attaches or formats (the DEVICE property dev_printk
// adds, a driver's own prefix, the address in an AER report), never by a
// name elsewhere in its text, which a user may have chosen (a process
// name, a mount option), and only when the kernel wrote it (facility
// kern: lines written to /dev/kmsg are user). Each catalogued pattern has
// a class: fatal (a KernelFault problem), non-fatal (shown, no problem
// alone; a link down's times feed the flap rule) or noise (no fault,
// counted in Stats.Noise). A Follower keeps one apitype.KernelFault per
// device and pattern (and netdev, for a link down), bounded in number,
// and drops each a window after its last message or when the device is
// recreated (docs/HEALTH.md, "Kernel faults").
//
// Start-up: a Follower reads the kernel's whole buffer at once and keeps
// the records of the last window, by their kernel timestamps, until it
// knows the devices (the first SetDevices: rdmad's first inventory read),
// then matches them; so a restart of rdmad neither loses a fresh fault nor
// raises an old one again, and a fault expires at the same time whether
// rdmad restarted or not. Records older than the window (from boot, or
// from before the last restart) are skipped; the ones kept meanwhile are
// bounded (maxPending, maxPendingBytes), the oldest dropped first.
//
// Costs: every record is one read(2) and a parse without allocation (a
// record kept until the first SetDevices is copied once); only records
// about a device are matched against the catalog (each
// pattern's regular expression only behind a substring prefilter), and a
// repeated line is not escaped again (BenchmarkFlood); the faults
// are at most Options.MaxFaults, each with a line of at most MaxLine
// bytes; a flood of matching messages updates counts and is published at
// most once per Options.PublishInterval, a new fault at once (at most
// every tenth of a second). Nothing ever blocks the kernel: when rdmad
// falls behind, the kernel overwrites the oldest records, and the
// Follower counts the loss (Stats.Lost) and goes on.
package kmsg

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/client/apitype"
)

// DefaultPath is the kernel log device.
const DefaultPath = "/dev/kmsg"

// Defaults of Options.
const (
	DefaultWindow          = 10 * time.Minute
	DefaultMaxFaults       = 64
	DefaultPublishInterval = time.Second
	// urgentInterval paces the publication of new and dropped faults,
	// which otherwise go out at once.
	urgentInterval = 100 * time.Millisecond
	// maxPending and maxPendingBytes bound the records a Follower keeps
	// until the first SetDevices: a 10-minute window of err lines and of
	// drivers' lines with a DEVICE property fits on a node whose NICs are
	// not flooding the log; of a flood, the newest are kept.
	maxPending      = 2048
	maxPendingBytes = 1 << 20
)

// recordBuffer holds one record: the kernel formats at most 8 KiB
// (CONSOLE_EXT_LOG_MAX; 2 KiB, PRINTK_MESSAGE_MAX, since 6.1) and fails a
// smaller read with EINVAL without moving on.
const recordBuffer = 8 << 10

// Options configure a Follower. The zero value follows /dev/kmsg with the
// defaults.
type Options struct {
	// Path is the kernel log device; "" means DefaultPath.
	Path string
	// Window is how long a fault stays after its last message
	// ([health] kernel_fault_window); 0 means DefaultWindow.
	Window time.Duration
	// MaxFaults bounds the faults kept; a new one evicts the one seen
	// least recently. 0 means DefaultMaxFaults.
	MaxFaults int
	// PublishInterval is the least time between two calls of OnChange
	// for changes of counts and lines only; 0 means
	// DefaultPublishInterval.
	PublishInterval time.Duration
	// Now returns the wall clock; nil means time.Now.
	Now func() time.Time
	// OnChange, if set, is called from Run's goroutine with the faults
	// (a new slice, ordered by device and pattern) whenever they
	// changed. It should return quickly: the kernel does not wait.
	OnChange func([]apitype.KernelFault)
	// TrustUserspace makes lines written to /dev/kmsg from userspace
	// (facility user) count as the kernel's: for tests that inject
	// faults that way, never in production, where any root process
	// could then raise a fault on any device.
	TrustUserspace bool
}

// Stats count what a Follower read, for metrics.
type Stats struct {
	// Records parsed; Malformed records skipped.
	Records, Malformed uint64
	// Lost counts the times the kernel overwrote records before they
	// were read (EPIPE).
	Lost uint64
	// Matched counts the records that became (or added to) a fault;
	// Evicted the faults dropped to make room for a new one.
	Matched, Evicted uint64
	// Dropped counts the records of the window read before the first
	// SetDevices that the bound on them dropped, the oldest first.
	Dropped uint64
	// Noise counts the records of a device that a noise pattern of the
	// catalog (ClassNoise: mlx5's failed ACCESS_REG) made no fault.
	Noise uint64
}

// A source is what Run reads records from: /dev/kmsg as an *os.File (in
// the runtime poller, so deadlines wake a blocked Read), or a test's
// stand-in.
type source interface {
	io.ReadCloser
	SetReadDeadline(time.Time) error
}

// A Follower follows the kernel log. Its methods may be called from any
// goroutine; Run at most once.
type Follower struct {
	opts Options
	// open opens the source positioned at the oldest record; mono
	// returns the kernel's timestamp clock (CLOCK_MONOTONIC). Tests
	// replace both.
	open func(path string) (source, error)
	mono func() time.Duration

	ix        atomic.Pointer[index]
	ready     chan struct{} // closed by the first SetDevices
	readyOnce sync.Once

	records, malformed, lost, matched, evicted, dropped, noise atomic.Uint64

	// lockup follows a soft lockup report (softLockup): the records left
	// to search for mlx5e's poll frame (0: none open), the header's line,
	// priority and time. Run's goroutine only.
	lockup struct {
		left     int
		line     []byte
		priority int
		at       time.Time
	}

	// pending are the records Run read before the first SetDevices that
	// may be faults, copies of at most maxPendingBytes in all; known
	// says that Run matched them. Run's goroutine only.
	pending      [][]byte
	pendingBytes int
	known        bool

	mu      sync.Mutex
	tab     *table
	src     source // while Run reads, for wakeups
	urgent  bool   // the set of faults changed: publish soon
	dirty   bool   // counts or lines changed: publish within the interval
	lastPub time.Time
}

// New returns a Follower; call SetDevices, then Run.
func New(opts Options) *Follower {
	if opts.Path == "" {
		opts.Path = DefaultPath
	}
	if opts.Window <= 0 {
		opts.Window = DefaultWindow
	}
	if opts.MaxFaults <= 0 {
		opts.MaxFaults = DefaultMaxFaults
	}
	if opts.PublishInterval <= 0 {
		opts.PublishInterval = DefaultPublishInterval
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	f := &Follower{opts: opts, open: openKmsg, mono: monotonic, ready: make(chan struct{}), tab: newTable(opts.MaxFaults)}
	f.ix.Store(newIndex(nil))
	return f
}

// SetDevices replaces the RDMA devices that records are matched against;
// the daemon calls it whenever its inventory changes, first once it read
// the inventory (with no device, too). Faults of devices that left the set
// stay until their window ends (a device that a fatal error removed is the
// one to report). The records Run read before the first call (the
// kernel's buffer at start) are matched against that first inventory,
// each dated by its own timestamp, not against none; a device that
// appears later is a new instance, whose predecessor's faults do not
// carry over (Forget).
func (f *Follower) SetDevices(devs []Device) {
	f.ix.Store(newIndex(devs))
	f.readyOnce.Do(func() {
		close(f.ready)
		f.mu.Lock()
		defer f.mu.Unlock()
		f.wakeLocked()
	})
}

// Forget drops the faults of device: the daemon calls it when the device
// is (re)created, whose faults were about its previous instance.
func (f *Follower) Forget(device string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.tab.forget(device) {
		f.urgent = true
		f.wakeLocked()
	}
}

// Faults returns the faults in force, ordered by device and pattern.
func (f *Follower) Faults() []apitype.KernelFault {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.tab.expire(f.opts.Now(), f.opts.Window) {
		// Run publishes the drop too.
		f.urgent = true
		f.wakeLocked()
	}
	return f.tab.list()
}

// Stats returns the counters.
func (f *Follower) Stats() Stats {
	return Stats{Records: f.records.Load(), Malformed: f.malformed.Load(), Lost: f.lost.Load(),
		Matched: f.matched.Load(), Evicted: f.evicted.Load(), Dropped: f.dropped.Load(), Noise: f.noise.Load()}
}

// wakeLocked makes a blocked Read of Run return, so that it publishes.
func (f *Follower) wakeLocked() {
	if f.src != nil {
		f.src.SetReadDeadline(time.Now())
	}
}

// Run follows the kernel log until ctx is done, then returns ctx.Err().
// It opens Options.Path first (an error says why it cannot: missing,
// permission), reads the buffer's records of the last window and then
// every new one; those it reads before the first SetDevices wait for it.
// Lost records (EPIPE) are counted, malformed ones skipped and counted;
// another read error ends Run with that error. Run starts no goroutine
// that outlives it.
func (f *Follower) Run(ctx context.Context) error {
	src, err := f.open(f.opts.Path)
	if errors.Is(err, os.ErrPermission) {
		return fmt.Errorf("kmsg: open %s: %w (reading the kernel log needs CAP_SYSLOG where kernel.dmesg_restrict=1, and in a systemd unit ProtectKernelLogs=no and DeviceAllow=/dev/kmsg r)", f.opts.Path, err)
	}
	if err != nil {
		return fmt.Errorf("kmsg: open %s: %w", f.opts.Path, err)
	}
	defer src.Close()

	f.mu.Lock()
	f.src = src
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.src = nil
		f.mu.Unlock()
	}()
	// Cancellation wakes a blocked Read through its deadline; Run waits
	// for the callback when it started, so nothing outlives Run.
	woken := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(woken)
		f.mu.Lock()
		defer f.mu.Unlock()
		src.SetReadDeadline(time.Unix(1, 0))
	})
	defer func() {
		if !stop() {
			<-woken
		}
	}()

	buf := make([]byte, recordBuffer)
	for {
		f.matchPending()
		pub := f.tick()
		if pub != nil && f.opts.OnChange != nil {
			f.opts.OnChange(pub)
		}
		// After tick set the deadline: a cancellation before it is seen
		// here, one after it moved the deadline to the past.
		if err := ctx.Err(); err != nil {
			return err
		}
		n, err := src.Read(buf)
		switch {
		case err == nil && n == 0:
			return fmt.Errorf("kmsg: read %s: %w", f.opts.Path, io.ErrUnexpectedEOF)
		case err == nil:
			f.handle(buf[:n])
		case errors.Is(err, os.ErrDeadlineExceeded):
		case errors.Is(err, syscall.EPIPE):
			// The kernel overwrote records we had not read; the next
			// read returns the oldest one left.
			f.lost.Add(1)
		default:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("kmsg: read %s: %w", f.opts.Path, err)
		}
	}
}

// tick expires faults, returns the faults to publish if it is time
// (nil if not), and sets the source's read deadline to the next thing to
// do: an expiry or a paced publication.
func (f *Follower) tick() []apitype.KernelFault {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.opts.Now()
	if f.tab.expire(now, f.opts.Window) {
		f.urgent = true
	}
	var pub []apitype.KernelFault
	if f.urgent && !now.Before(f.lastPub.Add(urgentInterval)) ||
		f.dirty && !now.Before(f.lastPub.Add(f.opts.PublishInterval)) {
		pub = f.tab.list()
		f.lastPub = now
		f.urgent, f.dirty = false, false
	}
	next := f.tab.nextExpiry(f.opts.Window)
	soon := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	if f.urgent {
		soon(f.lastPub.Add(urgentInterval))
	}
	if f.dirty {
		soon(f.lastPub.Add(f.opts.PublishInterval))
	}
	var deadline time.Time // none
	if !next.IsZero() {
		// The source's deadlines are on the real clock; Now may be a
		// test's.
		deadline = time.Now().Add(max(next.Sub(now), time.Millisecond))
	}
	if f.src != nil {
		f.src.SetReadDeadline(deadline)
	}
	return pub
}

// handle turns one record into a fault if it is one, or keeps it for
// the first SetDevices.
func (f *Follower) handle(b []byte) {
	r, err := ParseRecord(b)
	if err != nil {
		f.malformed.Add(1)
		return
	}
	f.records.Add(1)
	if !f.known {
		f.matchPending()
	}
	if !f.known {
		if f.maybeFault(&r) {
			f.keep(b)
		}
		return
	}
	f.matchRecord(&r)
}

// maybeFault reports whether r can be a fault of some device, by what
// does not depend on the devices: the kernel's (or, with TrustUserspace,
// userspace's), of severity info or worse, of the last window, and with a
// DEVICE property, at err or worse (a record without one counts only
// then) or a frame of a soft lockup report (isLockupFrame). It is what a
// record needs to be kept until the first SetDevices.
func (f *Follower) maybeFault(r *Record) bool {
	if !trusted(r, f.opts.TrustUserspace) {
		return false
	}
	if r.Priority > maxPriority || len(r.Device) == 0 && r.Priority > errPriority && !isLockupFrame(r) {
		return false
	}
	return f.age(r) < f.opts.Window
}

// age is how long ago r was logged by the kernel's clock.
func (f *Follower) age(r *Record) time.Duration {
	return max(f.mono()-time.Duration(r.TS)*time.Microsecond, 0)
}

// keep copies b into the records that wait for the first SetDevices,
// dropping the oldest beyond the bounds.
func (f *Follower) keep(b []byte) {
	for len(f.pending) > 0 && (len(f.pending) >= maxPending || f.pendingBytes+len(b) > maxPendingBytes) {
		f.pendingBytes -= len(f.pending[0])
		f.pending[0] = nil
		f.pending = f.pending[1:]
		f.dropped.Add(1)
	}
	f.pending = append(f.pending, bytes.Clone(b))
	f.pendingBytes += len(b)
}

// matchPending matches the records kept until the first SetDevices once
// it came, in the order they were logged, each dated by its own
// timestamp (one that left the window meanwhile is none), and releases
// them.
func (f *Follower) matchPending() {
	if f.known {
		return
	}
	select {
	case <-f.ready:
	default:
		return
	}
	f.known = true
	for _, b := range f.pending {
		if r, err := ParseRecord(b); err == nil {
			f.matchRecord(&r)
		}
	}
	f.pending, f.pendingBytes = nil, 0
}

// matchRecord turns one parsed record into a fault if it is one.
func (f *Follower) matchRecord(r *Record) {
	if r.Priority > maxPriority {
		return
	}
	// The record's age by the kernel's clock dates it on the wall clock.
	age := f.age(r)
	if age >= f.opts.Window {
		return // before the window: from boot or before a restart
	}
	ix := f.ix.Load()
	at := f.opts.Now().Add(-age)
	if f.softLockup(ix, r, at) {
		return
	}
	h, ok := ix.match(r, f.opts.TrustUserspace)
	if !ok {
		return
	}
	if h.class == ClassNoise {
		f.noise.Add(1)
		return
	}
	f.add(h, r.Priority, r.Message, at)
}

// add counts one record of fault h.
func (f *Follower) add(h hit, priority int, line []byte, at time.Time) {
	f.matched.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	isNew, evicted := f.tab.add(h, priority, line, at)
	if evicted {
		f.evicted.Add(1)
	}
	if isNew {
		f.urgent = true
	} else {
		f.dirty = true
	}
}

// softLockup follows soft lockup reports, which name no device: a header
// (isLockupHeader) opens one, and a frame of mlx5e's NAPI poll
// (isLockupFrame) among the next lockupLookahead records makes a
// PatternSoftLockup fault of every device of mlx5_core, with the header's
// line, priority and time. It reports whether r was part of a report (and
// so needs no other match); it allocates only for the first header.
func (f *Follower) softLockup(ix *index, r *Record, at time.Time) bool {
	if !trusted(r, f.opts.TrustUserspace) {
		return false
	}
	l := &f.lockup
	if isLockupHeader(r) {
		l.left, l.priority, l.at = lockupLookahead, r.Priority, at
		l.line = append(l.line[:0], r.Message[:min(len(r.Message), MaxLine+1)]...)
		return true
	}
	if l.left == 0 {
		return false
	}
	l.left--
	if !isLockupFrame(r) {
		return false
	}
	l.left = 0
	for _, dev := range ix.drivers[lockupDriver] {
		f.add(hit{device: dev, pattern: PatternSoftLockup, class: ClassFatal}, l.priority, l.line, l.at)
	}
	return true
}

// openKmsg opens the kernel log for reading, non-blocking so that the
// runtime poller (epoll; /dev/kmsg supports poll) waits for records and
// deadlines interrupt the wait, at the oldest record in the buffer
// (SEEK_SET; SEEK_END would skip the window's records at a restart).
func openKmsg(path string) (source, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("seek to the oldest record: %w", err)
	}
	return f, nil
}

// monotonic reads CLOCK_MONOTONIC, the clock of the records' TS_USEC
// (printk's local_clock, which like it stops during suspend).
func monotonic() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}
