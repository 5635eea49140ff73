package daemon

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon/config"
)

// TestExpectRates: [health.expect]'s rates reach LinkDegraded's
// thresholds: a device's own (by name or PCI address) over the node's,
// the higher of it and a [[policy]] min_rate.
func TestExpectRates(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "rdmad.toml")
	if err := os.WriteFile(p, []byte(`
[health.expect]
rate = "100G"
[[health.expect.device]]
pci = "0000:17:00.0"
rate = "400G"
[[health.expect.device]]
name = "mlx5_2"

[[policy]]
name = "rate"
devices = ["mlx5_2"]
min_rate = "200G"
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	h := newHealthPart(slog.New(slog.DiscardHandler))
	h.configure(cfg)
	port := []apitype.Port{{Port: 1, State: "ACTIVE"}}
	h.observe([]apitype.Device{{Name: "mlx5_0", PCI: "0000:17:00.0", Ports: port}, {Name: "mlx5_1", PCI: "0000:2a:00.0", Ports: port},
		{Name: "mlx5_2", Ports: port}}, time.Now())
	for key, want := range map[string]float64{"mlx5_0/1": 400, "mlx5_1/1": 100, "mlx5_2/1": 200} {
		if got := h.expect.MinRateGbps[key]; got != want {
			t.Errorf("%s: threshold %g Gb/s, want %g", key, got, want)
		}
	}
}
