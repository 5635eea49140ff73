package mrpool

import (
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/google/go-cmp/cmp"
	"github.com/rdmad/rdmad/internal/cgroupmem"
	"github.com/rdmad/rdmad/internal/size"
	"github.com/rdmad/rdmad/verbs"
)

// newTestDevicePool builds a device pool whose classes are mapped but not
// registered (this host has no RDMA device): it exercises the accounting
// and the lock-free stack exactly as the registered pool runs them. The
// registered path runs in e2e/verbs_test.go inside the Soft-RoCE VM.
func newTestDevicePool(t testing.TB, classes ...Class) *DevicePool {
	t.Helper()
	d := &DevicePool{name: "test0"}
	for _, c := range classes {
		cl, err := allocClass(d, c)
		if err != nil {
			t.Fatal(err)
		}
		d.classes = append(d.classes, cl)
	}
	t.Cleanup(func() { d.close() })
	return d
}

func TestClassSizeTOML(t *testing.T) {
	// Class sizes decode like every size in the configuration (package
	// size), integers of bytes included.
	var c struct{ Classes []Class }
	if _, err := toml.Decode("classes = [{size = \"4KiB\", count = 2}, {size = 8192, count = 1}]", &c); err != nil {
		t.Fatal(err)
	}
	if c.Classes[0].Size != 4*size.KiB || c.Classes[1].Size != 8192 {
		t.Errorf("decoded %+v", c.Classes)
	}
}

func TestPlanBudget(t *testing.T) {
	page := int64(os.Getpagesize())
	classes := []Class{{4 << 10, 256}, {1 << 20, 8}}
	need := int64(256*4<<10 + 8<<20)
	tests := []struct {
		name     string
		avail    int64
		wantFits []int
		wantErr  bool
	}{
		{"all fit", 64 << 20, []int{256, 8}, false},
		{"exact", need, []int{256, 8}, false},
		{"8MiB", 8 << 20, []int{256, 7}, true},
		{"first class partly", 512 << 10, []int{128, 0}, true},
		{"nothing", 0, []int{0, 0}, true},
		{"one page", page, []int{int(page / 4096), 0}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fits, gotNeed, err := PlanBudget(classes, tt.avail)
			if gotNeed != need {
				t.Errorf("need = %d, want %d", gotNeed, need)
			}
			var got []int
			var used int64
			for _, f := range fits {
				got = append(got, f.Fits)
				used += f.Bytes
			}
			if diff := cmp.Diff(tt.wantFits, got); diff != "" {
				t.Errorf("fits mismatch (-want +got):\n%s", diff)
			}
			if used > tt.avail {
				t.Errorf("fits use %d bytes, more than the %d available", used, tt.avail)
			}
			var be *BudgetError
			if tt.wantErr != errors.As(err, &be) {
				t.Fatalf("error = %v, want BudgetError: %v", err, tt.wantErr)
			}
		})
	}
}

