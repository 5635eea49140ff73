package kmsg

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/client/apitype"
)

// A harness runs a Follower on one end of a SOCK_SEQPACKET socket pair,
// which keeps record boundaries as /dev/kmsg does and is pollable, so Run
// reads it through the runtime poller with deadlines like the real device.
type harness struct {
	t   *testing.T
	f   *Follower
	w   *os.File
	src source
	// mono is the kernel clock the records' TS are on.
	mono    atomic.Int64
	changes chan []apitype.KernelFault
	calls   atomic.Int64
	cancel  context.CancelFunc
	done    chan error
}

func newHarness(t *testing.T, opts Options, wrap func(source) source) *harness {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, changes: make(chan []apitype.KernelFault, 4096), done: make(chan error, 1)}
	r := os.NewFile(uintptr(fds[0]), "kmsg-test")
	h.w = os.NewFile(uintptr(fds[1]), "kmsg-test-writer")
	h.src = r
	if wrap != nil {
		h.src = wrap(r)
	}
	h.mono.Store(int64(time.Hour))
	opts.OnChange = func(l []apitype.KernelFault) {
		h.calls.Add(1)
		select {
		case h.changes <- l:
		default:
		}
	}
	h.f = New(opts)
	h.f.open = func(string) (source, error) { return h.src, nil }
	h.f.mono = func() time.Duration { return time.Duration(h.mono.Load()) }
	t.Cleanup(func() {
		h.stop()
		h.w.Close()
	})
	return h
}

func (h *harness) start() {
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { h.done <- h.f.Run(ctx) }()
}

// stop cancels Run and waits for it: it must return at once, with
// context.Canceled.
func (h *harness) stop() {
	if h.cancel == nil {
		return
	}
	h.cancel()
	h.cancel = nil
	select {
	case err := <-h.done:
		if !errors.Is(err, context.Canceled) {
			h.t.Errorf("Run returned %v, want context.Canceled", err)
		}
	case <-time.After(2 * time.Second):
		h.t.Fatal("Run did not return within 2s of the cancellation")
	}
}

// write sends one record of the given age by the kernel's clock.
func (h *harness) write(pri int, age time.Duration, text string) {
	h.t.Helper()
	ts := (time.Duration(h.mono.Load()) - age) / time.Microsecond
	if _, err := fmt.Fprintf(h.w, "%d,1,%d,-;%s", pri, ts, text); err != nil {
		h.t.Fatal(err)
	}
}

// await returns the first published list that ok accepts, failing after
// timeout.
func (h *harness) await(timeout time.Duration, what string, ok func([]apitype.KernelFault) bool) []apitype.KernelFault {
	h.t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case l := <-h.changes:
			if ok(l) {
				return l
			}
		case <-deadline:
			h.t.Fatalf("no publication with %s within %v; faults now %+v", what, timeout, h.f.Faults())
			return nil
		}
	}
}

func has(device, pattern string) func([]apitype.KernelFault) bool {
	return func(l []apitype.KernelFault) bool {
		for _, e := range l {
			if e.Device == device && e.Pattern == pattern {
				return true
			}
		}
		return false
	}
}

func TestRunRaisesFaultOnlyForTheNamedDevice(t *testing.T) {
	h := newHarness(t, Options{}, nil)
	h.f.SetDevices(testDevices)
	h.start()
	h.write(3, 0, "infiniband rxe9: not ours\n DEVICE=+infiniband:rxe9\n")
	h.write(3, 0, "infiniband rxe0: test fault\n DEVICE=+infiniband:rxe0\n")
	l := h.await(2*time.Second, "rxe0 err", has("rxe0", "err"))
	if len(l) != 1 || l[0].Line != "infiniband rxe0: test fault" || l[0].Count != 1 || l[0].Priority != 3 {
		t.Errorf("published %+v, want only rxe0's fault with its line", l)
	}
	if s := h.f.Stats(); s.Records != 2 || s.Matched != 1 {
		t.Errorf("stats %+v, want 2 records, 1 matched", s)
	}
}

// TestRunWaitsForDevices: records read before the first SetDevices are
// kept and matched against it, not dropped, and raise nothing before it.
func TestRunWaitsForDevices(t *testing.T) {
	h := newHarness(t, Options{}, nil)
	h.start()
	h.write(3, time.Second, "rxe0: early\n")
	waitRecords(t, h, 1)
	if l := h.f.Faults(); len(l) != 0 {
		t.Fatalf("faults %+v before any device is known", l)
	}
	h.f.SetDevices(testDevices)
	h.await(2*time.Second, "rxe0 err", has("rxe0", "err"))
}

// waitRecords waits until Run has read n records.
func waitRecords(t *testing.T, h *harness, n uint64) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); h.f.Stats().Records < n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("Run read %d records in 5s, want %d", h.f.Stats().Records, n)
		}
	}
}

