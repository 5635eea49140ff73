package bus

import (
	"strings"
	"testing"
)

// TestReadOnlyNamesRunningConfig: the error of a Set on a read-only
// property names the configuration file rdmad runs with, not a fixed
// /etc/rdmad/rdmad.toml (issue #27 item 3).
func TestReadOnlyNamesRunningConfig(t *testing.T) {
	snap := newStore().Load()
	s := *snap
	s.Config.Path = "/srv/rdmad/node.toml"
	o := serverObject{v: newView(&s), path: Path}
	_, err := o.set(call{args: []any{Interface, "State"}})
	if err == nil || !strings.Contains(err.Error(), "change /srv/rdmad/node.toml and call Reload") {
		t.Errorf("Set State: %v; want the error to name /srv/rdmad/node.toml", err)
	}
}