func TestBudgetErrorText(t *testing.T) {
	_, _, err := PlanBudget([]Class{{4 << 10, 256}, {1 << 20, 8}}, 8<<20)
	var be *BudgetError
	if !errors.As(err, &be) {
		t.Fatalf("PlanBudget error = %v, want *BudgetError", err)
	}
	be.Device, be.Limit = "rxe0", 8<<20
	want := "mrpool: register buffers on rxe0: classes need 9MiB of locked memory but only 8MiB of RLIMIT_MEMLOCK 8MiB is left; " +
		"would fit: 4KiB x 256 of 256, 1MiB x 7 of 8; raise LimitMEMLOCK= in rdmad.service to at least 1MiB more, or lower [mrpool] classes counts"
	if diff := cmp.Diff(want, be.Error()); diff != "" {
		t.Errorf("Error() mismatch (-want +got):\n%s", diff)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		classes []Class
		wantErr string
	}{
		{"ok", []Class{{4096, 1}, {8192, 2}}, ""},
		{"zero count", []Class{{4096, 0}}, "count must be positive"},
		{"zero size", []Class{{0, 1}}, "size must be positive"},
		{"duplicate", []Class{{4096, 1}, {4096, 2}}, "appears twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := validate(tt.classes)
			if (tt.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("validate = %v, want error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestAddDeviceBudget(t *testing.T) {
	p, err := New(Config{Classes: []Class{{4 << 10, 256}, {1 << 20, 8}}})
	if err != nil {
		t.Fatal(err)
	}
	p.cfg.memlock = func() (verbs.MemlockStatus, error) {
		return verbs.MemlockStatus{Limit: 8 << 20, Pinned: 0}, nil
	}
	err = p.AddDevice("rxe0")
	var be *BudgetError
	if !errors.As(err, &be) {
		t.Fatalf("AddDevice with an 8MiB budget = %v, want *BudgetError", err)
	}
	if be.Device != "rxe0" || be.Limit != 8<<20 {
		t.Errorf("BudgetError names device %q limit %d", be.Device, be.Limit)
	}
	if p.Device("rxe0") != nil {
		t.Errorf("device registered despite the budget error")
	}
}

func TestGetPutAccounting(t *testing.T) {
	d := newTestDevicePool(t, Class{4 << 10, 3}, Class{64 << 10, 1})
	var held []Buf
	for i := 0; i < 3; i++ {
		b, ok := d.Get(100)
		if !ok || b.Size() != 4<<10 {
			t.Fatalf("Get(100) #%d = size %d, %v", i, b.Size(), ok)
		}
		held = append(held, b)
	}
	// The 4KiB class is empty: a small Get falls through to 64KiB.
	b, ok := d.Get(100)
	if !ok || b.Size() != 64<<10 {
		t.Fatalf("Get(100) after exhausting 4KiB = size %d, %v; want the 64KiB buffer", b.Size(), ok)
	}
	held = append(held, b)
	if _, ok := d.Get(1); ok {
		t.Errorf("Get succeeded with every buffer held")
	}
	if _, ok := d.Get(1 << 20); ok {
		t.Errorf("Get(1MiB) succeeded with no class that large")
	}
	// Buffers do not overlap and are where their class says.
	seen := map[*byte]bool{}
	for _, b := range held {
		p := &b.Bytes()[0]
		if seen[p] {
			t.Errorf("two buffers share memory at %p", p)
		}
		seen[p] = true
		b.Bytes()[len(b.Bytes())-1] = 0xAA // in range, mapped
	}
	for _, b := range held {
		d.Put(b)
	}
	p := &Pool{wanted: map[string]bool{}, canary: map[string]*canaryStats{}}
	m := map[string]*DevicePool{"test0": d}
	p.devs.Store(&m)
	p.wanted["test0"] = true
	got := p.Stats()[0]
	want := DeviceStats{Device: "test0", Registered: true, Failures: 2, TooLarge: 1, HighWaterBytes: 3*4<<10 + 64<<10,
		Classes: []ClassStats{{Size: 4 << 10, Count: 3, HighWater: 3, Gets: 3, Exhausted: 2}, {Size: 64 << 10, Count: 1, HighWater: 1, Gets: 1, Exhausted: 1}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Stats mismatch (-want +got):\n%s", diff)
	}
}

func TestDoublePutPanics(t *testing.T) {
	d := newTestDevicePool(t, Class{4 << 10, 2})
	b, _ := d.Get(1)
	d.Put(b)
	defer func() {
		if recover() == nil {
			t.Errorf("second Put did not panic")
		}
	}()
	d.Put(b)
}

// TestCloseWhileHeld checks that closing a device pool (device removed)
// keeps held buffers mapped until their Put, and refuses new Gets.
func TestCloseWhileHeld(t *testing.T) {
	d := newTestDevicePool(t, Class{4 << 10, 2})
	b, _ := d.Get(1)
	d.close()
	if d.unmapped.Load() {
		t.Fatalf("memory unmapped while a buffer is held")
	}
	b.Bytes()[0] = 1 // must not fault
	if _, ok := d.Get(1); ok {
		t.Errorf("Get succeeded on a closed pool")
	}
	d.Put(b)
	if !d.unmapped.Load() {
		t.Errorf("memory still mapped after the last Put on a closed pool")
	}
}

func TestConcurrentGetPut(t *testing.T) {
	const workers, rounds, count = 8, 20000, 4
	d := newTestDevicePool(t, Class{4 << 10, count})
	var wg sync.WaitGroup
	var mu sync.Mutex
	owner := map[uint32]int{}
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				b, ok := d.Get(1)
				if !ok {
					continue
				}
				// Each buffer must be held by one worker at a time.
				b.Bytes()[0] = byte(w)
				if i%512 == 0 {
					mu.Lock()
					if o, dup := owner[b.i]; dup {
						t.Errorf("buffer %d held by workers %d and %d", b.i, o, w)
					}
					owner[b.i] = w
					mu.Unlock()
					mu.Lock()
					delete(owner, b.i)
					mu.Unlock()
				}
				if b.Bytes()[0] != byte(w) {
					t.Errorf("buffer %d written by another worker while held", b.i)
				}
				d.Put(b)
			}
		}()
	}
	wg.Wait()
	c := d.classes[0]
	if c.inUse.Load() != 0 || d.inUse.Load() != 0 {
		t.Errorf("in use after all Puts: class %d device %d", c.inUse.Load(), d.inUse.Load())
	}
	n := 0
	for _, ok := c.pop(); ok; _, ok = c.pop() {
		n++
	}
	if n != count {
		t.Errorf("free stack holds %d buffers after the run, want %d", n, count)
	}
}

func TestGetPutNoAllocs(t *testing.T) {
	d := newTestDevicePool(t, Class{4 << 10, 4})
	allocs := testing.AllocsPerRun(1000, func() {
		b, _ := d.Get(4096)
		d.Put(b)
	})
	if allocs != 0 {
		t.Errorf("Get+Put allocates %v times per call, want 0", allocs)
	}
}

// BenchmarkGetPut is the pool's fast path: one Get and one Put.
func BenchmarkGetPut(b *testing.B) {
	for _, sz := range []size.Size{4 << 10, 64 << 10, 1 << 20} {
		b.Run(sz.String(), func(b *testing.B) {
			d := newTestDevicePool(b, Class{sz, 8})
			b.ReportAllocs()
			for b.Loop() {
				x, _ := d.Get(int(sz))
				d.Put(x)
			}
		})
	}
}

// BenchmarkGetPutParallel shows contention on one class from all cores.
func BenchmarkGetPutParallel(b *testing.B) {
	d := newTestDevicePool(b, Class{4 << 10, 256})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			x, _ := d.Get(1)
			d.Put(x)
		}
	})
}

