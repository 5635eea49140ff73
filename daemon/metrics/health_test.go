package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
)

func scrapeSnapshot(t *testing.T, snap *apitype.Snapshot) string {
	t.Helper()
	return string(scrape(t, NewCollector(Options{Snapshot: func() *apitype.Snapshot { return snap }, SysfsRoot: t.TempDir(), GoVersion: "go1.x"})))
}

// TestHealthyNoDevice: a node without RDMA devices reports rdmad_healthy 0
// (nothing on it is proven to work), one with a device 1.
func TestHealthyNoDevice(t *testing.T) {
	now := time.Now()
	none := &apitype.Snapshot{State: apitype.Degraded, Devices: []apitype.Device{},
		Components: map[string]apitype.Component{"inventory": {State: apitype.Unavailable, Error: apitype.NoDevice, Since: now}}}
	if out := scrapeSnapshot(t, none); !strings.Contains(out, "\nrdmad_healthy 0\n") {
		t.Errorf("without devices: want rdmad_healthy 0 in\n%s", out)
	}
	one := &apitype.Snapshot{State: apitype.Running, Devices: []apitype.Device{{Name: "rxe0"}},
		Components: map[string]apitype.Component{"inventory": {State: apitype.OK, Since: now}}}
	if out := scrapeSnapshot(t, one); !strings.Contains(out, "\nrdmad_healthy 1\n") {
		t.Errorf("with a device: want rdmad_healthy 1 in\n%s", out)
	}
}

// TestPeerGroupFault: every group of a probed peer has the gauge, 1 for
// the suspects.
func TestPeerGroupFault(t *testing.T) {
	snap := &apitype.Snapshot{Peers: apitype.Peers{
		Ports: []apitype.PeerPort{{Key: "rxe0/1"}},
		Peers: []apitype.Peer{
			{Name: "192.0.2.17", Group: "tor-a", State: apitype.PeerDown},
			{Name: "192.0.2.18", Group: "tor-a", State: apitype.PeerDown},
			{Name: "192.0.2.30", Group: "tor-b", State: apitype.PeerUp},
			{Name: "192.0.2.40", State: apitype.PeerUp},
		},
		GroupFaults: []apitype.GroupFault{{Group: "tor-a", Reason: "all 2 probed peers of group tor-a are down"}},
	}}
	out := scrapeSnapshot(t, snap)
	for _, want := range []string{`rdmad_peer_group_fault{group="tor-a"} 1`, `rdmad_peer_group_fault{group="tor-b"} 0`} {
		if !strings.Contains(out, want) {
			t.Errorf("scrape lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, `rdmad_peer_group_fault{group=""}`) {
		t.Errorf("a gauge for peers without a group:\n%s", out)
	}
}

// TestPeerPortStuck: every probe port has rdmad_peer_port_stuck, 1 while
// the manager has it cut off because its post does not return.
func TestPeerPortStuck(t *testing.T) {
	snap := &apitype.Snapshot{Peers: apitype.Peers{Ports: []apitype.PeerPort{
		{Key: "mlx5_0/1", Stuck: "its post of probes (ibv_post_send) has not returned since 2026-12-07T10:00:00Z"},
		{Key: "mlx5_1/1"},
	}}}
	out := scrapeSnapshot(t, snap)
	for _, want := range []string{`rdmad_peer_port_stuck{local="mlx5_0/1"} 1`, `rdmad_peer_port_stuck{local="mlx5_1/1"} 0`} {
		if !strings.Contains(out, want) {
			t.Errorf("scrape lacks %s:\n%s", want, out)
		}
	}
}