// TestRunKeepsTheBufferUntilDevicesAreKnown: after a restart Run reads
// the kernel's buffer before rdmad knows its devices (the first
// SetDevices follows its first inventory read, here two minutes later).
// The window's records wait and are matched then, each dated by its own
// timestamp: one still in the window is a fault from its own time, which
// expires a window after it as it would have without the restart; one
// that left the window while it waited is none, as is one from before
// the window.
func TestRunKeepsTheBufferUntilDevicesAreKnown(t *testing.T) {
	base := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	var elapsed atomic.Int64
	now := func() time.Time { return base.Add(time.Duration(elapsed.Load())) }
	h := newHarness(t, Options{Now: now, Window: 10 * time.Minute}, nil)
	h.write(3, 12*time.Minute, "rxe0: before the window\n")
	h.write(3, 9*time.Minute, "mlx5_core 0000:03:00.1: leaves the window before the devices are known\n DEVICE=+pci:0000:03:00.1\n")
	h.write(3, 3*time.Minute, "mlx5_core 0000:03:00.0: before the restart\n DEVICE=+pci:0000:03:00.0\n")
	h.start()
	waitRecords(t, h, 3)
	if l := h.f.Faults(); len(l) != 0 {
		t.Fatalf("faults %+v before any device is known", l)
	}
	elapsed.Add(int64(2 * time.Minute))
	h.mono.Add(int64(2 * time.Minute))
	h.f.SetDevices(testDevices)
	l := h.await(2*time.Second, "mlx5_0 err", has("mlx5_0", "err"))
	if want := base.Add(-3 * time.Minute); len(l) != 1 || !l[0].First.Equal(want) || l[0].Line != "mlx5_core 0000:03:00.0: before the restart" {
		t.Fatalf("published %+v, want only mlx5_0's fault, first at %v", l, want)
	}
	elapsed.Store(int64(7*time.Minute - time.Second))
	if l := h.f.Faults(); len(l) != 1 {
		t.Errorf("faults %+v a second before the window ends, want mlx5_0's", l)
	}
	elapsed.Store(int64(7 * time.Minute))
	if l := h.f.Faults(); len(l) != 0 {
		t.Errorf("faults %+v a window after the record, want none", l)
	}
}

// TestRunBoundsTheRecordsBeforeDevices: of a flood before the first
// SetDevices, the newest maxPending records are kept, the others counted
// as dropped.
func TestRunBoundsTheRecordsBeforeDevices(t *testing.T) {
	h := newHarness(t, Options{}, nil)
	h.start()
	const extra = 10
	n := maxPending + extra
	for i := range n {
		h.write(3, 0, fmt.Sprintf("infiniband rxe0: fault %d\n", i))
	}
	// Neither kept nor dropped: info without a DEVICE property.
	h.write(6, 0, "rxe0: info\n")
	waitRecords(t, h, uint64(n+1))
	if s := h.f.Stats(); s.Dropped != extra {
		t.Errorf("stats %+v, want %d dropped", s, extra)
	}
	h.f.SetDevices(testDevices)
	l := h.await(2*time.Second, "rxe0 err", has("rxe0", "err"))
	if want := fmt.Sprintf("infiniband rxe0: fault %d", n-1); len(l) != 1 || l[0].Count != maxPending || l[0].Line != want {
		t.Errorf("published %+v, want rxe0's fault counted %d times, line %q", l, maxPending, want)
	}
}

// TestRunReplaysOnlyTheWindow: at start the buffer's records of the last
// window count, dated by the kernel's clock; older ones do not.
func TestRunReplaysOnlyTheWindow(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	h := newHarness(t, Options{Now: func() time.Time { return now }, Window: 10 * time.Minute}, nil)
	h.f.SetDevices(testDevices)
	h.write(3, 20*time.Minute, "mlx5_core 0000:03:00.1: from boot\n DEVICE=+pci:0000:03:00.1\n")
	h.write(3, 3*time.Minute, "mlx5_core 0000:03:00.0: before the restart\n DEVICE=+pci:0000:03:00.0\n")
	h.start()
	l := h.await(2*time.Second, "mlx5_0 err", has("mlx5_0", "err"))
	if len(l) != 1 || !l[0].First.Equal(now.Add(-3*time.Minute)) {
		t.Errorf("published %+v, want mlx5_0 only, First 3m before now", l)
	}
}

// epipeOnce returns EPIPE from its first Read, as /dev/kmsg does when the
// kernel overwrote records the reader had not read.
type epipeOnce struct {
	source
	done bool
}

func (e *epipeOnce) Read(b []byte) (int, error) {
	if !e.done {
		e.done = true
		return 0, &os.PathError{Op: "read", Path: "/dev/kmsg", Err: syscall.EPIPE}
	}
	return e.source.Read(b)
}

