package bus

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/godbus/dbus/v5"
	"github.com/google/go-cmp/cmp"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon/service/servicetest"
)

func TestResourcesMethod(t *testing.T) {
	b := &servicetest.Backend{Res: apitype.Resources{
		Processes: []apitype.ProcessResources{
			{PID: 4242, Comm: "ibv_rc_pingpong", Devices: []string{"rxe0"}, ResourceCounts: apitype.ResourceCounts{QPs: 1, CQs: 1, MRs: 1, PDs: 1, PinnedBytes: 4096}},
			{Comm: "ib_core", Kernel: true, ResourceCounts: apitype.ResourceCounts{QPs: 1}},
		},
		Devices: []apitype.DeviceResources{{Device: "rxe0", ResourceCounts: apitype.ResourceCounts{QPs: 2, CQs: 1, MRs: 1, PDs: 1, PinnedBytes: 4096}}},
	}}
	h := newHandler(b, slog.New(slog.DiscardHandler))
	out, err := h.resources(context.Background(), call{})
	if err != nil {
		t.Fatal(err)
	}
	want := []any{
		[]processRow{{4242, "ibv_rc_pingpong", false, 1, 1, 1, 1, 4096}, {0, "ib_core", true, 1, 0, 0, 0, 0}},
		[]deviceRow{{"rxe0", 2, 1, 1, 1, 4096}},
		"",
	}
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("Resources (-want +got):\n%s", diff)
	}
	// The rows have the signatures the introspection data declares.
	if got := dbus.SignatureOf(out...).String(); got != "a(usbuuuut)a(suuuut)s" {
		t.Errorf("signature %s, want a(usbuuuut)a(suuuut)s", got)
	}

	b.SetErr("Resources", errors.New("rdmares: another read of the RDMA resources is in progress for over 10s; try again later"))
	_, err = h.resources(context.Background(), call{})
	var de *dbus.Error
	if !errors.As(err, &de) || de.Name != ErrFailed || !strings.Contains(de.Error(), "try again") {
		t.Errorf("busy: %v, want %s saying to try again", err, ErrFailed)
	}

	h = newHandler(servicetest.CoreOnly(&servicetest.Backend{}), slog.New(slog.DiscardHandler))
	if _, err := h.resources(context.Background(), call{}); !errors.As(err, &de) || de.Name != ErrNotSupported {
		t.Errorf("a backend without resources: %v, want %s", err, ErrNotSupported)
	}
}