// BenchmarkChanFreeList is the alternative the design considered: a
// buffered channel of free indices per class. Kept to compare against the
// Treiber stack (see docs/BENCHMARKS.md).
func BenchmarkChanFreeList(b *testing.B) {
	free := make(chan uint32, 256)
	for i := range 256 {
		free <- uint32(i)
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			i := <-free
			free <- i
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				i := <-free
				free <- i
			}
		})
	})
}

// TestAddDeviceCgroupBudget: classes that do not fit in what the memory
// cgroup (MemoryMax=) leaves are refused with an error naming MemoryMax=,
// the cgroup and what would fit, before any device is opened: past the
// limit the kernel would kill rdmad instead (issue #24 item 12).
func TestAddDeviceCgroupBudget(t *testing.T) {
	p, err := New(Config{Classes: []Class{{4 << 10, 256}, {1 << 20, 8}}})
	if err != nil {
		t.Fatal(err)
	}
	p.cfg.memlock = func() (verbs.MemlockStatus, error) { return verbs.MemlockStatus{Unlimited: true}, nil }
	p.cfg.memcg = func() (cgroupmem.Limit, error) {
		// 200 MiB limit, 4 MiB used: 196 MiB left, 4 MiB after the reserve.
		return cgroupmem.Limit{Limited: true, Max: 200 << 20, Current: 4 << 20, Cgroup: "/system.slice/rdmad.service"}, nil
	}
	err = p.AddDevice("rxe0")
	var be *BudgetError
	if !errors.As(err, &be) {
		t.Fatalf("AddDevice with 4 MiB left in the cgroup = %v, want *BudgetError", err)
	}
	for _, want := range []string{"rxe0", "/system.slice/rdmad.service", "MemoryMax=", "systemctl edit rdmad", "4MiB", "1MiB x 3 of 8"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if p.Device("rxe0") != nil {
		t.Error("a device was registered past the cgroup's limit")
	}
}

// TestCgroupUnreadable: a cgroup that cannot be read does not stop the pool
// at the check (RLIMIT_MEMLOCK still bounds it); it is logged.
func TestCgroupUnreadable(t *testing.T) {
	var logs strings.Builder
	p, err := New(Config{Classes: []Class{{4 << 10, 1}}, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	p.cfg.memcg = func() (cgroupmem.Limit, error) {
		return cgroupmem.Limit{}, errors.New("cgroupmem: read /proc/self/cgroup: boom")
	}
	if err := p.checkCgroup("rxe0"); err != nil {
		t.Fatalf("checkCgroup with an unreadable cgroup = %v, want nil", err)
	}
	if !strings.Contains(logs.String(), "boom") {
		t.Errorf("log %q does not carry the read error", logs.String())
	}
	p.cfg.memcg = func() (cgroupmem.Limit, error) { return cgroupmem.Limit{Limited: true, Max: 1 << 30}, nil }
	if err := p.checkCgroup("rxe0"); err != nil {
		t.Errorf("checkCgroup with 1 GiB left = %v, want nil", err)
	}
}
