package peer

import (
	"io"
	"log/slog"
	"testing"
)

// TestReleaseDevice: ReleaseDevice marks the device for Run's next scan and
// wakes Run at once; the scan consumes the mark (it closes the device's
// ports and context, and opens it again only if it is listed).
func TestReleaseDevice(t *testing.T) {
	e, err := New(Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	e.ReleaseDevice("rxe0")
	select {
	case <-e.kick:
	default:
		t.Fatal("ReleaseDevice did not wake Run")
	}
	e.mu.Lock()
	marked := e.released["rxe0"]
	e.mu.Unlock()
	if !marked {
		t.Fatal("ReleaseDevice did not mark rxe0")
	}
	e.scan(map[string]*device{})
	e.mu.Lock()
	left := len(e.released)
	e.mu.Unlock()
	if left != 0 {
		t.Errorf("scan left %d release marks, want none", left)
	}
}
