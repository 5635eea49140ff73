package config

import (
	"errors"
	"strings"
	"testing"
)

// TestProbePoll: [probe] poll is "event" by default, takes "busy", a drop-in
// overrides the main file, and any other value is an error that names the
// file, the line, the key and the values it takes.
func TestProbePoll(t *testing.T) {
	cfg, err := Load(write(t, map[string]string{"rdmad.toml": "[probe]\nloopback = true\n"}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Probe.Poll != "event" {
		t.Errorf("default poll = %q, want \"event\"", cfg.Probe.Poll)
	}
	for _, v := range []string{"event", "busy"} {
		cfg, err := Load(write(t, map[string]string{"rdmad.toml": "[probe]\npoll = \"" + v + "\"\n"}))
		if err != nil {
			t.Fatalf("poll = %q: %v", v, err)
		}
		if cfg.Probe.Poll != v {
			t.Errorf("poll = %q loaded as %q", v, cfg.Probe.Poll)
		}
	}
	cfg, err = Load(write(t, map[string]string{
		"rdmad.toml":           "[probe]\npoll = \"event\"\n",
		"rdmad.d/50-poll.toml": "[probe]\npoll = \"busy\"\n",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Probe.Poll != "busy" {
		t.Errorf("drop-in poll: got %q, want \"busy\"", cfg.Probe.Poll)
	}
	allowed := `use "event" (the default: sleep on the completion channel after a 1 ms spin) or "busy"`
	for _, c := range []struct {
		files map[string]string
		want  string
	}{
		{map[string]string{"rdmad.toml": "[probe]\nloopback = true\npoll = \"spin\"\n"},
			`rdmad.toml:3: probe.poll: "spin" is not a poll mode; ` + allowed},
		{map[string]string{"rdmad.toml": "[probe]\npoll = \"busy\"\n", "rdmad.d/50-poll.toml": "\n[probe]\npoll = \"\"\n"},
			`rdmad.d/50-poll.toml:3: probe.poll: "" is not a poll mode; ` + allowed},
		{map[string]string{"rdmad.toml": "[probe]\npoll = \"Busy\"\n"},
			`rdmad.toml:2: probe.poll: "Busy" is not a poll mode`},
	} {
		_, err := Load(write(t, c.files))
		var errs Errors
		if !errors.As(err, &errs) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: got %v, want an error containing %q", c.files, err, c.want)
		}
	}
	_, err = Load(write(t, map[string]string{"rdmad.toml": "[probe]\npoll = true\n"}))
	if err == nil || !strings.Contains(err.Error(), "probe.poll") {
		t.Errorf("a boolean poll: got %v, want an error naming the key", err)
	}
}
