package daemon

import (
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon/state"
	"github.com/rdmad/rdmad/inventory"
)

// TestSummariseNoDevice: a node without RDMA devices is degraded, and the
// summary (also systemd's STATUS=) says why and what to do; a device
// appearing makes it running again.
func TestSummariseNoDevice(t *testing.T) {
	d := &Daemon{}
	s := &apitype.Snapshot{Devices: []apitype.Device{}, Config: apitype.Config{Generation: 1}}
	state.SetComponent(s, apitype.ComponentInventory, apitype.Unavailable, nil, time.Now())
	d.summarise(s, apitype.Running)
	if s.State != apitype.Degraded {
		t.Errorf("state %q without devices, want degraded", s.State)
	}
	for _, want := range []string{"degraded; no RDMA device: rdmad can prove nothing on this node", "rdma link add rxe0 type rxe netdev eth0", "ls /sys/class/infiniband", "config generation 1"} {
		if !strings.Contains(s.Summary, want) {
			t.Errorf("summary %q lacks %q", s.Summary, want)
		}
	}
	s.Devices = []apitype.Device{{Name: "rxe0", Ports: []apitype.Port{{Port: 1, State: "ACTIVE"}}}}
	state.SetComponent(s, apitype.ComponentInventory, apitype.OK, nil, time.Now())
	d.summarise(s, apitype.Running)
	if s.State != apitype.Running || !strings.Contains(s.Summary, "1 devices, 1/1 ports active") {
		t.Errorf("with a device: %q, %q; want running with the device count", s.State, s.Summary)
	}
}

// TestRefreshDeviceGone: the inventory finding no device while rdmad runs
// turns it degraded at once (not only at the next reload or policy pass).
func TestRefreshDeviceGone(t *testing.T) {
	d := &Daemon{inv: inventory.Reader{Root: t.TempDir()}, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		store: state.NewStore(apitype.Snapshot{State: apitype.Running, Devices: []apitype.Device{{Name: "rxe0"}}})}
	d.refresh("test")
	s := d.store.Load()
	if s.State != apitype.Degraded || !strings.Contains(s.Summary, "no RDMA device") || s.Healthy() {
		t.Errorf("after the device went: state %q, summary %q, healthy %v; want degraded, no RDMA device, unhealthy", s.State, s.Summary, s.Healthy())
	}
	if c := s.Components[apitype.ComponentInventory]; c.State != apitype.Unavailable || !strings.Contains(c.Reason, "rdma link add") || c.Error != "" {
		t.Errorf("inventory component %+v, want unavailable with the fix as its reason and no error", c)
	}
}
