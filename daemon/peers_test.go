package daemon

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rdmad/rdmad/internal/safefile"
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
		// Issue #24: a label reaches rdmactl peers, the metrics and
		// D-Bus; escapes, bidi controls and invalid UTF-8 are refused.
		{"bad group labels are skipped and named", "192.0.2.1 \x1b[2J\n192.0.2.2 tor\u202ea\n192.0.2.3 \xff\n192.0.2.4 tor-a\n",
			[]probe.Spec{{Name: "192.0.2.4", Group: "tor-a"}}, `line 1: "\x1b[2J" is not a group label; use 1 to 64 letters`},
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

// TestReadPeersFileOwner is issue #24 item 10: the peers file sets the
// control endpoint's allow list, so one that others may write, or that is
// not root's, is refused like the key file (and the error says the fix).
func TestReadPeersFileOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown to another uid needs root; run the tests as root (make test)")
	}
	for _, tt := range []struct {
		name string
		mode os.FileMode
		uid  int
		ok   bool
	}{
		{"root 0644", 0o644, 0, true},
		{"root 0600", 0o600, 0, true},
		{"root 0664 (group may write)", 0o664, 0, false},
		{"root 0646 (anyone may write)", 0o646, 0, false},
		{"uid 1 0644", 0o644, 1, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "peers")
			if err := os.WriteFile(p, []byte("192.0.2.17 tor-a\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(p, tt.mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(p, tt.uid, 0); err != nil {
				t.Fatal(err)
			}
			got, err := readPeersFile(p)
			if tt.ok {
				if err != nil || len(got) != 1 {
					t.Errorf("readPeersFile = %v, %v; want the peer", got, err)
				}
				return
			}
			if !errors.Is(err, safefile.ErrInsecure) || len(got) != 0 || !strings.Contains(err.Error(), "chmod go-w "+p) || !strings.Contains(err.Error(), "peers_file") {
				t.Errorf("readPeersFile = %v, %v; want no peers and ErrInsecure naming peers_file and the fix", got, err)
			}
		})
	}
}
