package config

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestProbeAuth checks [probe] key_file and auth: auth defaults to
// "require" with a key, "prefer" is kept, and what the configuration alone
// can get wrong is an error naming file, line and key.
func TestProbeAuth(t *testing.T) {
	for _, tt := range []struct {
		body, want string
	}{
		{"[probe]\nkey_file = \"/etc/rdmad/fleet.key\"\n", "require"},
		{"[probe]\nkey_file = \"/etc/rdmad/fleet.key\"\nauth = \"prefer\"\n", "prefer"},
		{"[probe]\n", ""},
	} {
		cfg, err := Load(write(t, map[string]string{"rdmad.toml": tt.body}))
		if err != nil {
			t.Fatalf("%q: %v", tt.body, err)
		}
		if cfg.Probe.Auth != tt.want {
			t.Errorf("%q: auth %q, want %q", tt.body, cfg.Probe.Auth, tt.want)
		}
	}
	for _, tt := range []struct {
		body string
		want []string
	}{
		{"[probe]\nkey_file = \"fleet.key\"\n", []string{`D/rdmad.toml:2: probe.key_file: "fleet.key" is not an absolute path; use e.g. "/etc/rdmad/fleet.key"`}},
		{"[probe]\nauth = \"require\"\n", []string{`D/rdmad.toml:2: probe.auth: "require" needs a key: set [probe] key_file (or remove auth)`}},
		{"[probe]\nkey_file = \"/k\"\nauth = \"yes\"\n", []string{`D/rdmad.toml:3: probe.auth: "yes" is not an auth mode; use "require" (default with key_file) or "prefer" (during a rollout: unauthenticated peers are still answered, but flagged)`}},
	} {
		p := write(t, map[string]string{"rdmad.toml": tt.body})
		_, err := Load(p)
		var errs Errors
		if !errors.As(err, &errs) {
			t.Fatalf("%q: error %v, want config.Errors", tt.body, err)
		}
		var got []string
		for _, e := range errs {
			got = append(got, strings.ReplaceAll(e.Error(), filepath.Dir(p), "D"))
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%q: errors (-want +got):\n%s", tt.body, diff)
		}
	}
}
