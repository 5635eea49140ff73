package service_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon/service"
	"github.com/rdmad/rdmad/daemon/service/servicetest"
)

// TestOptionalOperations: a Backend without an optional interface answers
// errors.ErrUnsupported, which both transports turn into "not supported",
// and one with it is asked.
func TestOptionalOperations(t *testing.T) {
	ctx := context.Background()
	fb := &servicetest.Backend{Res: apitype.Resources{Error: "fixture"}}
	if _, err := service.ReadResources(ctx, servicetest.CoreOnly(fb)); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("ReadResources without a ResourceReader: %v, want ErrUnsupported", err)
	}
	req, err := service.ParseBandwidthRequest("192.0.2.17", "", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := service.RunBandwidth(ctx, servicetest.CoreOnly(fb), req); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("RunBandwidth without a BandwidthTester: %v, want ErrUnsupported", err)
	}
	if n := len(fb.Calls()); n != 0 {
		t.Fatalf("the backend was called %q", fb.Calls())
	}
	if res, err := service.ReadResources(ctx, fb); err != nil || res.Error != "fixture" {
		t.Errorf("ReadResources: %+v, %v; want the backend's", res, err)
	}
	want := service.BandwidthRequest{Peer: "192.0.2.17", Op: service.DefaultBandwidthOp, Size: service.DefaultBandwidthSize, Duration: service.DefaultBandwidthDuration}
	if _, err := service.RunBandwidth(ctx, fb, req); err != nil {
		t.Errorf("RunBandwidth: %v", err)
	}
	if got := fb.Requests(); len(got) != 1 || got[0] != want {
		t.Errorf("the backend got %+v, want the defaults %+v", got, want)
	}
}

// TestParseLoopbackRequest: the loopback target is a device, a device
// and its port (rxe0:1 or rxe0/1) or nothing; qps and the common bounds
// are checked with errors that name the bad one.
func TestParseLoopbackRequest(t *testing.T) {
	for target, want := range map[string]service.BandwidthRequest{
		"":         {Loopback: true, Op: "write", Size: 65536, Duration: service.DefaultBandwidthDuration, QPs: 4},
		"rxe0":     {Loopback: true, Device: "rxe0", Op: "write", Size: 65536, Duration: service.DefaultBandwidthDuration, QPs: 4},
		"mlx5_0:2": {Loopback: true, Device: "mlx5_0", Port: 2, Op: "write", Size: 65536, Duration: service.DefaultBandwidthDuration, QPs: 4},
		"rxe0/1":   {Loopback: true, Device: "rxe0", Port: 1, Op: "write", Size: 65536, Duration: service.DefaultBandwidthDuration, QPs: 4},
	} {
		got, err := service.ParseLoopbackRequest(target, "", 0, 0, 4)
		if err != nil || got != want {
			t.Errorf("ParseLoopbackRequest(%q) = %+v, %v; want %+v", target, got, err, want)
		}
	}
	for _, tc := range []struct {
		target string
		qps    int
		op     string
		want   string
	}{
		{"rxe0", 17, "", "qps 17 is out of range; use 1 to 16"},
		{"rxe0", -1, "", "qps -1 is out of range"},
		{"rxe0:0", 1, "", `port "0" of rxe0 is not a port number`},
		{"rxe0:x", 1, "", `port "x" of rxe0 is not a port number`},
		{"rx e0", 1, "", `device "rx e0" is not an RDMA device name`},
		{":1", 1, "", `device "" is not an RDMA device name`},
		{"rxe0", 1, "atomic", `op "atomic": use write, read or send`},
	} {
		if _, err := service.ParseLoopbackRequest(tc.target, tc.op, 0, 0, tc.qps); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseLoopbackRequest(%q, qps %d, op %q) = %v; want %q", tc.target, tc.qps, tc.op, err, tc.want)
		}
	}
}
