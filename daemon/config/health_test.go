package config

import (
	"strings"
	"testing"
	"time"
)

func TestHealthConfig(t *testing.T) {
	p := write(t, map[string]string{"rdmad.toml": `
[health]
ignore = ["mlx5_1", "mlx5_0/2"]
flap_downs = 4
flap_window = "1m"
min_loopback_gbps = 8
min_loopback_share = 0.9

[[policy]]
name = "rate"
devices = ["mlx5_*"]
min_rate = "200Gb/s"
`})
	cfg, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	h := cfg.Health
	if len(h.Ignore) != 2 || h.FlapDowns != 4 || h.FlapWindow.Duration != time.Minute || h.FlapQuiet.Duration != DefaultFlapQuiet || !h.KernelLog ||
		h.MinLoopbackGbps != 8 || h.MinLoopbackShare != 0.9 || h.FlapLongDowns != DefaultFlapLongDowns || h.FlapLongWindow.Duration != 6*time.Hour {
		t.Errorf("health %+v", h)
	}
	// The long window: set, and switched off (its window is then not
	// judged against flap_window).
	for body, want := range map[string][2]int{
		"[health]\nflap_long_downs = 3\nflap_long_window = \"12h\"\n": {3, 12},
		"[health]\nflap_long_downs = 0\nflap_long_window = \"1m\"\n":  {0, 0},
	} {
		cfg, err := Load(write(t, map[string]string{"rdmad.toml": body}))
		if err != nil {
			t.Fatalf("%q: %v", body, err)
		}
		if h := cfg.Health; h.FlapLongDowns != want[0] || (want[0] > 0 && h.FlapLongWindow.Duration != time.Duration(want[1])*time.Hour) {
			t.Errorf("%q: %+v", body, h)
		}
	}
	// [health.expect]: its keys, and a drop-in's device list replacing
	// the main file's.
	cfg2, err := Load(write(t, map[string]string{"rdmad.toml": `
[health]
ignore = ["0000:5f:00.0"]
[health.expect]
devices = 8
ports = 1
rate = "400Gb/s"
[[health.expect.device]]
name = "mlx5_0"
rail = "rail0"
[[health.expect.device]]
pci = "0000:2a:00.0"
ports = 2
rate = "200G"
`, "rdmad.d/10-rails.toml": `
[[health.expect.device]]
name = "mlx5_7"
rail = "rail7"
`}))
	if err != nil {
		t.Fatal(err)
	}
	x := cfg2.Health.Expect
	if x.Devices != 8 || x.Ports != 1 || x.RateGbps != 400 || len(x.Device) != 1 || x.Device[0].Name != "mlx5_7" || x.Device[0].Rail != "rail7" {
		t.Errorf("expect with a drop-in: %+v", x)
	}
	cfg3, err := Load(write(t, map[string]string{"rdmad.toml": "[[health.expect.device]]\npci = \"0000:2a:00.0\"\nports = 2\nrate = \"200G\"\n"}))
	if err != nil {
		t.Fatal(err)
	}
	if d := cfg3.Health.Expect.Device; len(d) != 1 || d[0].PCI != "0000:2a:00.0" || d[0].Ports != 2 || d[0].RateGbps != 200 {
		t.Errorf("expect device: %+v", d)
	}
	pol := cfg.Policies[0]
	if pol.MinRateGbps != 200 || pol.MinRateFor("mlx5_0", "") != 200 || pol.MinRateFor("rxe0", "eth0") != 0 {
		t.Errorf("min_rate %+v", pol)
	}
}

