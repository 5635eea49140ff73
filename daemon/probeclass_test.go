package daemon

import (
	"testing"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/state"
)

// TestProbeClass: [probe] traffic_class wins; without it each port takes
// the [policy.roce] tos of the policy in charge of it (by device or by the
// netdev the inventory gives the port, the later policy winning), else 0;
// a new configuration is in force at once.
func TestProbeClass(t *testing.T) {
	tos := func(v int) *int { return &v }
	store := state.NewStore(apitype.Snapshot{Devices: []apitype.Device{
		{Name: "mlx5_0", Ports: []apitype.Port{{Port: 1, Netdev: "ens1f0"}, {Port: 2, Netdev: "ens1f1"}}},
		{Name: "rxe0", Ports: []apitype.Port{{Port: 1, Netdev: "eth0"}}},
	}})
	cfg := config.Default()
	cfg.Policies = []config.Policy{
		{Name: "by-netdev", Netdevs: []string{"ens1f*"}, RoCE: &config.RoCE{TOS: tos(106)}},
		{Name: "later", Netdevs: []string{"ens1f1"}, RoCE: &config.RoCE{TOS: tos(184)}},
		{Name: "by-device", Devices: []string{"rxe*"}, RoCE: &config.RoCE{TOS: tos(72)}},
		{Name: "mode-only", Devices: []string{"mlx5_9"}, RoCE: &config.RoCE{Mode: "v2"}},
	}
	c := newProbeClass(store, cfg)
	for _, tt := range []struct {
		dev  string
		port int
		want uint8
	}{{"mlx5_0", 1, 106}, {"mlx5_0", 2, 184}, {"rxe0", 1, 72}, {"mlx5_9", 1, 0}, {"mlx5_0", 3, 0}, {"other", 1, 0}} {
		if got := c.of(tt.dev, tt.port); got != tt.want {
			t.Errorf("policy class of %s/%d = %d, want %d", tt.dev, tt.port, got, tt.want)
		}
	}
	cfg2 := *cfg
	cfg2.Probe.TrafficClass = tos(0)
	c.set(&cfg2)
	for _, p := range [][2]any{{"mlx5_0", 1}, {"rxe0", 1}} {
		if got := c.of(p[0].(string), p[1].(int)); got != 0 {
			t.Errorf("traffic_class = 0: %v has class %d", p, got)
		}
	}
	cfg2.Probe.TrafficClass = tos(255)
	c.set(&cfg2)
	if got := c.of("rxe0", 1); got != 255 {
		t.Errorf("traffic_class = 255: rxe0/1 has class %d", got)
	}
	if got := (&probeClass{store: store}).of("rxe0", 1); got != 0 {
		t.Errorf("no configuration: class %d, want 0", got)
	}
}
