package loopback

import (
	"context"
	"errors"
	"testing"
)

// TestReleaseDevice: ReleaseDevice ends the context of the device's probing
// goroutine with errReleased (runDevice then reports its ports device_gone
// and closes the device) and makes Run look at the device list again; a
// device that is not probed is left alone.
func TestReleaseDevice(t *testing.T) {
	r, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	r.ReleaseDevice("rxe0") // nothing probed: a no-op
	select {
	case <-r.rescan:
		t.Error("ReleaseDevice of a device not probed triggered a rescan")
	default:
	}

	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	r.setRunning("rxe0", cancel)
	other, cancelOther := context.WithCancelCause(context.Background())
	defer cancelOther(nil)
	r.setRunning("rxe1", cancelOther)

	r.ReleaseDevice("rxe0")
	if !errors.Is(context.Cause(ctx), errReleased) {
		t.Errorf("device context cause %v, want errReleased", context.Cause(ctx))
	}
	if other.Err() != nil {
		t.Error("ReleaseDevice(rxe0) ended rxe1's context")
	}
	select {
	case <-r.rescan:
	default:
		t.Error("ReleaseDevice did not trigger a rescan")
	}
	r.setRunning("rxe0", nil)
	r.ReleaseDevice("rxe0") // the goroutine has gone: a no-op
	select {
	case <-r.rescan:
		t.Error("ReleaseDevice after the device stopped triggered a rescan")
	default:
	}
}