func TestHealthConfigErrors(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{"[health]\nignore = [\"mlx5_0/x\"]\n", `rdmad.toml:2: health.ignore: "mlx5_0/x" is not a device, port or PCI function`},
		{"[health]\nignore = [\"0000:17:00.0/1\"]\n", `health.ignore: "0000:17:00.0/1" is not a device, port or PCI function`},
		{"[health.expect]\ndevices = -1\n", "rdmad.toml:2: health.expect.devices: -1 is out of range; use 0 (not checked) to 1024"},
		{"[health.expect]\nports = 256\n", "rdmad.toml:2: health.expect.ports: 256 is out of range"},
		{"[health.expect]\nrate = \"fast\"\n", `rdmad.toml:2: health.expect.rate: "fast" is not a link rate`},
		{"[health.expect]\ndevices = 1\n[[health.expect.device]]\nname = \"a\"\n[[health.expect.device]]\nname = \"b\"\n", "health.expect.devices: 1, but 2 [[health.expect.device]] are listed"},
		{"[[health.expect.device]]\nrail = \"r1\"\n", "rdmad.toml:1: health.expect.device[0]: names no device; give name = \"mlx5_0\""},
		{"[[health.expect.device]]\nname = \"mlx5_0\"\npci = \"0000:17:00.0\"\n", `rdmad.toml:3: health.expect.device[0].pci: gives both name "mlx5_0" and pci "0000:17:00.0"; give one`},
		{"[[health.expect.device]]\nname = \"mlx5 0\"\n", `rdmad.toml:2: health.expect.device[0].name: "mlx5 0" is not an RDMA device name`},
		{"[[health.expect.device]]\npci = \"17:00.0\"\n", `rdmad.toml:2: health.expect.device[0].pci: "17:00.0" is not a PCI function; write it as lspci -D shows it`},
		{"[[health.expect.device]]\npci = \"0000:17:00.0\"\n[[health.expect.device]]\npci = \"0000:17:00.0\"\n", `health.expect.device[1]: "0000:17:00.0" is listed twice (device[0] too)`},
		{"[[health.expect.device]]\nname = \"mlx5_0\"\nrail = \"r\\u001b[31m\"\n", `health.expect.device[0].rail: "r\x1b[31m" is not a rail label`},
		{"[[health.expect.device]]\nname = \"mlx5_0\"\nports = -2\n", "health.expect.device[0].ports: -2 is out of range"},
		{"[[health.expect.device]]\nname = \"mlx5_0\"\nrate = \"0G\"\n", `health.expect.device[0].rate: "0G" is not a link rate`},
		{"[health.expect]\ncount = 8\n", "health.expect.count"},
		{"[health]\nflap_downs = 0\n", "rdmad.toml:2: health.flap_downs: 0 is out of range; use 1 to 1000"},
		{"[health]\nflap_window = \"10ms\"\n", "rdmad.toml:2: health.flap_window: 10ms is out of range"},
		{"[health]\nflap_long_downs = -1\n", "rdmad.toml:2: health.flap_long_downs: -1 is out of range; use 0 (no long window) to 1000 downs (default 2)"},
		{"[health]\nflap_long_downs = 1001\n", "rdmad.toml:2: health.flap_long_downs: 1001 is out of range"},
		{"[health]\nflap_long_window = \"200h\"\n", "rdmad.toml:2: health.flap_long_window: 200h0m0s is out of range; use 1s to 168h (default 6h0m0s)"},
		{"[health]\nflap_window = \"1h\"\nflap_long_window = \"30m\"\n", "rdmad.toml:3: health.flap_long_window: 30m0s is not longer than flap_window (1h0m0s)"},
		{"[health]\nmin_loopback_gbps = -1\n", "rdmad.toml:2: health.min_loopback_gbps: -1 is out of range; use 0 (none) to 100000 Gb/s"},
		{"[health]\nmin_loopback_share = 90\n", "rdmad.toml:2: health.min_loopback_share: 90 is out of range; use 0 (none) to 1"},
		{"[health]\nmin_loopback_share = nan\n", "health.min_loopback_share: NaN is out of range"},
		{"[[policy]]\nname = \"r\"\ndevices = [\"x\"]\nmin_rate = \"fast\"\n", `rdmad.toml:4: policy "r".min_rate: "fast" is not a link rate; write e.g. "200Gb/s"`},
	} {
		_, err := Load(write(t, map[string]string{"rdmad.toml": tc.body}))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.body, err, tc.want)
		}
	}
}

func TestParseRate(t *testing.T) {
	for in, want := range map[string]float64{"200Gb/s": 200, "200 Gb/s": 200, "100G": 100, "25Gbps": 25, "400": 400,
		"800Mb/s": 0.8, "1.6T": 1600} {
		if got, err := ParseRate(in); err != nil || got != want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "fast", "-1G", "0", "1e9G"} {
		if _, err := ParseRate(in); err == nil {
			t.Errorf("ParseRate(%q) accepted", in)
		}
	}
}
