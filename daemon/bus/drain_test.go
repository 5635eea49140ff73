package bus

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon/service/servicetest"
)

// slowDoctor is a backend whose Doctor holds the call until its context
// ends, then takes a while to clean up.
type slowDoctor struct {
	*servicetest.Backend
	entered  chan struct{}
	returned atomic.Bool
}

func (s *slowDoctor) Doctor(ctx context.Context, _ time.Duration) (apitype.DoctorReport, error) {
	close(s.entered)
	<-ctx.Done()
	time.Sleep(200 * time.Millisecond)
	s.returned.Store(true)
	return apitype.DoctorReport{}, ctx.Err()
}

// TestIntegrationRunWaitsForCalls: godbus runs a method call on a goroutine
// of its own; Run returns only after a call in progress has returned (its
// context ends with the connection), so no backend call outlives the D-Bus
// service (#15: every goroutine has an owner that waits for it).
func TestIntegrationRunWaitsForCalls(t *testing.T) {
	requireRoot(t)
	startBus(t, "")
	store := newStore()
	sd := &slowDoctor{Backend: servicetest.ReloadOnly(store), entered: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{Store: store, Backend: sd, Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil)),
			MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
	}()
	obj := rootConn(t).Object(Name, Path)
	waitProperty(t, obj, "State", "running")
	go obj.Call(Interface+".Doctor", 0, uint32(0))
	select {
	case <-sd.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("Doctor did not reach the backend")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10 s of cancel")
	}
	if !sd.returned.Load() {
		t.Error("Run returned while a Doctor call was still running in the backend")
	}
}
