package daemon

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon/state"
	"github.com/rdmad/rdmad/internal/syncbuf"
	"github.com/rdmad/rdmad/inventory"
	"github.com/rdmad/rdmad/verbs/loopback"
	"github.com/rdmad/rdmad/verbs/mrpool"
)

// releaseDaemon is a daemon whose inventory (an empty sysfs) no longer has
// the device its last snapshot listed, as when the kernel has just removed
// rxe0's uverbs node, with a real (empty) MR pool.
func releaseDaemon(t *testing.T) (*Daemon, *syncbuf.Buffer) {
	t.Helper()
	logs := &syncbuf.Buffer{}
	d := &Daemon{inv: inventory.Reader{Root: t.TempDir()}, log: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		reqs: make(chan func(), 8),
		store: state.NewStore(apitype.Snapshot{State: apitype.Running,
			Devices: []apitype.Device{{Name: "rxe0", Uverbs: "/dev/infiniband/uverbs0"}, {Name: "mlx5_0", Uverbs: "/dev/infiniband/uverbs1"}}})}
	pool, err := mrpool.New(mrpool.Config{Classes: []mrpool.Class{{Size: 4096, Count: 1}}, Logger: d.log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	d.verbs = newVerbsParts(d)
	d.verbs.pool = pool
	return d, logs
}

func TestUverbsDevice(t *testing.T) {
	devs := []apitype.Device{{Name: "rxe0", Uverbs: "/dev/infiniband/uverbs0"}, {Name: "mlx5_0", Uverbs: "/dev/infiniband/uverbs10"}, {Name: "hfi1_0"}}
	for uv, want := range map[string]string{"uverbs0": "rxe0", "uverbs10": "mlx5_0", "uverbs1": "", "": ""} {
		if got := uverbsDevice(devs, uv); got != want {
			t.Errorf("uverbsDevice(%q) = %q, want %q", uv, got, want)
		}
	}
}

// TestUverbsRemoveReleases: the removal uevent of a uverbs node releases
// its device by the name the inventory knew before the node went (the
// inventory read afterwards no longer maps it), once; the other device is
// untouched.
func TestUverbsRemoveReleases(t *testing.T) {
	d, logs := releaseDaemon(t)
	if got := d.uverbsEvent("remove", "uverbs0"); got != "rxe0" {
		t.Errorf("uverbsEvent(remove uverbs0) = %q, want rxe0", got)
	}
	if !d.verbs.released["rxe0"] || d.verbs.released["mlx5_0"] {
		t.Errorf("released %v, want only rxe0", d.verbs.released)
	}
	if n := len(d.store.Load().Devices); n != 0 {
		t.Errorf("inventory not read again after the event: %d devices", n)
	}
	if !strings.Contains(logs.String(), "device removed: every part let it go") || !strings.Contains(logs.String(), "uverbs0 removed") {
		t.Errorf("no release logged:\n%s", logs)
	}
	select {
	case <-d.verbs.results:
	default:
		t.Error("release did not signal a new snapshot")
	}
	// The device's own uevent comes once the kernel is done: harmless.
	d.verbs.deviceEvent("remove", "rxe0")
	if n := strings.Count(logs.String(), "every part let it go"); n != 1 || !strings.Contains(logs.String(), "device released again") {
		t.Errorf("%d release lines at info, want 1 (the second release is debug):\n%s", n, logs)
	}
}

// TestGoneReports: reports from the parts' goroutines reach the main loop
// through its request queue without blocking the part; a part's own
// conclusion is acted on only for a device libibverbs does not list (none
// on this host) and not yet released; DEVICE_FATAL always.
func TestGoneReports(t *testing.T) {
	d, logs := releaseDaemon(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go d.verbs.forwardGone(ctx)
	next := func() {
		t.Helper()
		select {
		case f := <-d.reqs:
			f()
		case <-time.After(5 * time.Second):
			t.Fatal("report not forwarded to the main loop")
		}
	}
	d.verbs.probeResult(probeGone("rxe0"))
	next()
	if !d.verbs.released["rxe0"] {
		t.Fatal("the prober's device_gone did not release rxe0")
	}
	d.verbs.probeResult(probeGone("rxe0")) // the next port of rxe0
	next()
	if strings.Contains(logs.String(), "device released again") {
		t.Errorf("a verified report released an already released device again:\n%s", logs)
	}
	d.verbs.reportGone(goneReport{device: "rxe0", why: "verbs async event DEVICE_FATAL"})
	next()
	if !strings.Contains(logs.String(), "device released again") {
		t.Errorf("DEVICE_FATAL of a released device was not acted on:\n%s", logs)
	}
	if n := strings.Count(logs.String(), "every part let it go"); n != 1 {
		t.Errorf("%d release lines at info, want 1", n)
	}
	// A full queue drops reports instead of blocking the caller.
	cancel()
	time.Sleep(10 * time.Millisecond)
	done := make(chan struct{})
	go func() {
		for range 100 {
			d.verbs.reportGone(goneReport{device: "mlx5_0", why: "flood"})
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("reportGone blocked on a full queue")
	}
}

func probeGone(dev string) loopback.PortResult {
	return loopback.PortResult{Device: dev, Port: 1, State: loopback.StateUnavailable, ErrorKind: loopback.KindDeviceGone,
		LastError: "probe: device " + dev + " was removed"}
}
