package daemon

import (
	"os"
	"testing"
)

// TestStateDir: the option first, then systemd's STATE_DIRECTORY (its
// first path), then /var/lib/rdmad only where it exists; a relative
// STATE_DIRECTORY is not taken.
func TestStateDir(t *testing.T) {
	t.Setenv("STATE_DIRECTORY", "/run/x/rdmad:/run/y")
	if got := stateDir("/opt/state"); got != "/opt/state" {
		t.Errorf("option: got %q", got)
	}
	if got := stateDir(""); got != "/run/x/rdmad" {
		t.Errorf("STATE_DIRECTORY: got %q", got)
	}
	want := ""
	if fi, err := os.Stat(DefaultStateDir); err == nil && fi.IsDir() {
		want = DefaultStateDir
	}
	for _, env := range []string{"", "relative/dir"} {
		t.Setenv("STATE_DIRECTORY", env)
		if got := stateDir(""); got != want {
			t.Errorf("STATE_DIRECTORY=%q: got %q, want %q", env, got, want)
		}
	}
}
