//go:build linux && verbsfake

package daemon

import (
	"strings"
	"testing"

	"github.com/rdmad/rdmad/verbs"
)

// These tests run the daemon's device release against the fake NIC
// (-tags verbsfake): a device the MR pool really registered on, with an
// open context, PD and MR to let go of.

// fakePoolDaemon is releaseDaemon with its pool registered on a fake rxe0.
func fakePoolDaemon(t *testing.T) (*Daemon, func() string) {
	t.Helper()
	// Registered first, so it runs last: after the pool's Close.
	t.Cleanup(func() {
		verbs.FakeReset()
		if live := verbs.FakeLive(); len(live) != 0 {
			t.Errorf("verbs objects left open: %v", live)
		}
	})
	if err := verbs.FakeAddDevice(verbs.FakeDevice{Name: "rxe0"}); err != nil {
		t.Fatal(err)
	}
	d, logs := releaseDaemon(t)
	if err := d.verbs.pool.AddDevice("rxe0"); err != nil {
		t.Fatal(err)
	}
	if live := verbs.FakeLive(); live["context"] != 1 || live["mr"] != 1 {
		t.Fatalf("the pool holds %v on rxe0, want a context and an MR", live)
	}
	return d, logs.String
}

// TestFakeUverbsRemoveFreesDevice: the removal uevent of rxe0's uverbs
// node makes the pool close everything it had on the device at once.
func TestFakeUverbsRemoveFreesDevice(t *testing.T) {
	d, _ := fakePoolDaemon(t)
	verbs.FakeRemoveDevice("rxe0")
	if got := d.uverbsEvent("remove", "uverbs0"); got != "rxe0" {
		t.Fatalf("uverbsEvent(remove uverbs0) = %q, want rxe0", got)
	}
	if d.verbs.pool.Device("rxe0") != nil {
		t.Error("the pool still has rxe0")
	}
	if live := verbs.FakeLive(); len(live) != 0 {
		t.Errorf("rxe0's objects are open after its release: %v", live)
	}
}

// TestFakeGoneVerified: a part's own conclusion that a device is gone is
// not acted on while libibverbs still lists the device (here, the fake
// lists it), and is once it does not.
func TestFakeGoneVerified(t *testing.T) {
	d, logs := fakePoolDaemon(t)
	d.verbs.deviceGone(goneReport{device: "rxe0", why: "mrpool: test", verify: true})
	if d.verbs.released["rxe0"] || d.verbs.pool.Device("rxe0") == nil {
		t.Fatal("a listed device was released on a part's unverified report")
	}
	verbs.FakeRemoveDevice("rxe0")
	d.verbs.deviceGone(goneReport{device: "rxe0", why: "mrpool: test", verify: true})
	if !d.verbs.released["rxe0"] || d.verbs.pool.Device("rxe0") != nil {
		t.Fatal("an unlisted device was not released")
	}
	if !strings.Contains(logs(), "every part let it go") {
		t.Errorf("no release logged:\n%s", logs())
	}
	if live := verbs.FakeLive(); len(live) != 0 {
		t.Errorf("rxe0's objects are open after its release: %v", live)
	}
}
