package config

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

// TestProbeTrafficClass: [probe] traffic_class is unset by default (the
// probes follow [policy.roce] tos), takes 0 to 255, a drop-in overrides the
// main file, and a value out of range names the file and line that set it.
func TestProbeTrafficClass(t *testing.T) {
	cfg, err := Load(write(t, map[string]string{"rdmad.toml": "[probe]\nloopback = true\n"}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Probe.TrafficClass != nil {
		t.Errorf("default traffic_class = %d, want unset", *cfg.Probe.TrafficClass)
	}
	for _, v := range []int{0, 104, 255} {
		cfg, err := Load(write(t, map[string]string{"rdmad.toml": "[probe]\ntraffic_class = " + strconv.Itoa(v) + "\n"}))
		if err != nil {
			t.Fatalf("traffic_class = %d: %v", v, err)
		}
		if cfg.Probe.TrafficClass == nil || *cfg.Probe.TrafficClass != v {
			t.Errorf("traffic_class = %d loaded as %v", v, cfg.Probe.TrafficClass)
		}
	}
	cfg, err = Load(write(t, map[string]string{
		"rdmad.toml":            "[probe]\ntraffic_class = 104\n",
		"rdmad.d/50-class.toml": "[probe]\ntraffic_class = 106\n",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Probe.TrafficClass == nil || *cfg.Probe.TrafficClass != 106 {
		t.Errorf("drop-in traffic_class: got %v, want 106", cfg.Probe.TrafficClass)
	}
	for _, c := range []struct {
		files map[string]string
		want  string
	}{
		{map[string]string{"rdmad.toml": "[probe]\nloopback = true\ntraffic_class = 256\n"},
			"rdmad.toml:3: probe.traffic_class: 256 is out of range; use 0 to 255"},
		{map[string]string{"rdmad.toml": "[probe]\ntraffic_class = 0\n", "rdmad.d/50-class.toml": "\n[probe]\ntraffic_class = -1\n"},
			"rdmad.d/50-class.toml:3: probe.traffic_class: -1 is out of range"},
	} {
		_, err := Load(write(t, c.files))
		var errs Errors
		if !errors.As(err, &errs) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: got %v, want an error containing %q", c.files, err, c.want)
		}
	}
	_, err = Load(write(t, map[string]string{"rdmad.toml": "[probe]\ntraffic_class = \"af31\"\n"}))
	if err == nil || !strings.Contains(err.Error(), "probe.traffic_class") {
		t.Errorf("a string traffic_class: got %v, want an error naming the key", err)
	}
}
