package service_test

import (
	"context"
	"errors"
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
