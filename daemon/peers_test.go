package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rdmad/rdmad/probe"
)

func TestReadPeersFile(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		want    []probe.Spec
		wantErr string
	}{
		{"addresses, names, groups, comments", "# fleet\n192.0.2.17 tor-a\n\nnode-b.example   # no group\n2001:db8::1 tor-b\n",
			[]probe.Spec{{Name: "192.0.2.17", Group: "tor-a"}, {Name: "node-b.example"}, {Name: "2001:db8::1", Group: "tor-b"}}, ""},
		{"bad lines are skipped and named", "192.0.2.1\nnot/a/host\n192.0.2.2 a b\n192.0.2.3\n",
			[]probe.Spec{{Name: "192.0.2.1"}, {Name: "192.0.2.3"}}, "line 2: \"not/a/host\" is neither an IP address nor a host name; line 3: want \"address [group]\", got 3 fields"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "peers")
			if err := os.WriteFile(p, []byte(tt.body), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := readPeersFile(p)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("peers (-want +got):\n%s", diff)
			}
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("error = %v, want it to contain %q", err, tt.wantErr)
			}
		})
	}
	if _, err := readPeersFile(filepath.Join(t.TempDir(), "missing")); err == nil || !strings.Contains(err.Error(), "peers_file") {
		t.Errorf("missing file: %v, want an error naming peers_file", err)
	}
}