func TestRunCountsLostAndMalformed(t *testing.T) {
	h := newHarness(t, Options{}, func(s source) source { return &epipeOnce{source: s} })
	h.f.SetDevices(testDevices)
	h.start()
	if _, err := h.w.Write([]byte("garbage without a header\n")); err != nil {
		t.Fatal(err)
	}
	h.write(3, 0, "rxe0: after the loss\n")
	h.await(2*time.Second, "rxe0 err", has("rxe0", "err"))
	if s := h.f.Stats(); s.Lost != 1 || s.Malformed != 1 || s.Records != 1 {
		t.Errorf("stats %+v, want 1 lost, 1 malformed, 1 record", s)
	}
}

// TestRunExpires: a fault is dropped a window after its last message,
// and the drop is published.
func TestRunExpires(t *testing.T) {
	h := newHarness(t, Options{Window: 300 * time.Millisecond}, nil)
	h.f.SetDevices(testDevices)
	h.start()
	empty := func(l []apitype.KernelFault) bool { return len(l) == 0 }

	h.write(3, 0, "rxe0: will expire\n")
	h.await(2*time.Second, "rxe0 err", has("rxe0", "err"))
	start := time.Now()
	h.await(3*time.Second, "no faults", empty)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("expired after %v, window 300ms", d)
	}
}

// TestRunForget: Forget drops a device's faults at once and Run
// publishes it.
func TestRunForget(t *testing.T) {
	h := newHarness(t, Options{}, nil)
	h.f.SetDevices(testDevices)
	h.start()
	empty := func(l []apitype.KernelFault) bool { return len(l) == 0 }
	h.write(3, 0, "mlx5_core 0000:03:00.0: will be forgotten\n DEVICE=+pci:0000:03:00.0\n")
	h.await(2*time.Second, "mlx5_0 err", has("mlx5_0", "err"))
	h.f.Forget("mlx5_0")
	h.await(2*time.Second, "no faults after Forget", empty)
	if l := h.f.Faults(); len(l) != 0 {
		t.Errorf("Faults() after Forget = %+v", l)
	}
}

// TestRunFloodIsBounded: 10,000 matching records across 100 devices keep
// at most MaxFaults faults, are all read, and are published a bounded
// number of times (pacing), not once per record.
func TestRunFloodIsBounded(t *testing.T) {
	h := newHarness(t, Options{MaxFaults: 8, PublishInterval: 200 * time.Millisecond}, nil)
	var devs []Device
	for i := range 100 {
		devs = append(devs, Device{Name: fmt.Sprintf("flood%d", i)})
	}
	h.f.SetDevices(devs)
	h.start()
	const n = 10000
	start := time.Now()
	for i := range n {
		// Mostly one device (counts), now and then a new one
		// (eviction).
		d := 0
		if i%100 == 0 {
			d = i / 100
		}
		ts := time.Duration(h.mono.Load()) / time.Microsecond
		if _, err := fmt.Fprintf(h.w, "3,%d,%d,-;infiniband flood%d: flood %d\n", i, ts, d, i); err != nil {
			t.Fatal(err)
		}
	}
	for h.f.Stats().Records < n {
		if time.Since(start) > 30*time.Second {
			t.Fatalf("read %d of %d records in 30s", h.f.Stats().Records, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	elapsed := time.Since(start)
	if l := h.f.Faults(); len(l) > 8 {
		t.Errorf("%d faults kept, MaxFaults 8", len(l))
	}
	s := h.f.Stats()
	if s.Matched != n || s.Evicted < 90 {
		t.Errorf("stats %+v: want %d matched, about 92 evicted", s, n)
	}
	// A new fault may go out every 100 ms, counts every 200 ms.
	if calls, limit := h.calls.Load(), int64(elapsed/(100*time.Millisecond))+3; calls > limit {
		t.Errorf("%d publications in %v for %d records, want at most %d", calls, elapsed, n, limit)
	}
	var flood0 apitype.KernelFault
	for _, e := range h.f.Faults() {
		if e.Device == "flood0" {
			flood0 = e
		}
	}
	if flood0.Count < n-100 {
		t.Errorf("flood0 counted %d, want %d", flood0.Count, n-99)
	}
	t.Logf("%d records in %v, %d publications", n, elapsed, h.calls.Load())
}

// TestRunStopsWithoutDevices: a cancellation before the first SetDevices
// ends Run too.
func TestRunStopsWithoutDevices(t *testing.T) {
	h := newHarness(t, Options{}, nil)
	h.start()
	h.stop()
}

func TestRunOpenError(t *testing.T) {
	f := New(Options{Path: "/nonexistent/kmsg"})
	err := f.Run(context.Background())
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Run = %v, want an error matching ErrNotExist", err)
	}
}

// TestRunPermissionHint: an open refused for permission says what the
// kernel log needs.
func TestRunPermissionHint(t *testing.T) {
	f := New(Options{})
	f.open = func(path string) (source, error) {
		return nil, &os.PathError{Op: "open", Path: path, Err: syscall.EPERM}
	}
	err := f.Run(context.Background())
	if !errors.Is(err, os.ErrPermission) || !strings.Contains(err.Error(), "CAP_SYSLOG") {
		t.Errorf("Run = %v, want a permission error that names CAP_SYSLOG", err)
	}
}
