package peer

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rdmad/rdmad/probe/ud"
	"github.com/rdmad/rdmad/verbs"
)

// TestEngineWithoutVerbs runs the engine where verbs cannot be used (the
// build host: no uverbs, or a build without cgo). It must say so through
// Ports, with ErrUnavailable, refuse probes, and stop cleanly.
func TestEngineWithoutVerbs(t *testing.T) {
	if devs, err := verbs.Devices(); err == nil && len(devs) > 0 {
		t.Skip("this machine has RDMA devices; the e2e suite covers the engine there")
	}
	var got error
	reported := make(chan struct{}, 1)
	e, err := New(Config{OnPorts: func(_ []ud.LocalPort, err error) {
		got = err
		select {
		case reported <- struct{}{}:
		default:
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	select {
	case <-reported:
	case <-time.After(10 * time.Second):
		t.Fatal("no port report within 10s")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
	if !errors.Is(got, verbs.ErrUnavailable) {
		t.Errorf("OnPorts error = %v, want verbs.ErrUnavailable", got)
	}
	ports, perr := e.Ports()
	if len(ports) != 0 || !errors.Is(perr, verbs.ErrUnavailable) {
		t.Errorf("Ports = %v, %v; want none, ErrUnavailable", ports, perr)
	}
	ts := []ud.Target{{Dst: ud.Endpoint{QPN: 1}, Seq: 1}, {Dst: ud.Endpoint{QPN: 2}, Seq: 2}}
	if n := e.ProbeBatch("rxe0/1", ts); n != 0 || !errors.Is(ts[0].Err, ErrNoPort) || !errors.Is(ts[1].Err, ErrNoPort) {
		t.Errorf("ProbeBatch = %d, errors %v, %v; want 0 sent, ErrNoPort for each", n, ts[0].Err, ts[1].Err)
	}
}

func TestNewConfig(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr bool
	}{
		{"defaults", Config{}, false},
		{"negative slots", Config{SendSlots: -1}, true},
		{"too many slots", Config{RecvSlots: 8000, SendSlots: 8000}, true},
		// Every flow count [probe] flows accepts works with the default
		// slots (16 flows of 512 would pass the port's bound).
		{"most flows", Config{Flows: ud.MaxFlows}, false},
		{"4 flows", Config{Flows: 4}, false},
		{"too many flows", Config{Flows: ud.MaxFlows + 1}, true},
		{"16 flows of 512", Config{Flows: ud.MaxFlows, RecvSlots: 512}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := New(tt.cfg)
			if (err != nil) != tt.wantErr {
				t.Fatalf("New = %v, wantErr %v", err, tt.wantErr)
			}
			if err == nil && (e.qkey == 0 || e.qkey&0x80000000 != 0) {
				t.Errorf("qkey %#x: want non-zero, not controlled", e.qkey)
			}
		})
	}
}

// TestMaxBatch: the batch the manager may send fits the port's slots with
// the default configuration for every flow count, and with the defaults
// it is 1,024 up to 4 flows (a ten-thousand-peer window in three passes,
// issue #29): half the send slots, and one flow's receives, so that a
// batch whose replies all come to flow 0 (peers that admit no more)
// still finds receives posted for each.
func TestMaxBatch(t *testing.T) {
	for _, tc := range []struct {
		flows, want int
	}{{1, 1024}, {2, 1024}, {4, 1024}, {8, 768}, {ud.MaxFlows, 384}} {
		e, err := New(Config{Flows: tc.flows})
		if err != nil {
			t.Fatalf("%d flows: %v", tc.flows, err)
		}
		got := e.MaxBatch()
		if got != tc.want {
			t.Errorf("%d flows: MaxBatch = %d, want %d", tc.flows, got, tc.want)
		}
		if 2*got > e.cfg.SendSlots || got > e.cfg.RecvSlots {
			t.Errorf("%d flows: MaxBatch %d does not fit %d send and %d receive slots a flow", tc.flows, got, e.cfg.SendSlots, e.cfg.RecvSlots)
		}
		if n := tc.flows*e.cfg.RecvSlots + e.cfg.SendSlots; n > maxPortSlots {
			t.Errorf("%d flows: %d slots, more than %d", tc.flows, n, maxPortSlots)
		}
	}
	if e, _ := New(Config{RecvSlots: 16, SendSlots: 16}); e.MaxBatch() != 8 {
		t.Errorf("16 send and receive slots: MaxBatch = %d, want 8", e.MaxBatch())
	}
}
