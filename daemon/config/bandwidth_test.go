package config

import (
	"errors"
	"strings"
	"testing"
)

// TestProbeBandwidth checks [probe] bandwidth: off by default, a boolean,
// and a wrong type is an error naming file, line and key.
func TestProbeBandwidth(t *testing.T) {
	for _, tt := range []struct {
		body string
		want bool
	}{
		{"[probe]\n", false},
		{"[probe]\nbandwidth = true\n", true},
		{"[probe]\nbandwidth = false\n", false},
	} {
		cfg, err := Load(write(t, map[string]string{"rdmad.toml": tt.body}))
		if err != nil {
			t.Fatalf("%q: %v", tt.body, err)
		}
		if cfg.Probe.Bandwidth != tt.want {
			t.Errorf("%q: bandwidth %v, want %v", tt.body, cfg.Probe.Bandwidth, tt.want)
		}
	}
	if Default().Probe.Bandwidth {
		t.Error("bandwidth tests are on by default; a test fills the link, so they must be off")
	}
	_, err := Load(write(t, map[string]string{"rdmad.toml": "[probe]\nbandwidth = \"yes\"\n"}))
	var errs Errors
	if !errors.As(err, &errs) || !strings.Contains(err.Error(), "rdmad.toml:2") || !strings.Contains(err.Error(), "bandwidth") {
		t.Errorf("bandwidth = \"yes\": %v; want an error at rdmad.toml:2 naming the key", err)
	}
}
