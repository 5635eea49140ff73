package loopback

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestPatternCheck(t *testing.T) {
	b := make([]byte, 64)
	fill(b, 42, opWrite)
	if err := check(opWrite, b, 42); err != nil {
		t.Fatalf("check of a fresh fill: %v", err)
	}
	tests := []struct {
		name string
		mod  func([]byte)
		seq  uint64
		op   int
		want string
	}{
		{"stale round", func([]byte) {}, 41, opWrite, "probe: RDMA WRITE data mismatch at byte 0: sent 0x29, received 0x2a"},
		{"other op", func([]byte) {}, 42, opRead, "probe: RDMA READ data mismatch at byte 8: sent 0x"},
		{"flipped byte", func(b []byte) { b[63] ^= 0xff }, 42, opWrite, "probe: RDMA WRITE data mismatch at byte 63"},
		{"zeroed", func(b []byte) { clear(b) }, 42, opWrite, "probe: RDMA WRITE data mismatch at byte 0: sent 0x2a, received 0x00"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := append([]byte(nil), b...)
			tt.mod(c)
			err := check(tt.op, c, tt.seq)
			var mm *mismatchError
			if !errors.As(err, &mm) || !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("check = %v, want a mismatch starting %q", err, tt.want)
			}
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	tests := []struct {
		name    string
		in      Config
		want    Config
		wantErr bool
	}{
		{"zero", Config{}, Config{Interval: time.Second, Timeout: 500 * time.Millisecond, Rescan: 5 * time.Second, Window: 300, Payload: 64, Spin: time.Millisecond, Poll: PollEvent}, false},
		{"timeout capped by interval", Config{Interval: 100 * time.Millisecond, Timeout: time.Second, Spin: -1},
			Config{Interval: 100 * time.Millisecond, Timeout: 100 * time.Millisecond, Rescan: 5 * time.Second, Window: 300, Payload: 64, Poll: PollEvent}, false},
		{"busy poll kept", Config{Poll: PollBusy},
			Config{Interval: time.Second, Timeout: 500 * time.Millisecond, Rescan: 5 * time.Second, Window: 300, Payload: 64, Spin: time.Millisecond, Poll: PollBusy}, false},
		{"unknown poll mode", Config{Poll: "spin"}, Config{}, true},
		{"payload too big", Config{Payload: 4096}, Config{}, true},
		{"negative interval", Config{Interval: -time.Second}, Config{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.in.setDefaults()
			if (err != nil) != tt.wantErr {
				t.Fatalf("setDefaults() = %v, want error %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if diff := cmp.Diff(tt.want, tt.in, cmpopts.IgnoreFields(Config{}, "Logger")); diff != "" {
				t.Errorf("config mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestResultsAccounting(t *testing.T) {
	var got []PortResult
	r, err := New(Config{Window: 10, OnResult: func(p PortResult) { got = append(got, p) }})
	if err != nil {
		t.Fatal(err)
	}
	r.update("rxe1", 1, func(ps *portState) { ps.res.State = StateOK })
	r.update("rxe0", 2, func(ps *portState) { ps.res.State = StatePaused })
	r.update("rxe0", 1, func(ps *portState) { ps.res.State = StateOK })
	r.markDevice("rxe0", StateUnavailable, KindDeviceGone, errors.New("probe: device rxe0 was removed"))
	snap := r.Snapshot()
	want := []PortResult{
		{Device: "rxe0", Port: 1, State: StateUnavailable, ErrorKind: KindDeviceGone, LastError: "probe: device rxe0 was removed"},
		{Device: "rxe0", Port: 2, State: StateUnavailable, ErrorKind: KindDeviceGone, LastError: "probe: device rxe0 was removed"},
		{Device: "rxe1", Port: 1, State: StateOK},
	}
	if diff := cmp.Diff(want, snap.Ports, cmpopts.IgnoreFields(PortResult{}, "UpdatedAt")); diff != "" {
		t.Errorf("Snapshot mismatch (-want +got):\n%s", diff)
	}
	for _, p := range snap.Ports {
		if p.UpdatedAt.IsZero() {
			t.Errorf("%s port %d: UpdatedAt not set", p.Device, p.Port)
		}
	}
	if len(got) != 5 {
		t.Errorf("OnResult called %d times, want 5 (3 updates + 2 marks)", len(got))
	}
	// A snapshot is a copy: changing it changes nothing in the Runner.
	snap.Ports[0].State = StateOK
	if r.Snapshot().Ports[0].State != StateUnavailable {
		t.Errorf("Snapshot shares memory with the Runner")
	}
}

// TestRunUnavailable runs the Runner against this host's real verbs: with
// no uverbs in the kernel it must report unavailable, probe nothing, and
// stop when its context ends.
func TestRunUnavailable(t *testing.T) {
	if _, err := os.Stat("/sys/class/infiniband_verbs"); err == nil {
		t.Skip("this kernel has uverbs; the unavailable path needs a kernel without RDMA support")
	}
	r, err := New(Config{Rescan: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := r.Run(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Run = %v, want the context's error", err)
	}
	snap := r.Snapshot()
	if !strings.Contains(snap.Unavailable, "verbs unavailable") || len(snap.Ports) != 0 {
		t.Errorf("Snapshot = %+v, want unavailable with a reason and no ports", snap)
	}
}
