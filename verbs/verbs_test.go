package verbs

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// hostHasUverbs reports whether this machine's kernel exposes RDMA devices
// to userspace at all.
func hostHasUverbs() bool {
	_, err := os.Stat("/sys/class/infiniband_verbs")
	return err == nil
}

// TestUnavailableOnHostWithoutRDMA runs the real libibverbs (or the no-cgo
// build) against a kernel without uverbs: the answer must be ErrUnavailable
// with a reason, for listing and for opening, not a crash or a nil error.
func TestUnavailableOnHostWithoutRDMA(t *testing.T) {
	if hostHasUverbs() {
		t.Skip("this kernel has uverbs (/sys/class/infiniband_verbs exists); the unavailable path needs a kernel without RDMA support")
	}
	devs, err := Devices()
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Devices() = %v, %v; want an error matching ErrUnavailable", devs, err)
	}
	var ue *UnavailableError
	if !errors.As(err, &ue) || ue.Reason == "" {
		t.Fatalf("Devices() error %v carries no UnavailableError reason", err)
	}
	t.Logf("Devices: %v", err)
	ctx, err := Open("rxe0")
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Open(rxe0) = %v, %v; want an error matching ErrUnavailable", ctx, err)
	}
}

func TestErrorText(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"verb object errno hint", &Error{Verb: "ibv_reg_mr", Object: "1MiB on rxe0", Err: syscall.ENOMEM, Hint: "raise LimitMEMLOCK"},
			"ibv_reg_mr 1MiB on rxe0: cannot allocate memory; raise LimitMEMLOCK"},
		{"no hint", &Error{Verb: "ibv_alloc_pd", Object: "mlx5_0", Err: syscall.EIO}, "ibv_alloc_pd mlx5_0: input/output error"},
		{"no cause", &Error{Verb: "ibv_poll_cq", Object: "rxe0"}, "ibv_poll_cq rxe0: failed"},
		{"unavailable", &UnavailableError{Reason: "no devices", Err: syscall.ENOSYS}, "verbs unavailable: no devices: function not implemented"},
		{"unavailable no cause", &UnavailableError{Reason: "built without cgo"}, "verbs unavailable: built without cgo"},
		{"wc", WorkCompletion{WRID: 7, Status: WCFlushErr, StatusText: "Work Request Flushed Error", VendErr: 0x244}.Err(),
			"work completion 7: Work Request Flushed Error (status 5, vendor error 0x244)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, tt.err.Error()); diff != "" {
				t.Errorf("Error() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestErrorUnwrap(t *testing.T) {
	err := fmt.Errorf("mrpool: %w", &Error{Verb: "ibv_reg_mr", Err: syscall.ENOMEM})
	if !errors.Is(err, syscall.ENOMEM) {
		t.Errorf("errors.Is(%v, ENOMEM) = false", err)
	}
	if errors.Is(&Error{Verb: "x", Err: syscall.EIO}, ErrUnavailable) {
		t.Errorf("a plain verb error matches ErrUnavailable")
	}
	if !errors.Is(fmt.Errorf("open: %w", &UnavailableError{Reason: "r"}), ErrUnavailable) {
		t.Errorf("wrapped UnavailableError does not match ErrUnavailable")
	}
	if (WorkCompletion{Status: WCSuccess}).Err() != nil {
		t.Errorf("successful completion has an error")
	}
}

func TestMemlockHint(t *testing.T) {
	tests := []struct {
		name string
		st   MemlockStatus
		want string
	}{
		{"enforced", MemlockStatus{Limit: 8 << 20, Pinned: 7 << 20}, "RLIMIT_MEMLOCK is 8MiB with 7MiB already pinned, 1MiB more does not fit; raise LimitMEMLOCK= in rdmad.service (or ulimit -l) or shrink [mrpool] classes"},
		{"cap", MemlockStatus{Limit: 8 << 20, CapIPCLock: true}, "RLIMIT_MEMLOCK is not enforced (unlimited or CAP_IPC_LOCK); the host is short of memory or the device's MR limit is reached"},
		{"unlimited", MemlockStatus{Unlimited: true}, "RLIMIT_MEMLOCK is not enforced (unlimited or CAP_IPC_LOCK); the host is short of memory or the device's MR limit is reached"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, memlockHint(tt.st, 1<<20)); diff != "" {
				t.Errorf("memlockHint mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMemlockAvailable(t *testing.T) {
	tests := []struct {
		name     string
		st       MemlockStatus
		avail    uint64
		enforced bool
	}{
		{"room", MemlockStatus{Limit: 8 << 20, Pinned: 3 << 20}, 5 << 20, true},
		{"full", MemlockStatus{Limit: 8 << 20, Pinned: 9 << 20}, 0, true},
		{"cap", MemlockStatus{Limit: 8 << 20, CapIPCLock: true}, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, e := tt.st.Available()
			if a != tt.avail || e != tt.enforced {
				t.Errorf("Available() = %d, %v; want %d, %v", a, e, tt.avail, tt.enforced)
			}
		})
	}
}

func TestParseVmPin(t *testing.T) {
	status := []byte("Name:\trdmad\nVmLck:\t     12 kB\nVmPin:\t   2048 kB\nVmHWM:\t 100 kB\n")
	p, l := parseVmPin(status)
	if p != 2048*1024 || l != 12*1024 {
		t.Errorf("parseVmPin = %d, %d; want %d, %d", p, l, 2048*1024, 12*1024)
	}
}

func TestReadMemlockSelf(t *testing.T) {
	st, err := ReadMemlock()
	if err != nil {
		t.Fatal(err)
	}
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(8 /* RLIMIT_MEMLOCK */, &rl); err != nil {
		t.Fatal(err)
	}
	if st.Limit != rl.Cur {
		t.Errorf("Limit = %d, getrlimit says %d", st.Limit, rl.Cur)
	}
	if os.Geteuid() == 0 && !st.CapIPCLock {
		t.Logf("running as root without CAP_IPC_LOCK (a restricted container?)")
	}
}

func TestBuffer(t *testing.T) {
	b, err := AllocBuffer(5000)
	if err != nil {
		t.Fatal(err)
	}
	mem := b.Bytes()
	if len(mem) != 5000 || cap(mem)%os.Getpagesize() != 0 {
		t.Errorf("len %d cap %d; want 5000 and whole pages", len(mem), cap(mem))
	}
	if addr := uintptrOf(mem); addr%uintptr(os.Getpagesize()) != 0 {
		t.Errorf("buffer at %#x is not page aligned", addr)
	}
	mem[4999] = 1
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if b.Bytes() != nil || b.Close() != nil {
		t.Errorf("after Close: Bytes non-nil or second Close failed")
	}
	if _, err := AllocBuffer(0); err == nil {
		t.Errorf("AllocBuffer(0) succeeded")
	}
}

func TestPickGID(t *testing.T) {
	v4 := GID{10: 0xff, 11: 0xff, 12: 10, 13: 0, 14: 2, 15: 15}
	ll := GID{0: 0xfe, 1: 0x80, 15: 1}
	table := []GIDEntry{
		{Index: 0, GID: ll, Type: GIDTypeRoCEv1},
		{Index: 1, GID: ll, Type: GIDTypeRoCEv2},
		{Index: 2, GID: v4, Type: GIDTypeRoCEv1},
		{Index: 3, GID: v4, Type: GIDTypeRoCEv2},
	}
	tests := []struct {
		name  string
		table []GIDEntry
		ll    LinkLayer
		want  int
		ok    bool
	}{
		{"roce prefers v2 ipv4", table, LinkLayerEthernet, 3, true},
		{"roce v2 link-local over v1", table[:3], LinkLayerEthernet, 1, true},
		{"roce v1 only", table[:1], LinkLayerEthernet, 0, true},
		{"ib", []GIDEntry{{Index: 0, GID: ll, Type: GIDTypeIB}, {Index: 1, GID: v4, Type: GIDTypeIB}}, LinkLayerInfiniBand, 0, true},
		{"ib ignores roce", table, LinkLayerInfiniBand, 0, false},
		{"empty", nil, LinkLayerEthernet, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, ok := PickGID(tt.table, tt.ll)
			if ok != tt.ok || (ok && e.Index != tt.want) {
				t.Errorf("PickGID = index %d, %v; want %d, %v", e.Index, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestAsyncEventString(t *testing.T) {
	tests := []struct {
		ev   AsyncEvent
		want string
	}{
		{AsyncEvent{Device: "rxe0", Type: EventPortActive, Port: 1}, "rxe0 port 1: PORT_ACTIVE"},
		{AsyncEvent{Device: "rxe0", Type: EventQPFatal, QPNum: 0x11}, "rxe0 QP 0x11: QP_FATAL"},
		{AsyncEvent{Device: "rxe0", Type: EventDeviceFatal}, "rxe0: DEVICE_FATAL"},
		{AsyncEvent{Device: "mlx5_0", Type: EventGIDChange, Port: 2}, "mlx5_0 port 2: GID_CHANGE"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := tt.ev.String(); got != tt.want {
				t.Errorf("String() = %q, want %q", got, tt.want)
			}
		})
	}
}
