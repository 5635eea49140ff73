package memlock

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rdmad/rdmad/internal/size"
)

func TestRenderLimits(t *testing.T) {
	tests := []struct {
		name    string
		rules   []Rule
		want    string
		wantErr string
	}{
		{
			name:  "everyone and a group",
			rules: []Rule{{Domain: "*", Soft: 64 * size.MiB, Hard: Unlimited}, {Domain: "@rdma", Soft: Unlimited, Hard: Unlimited}},
			want: limitsHeader +
				"*\tsoft\tmemlock\t65536\n*\thard\tmemlock\tunlimited\n" +
				"@rdma\tsoft\tmemlock\tunlimited\n@rdma\thard\tmemlock\tunlimited\n",
		},
		{
			name:  "rounded up to KiB",
			rules: []Rule{{Domain: "alice", Soft: 1, Hard: 1025}},
			want:  limitsHeader + "alice\tsoft\tmemlock\t1\nalice\thard\tmemlock\t2\n",
		},
		{name: "no rules", want: limitsHeader},
		{name: "soft above hard", rules: []Rule{{Domain: "*", Soft: 2 * size.MiB, Hard: size.MiB}}, wantErr: "soft limit 2MiB above hard limit 1MiB"},
		{name: "empty domain", rules: []Rule{{Soft: 1, Hard: 1}}, wantErr: "empty domain"},
		{name: "domain injection", rules: []Rule{{Domain: "* hard nofile 1\n*", Soft: 1, Hard: 1}}, wantErr: "contains whitespace"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := RenderLimits(tt.rules)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("RenderLimits error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("RenderLimits: %v", err)
			}
			if diff := cmp.Diff(tt.want, string(got)); diff != "" {
				t.Errorf("RenderLimits (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWriteLimits(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "90-rdmad.conf")
	rules := []Rule{{Domain: "@rdma", Soft: Unlimited, Hard: Unlimited}}

	changed, err := WriteLimits(path, rules)
	if err != nil || !changed {
		t.Fatalf("first WriteLimits = %v, %v; want true, nil", changed, err)
	}
	want, _ := RenderLimits(rules)
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("file content (-want +got):\n%s", diff)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o644 {
		t.Errorf("mode = %v, %v; want 0644", st.Mode(), err)
	}

	// Same content: no write at all (the inode stays the same).
	ino := inode(t, path)
	if changed, err := WriteLimits(path, rules); err != nil || changed {
		t.Errorf("second WriteLimits = %v, %v; want false, nil", changed, err)
	}
	if inode(t, path) != ino {
		t.Errorf("unchanged content was rewritten")
	}

	// Different content: replaced by rename (new inode), no temp files left.
	if changed, err := WriteLimits(path, []Rule{{Domain: "*", Soft: 64 * size.MiB, Hard: 64 * size.MiB}}); err != nil || !changed {
		t.Errorf("WriteLimits with new rules = %v, %v; want true, nil", changed, err)
	}
	if inode(t, path) == ino {
		t.Errorf("file was modified in place, not replaced atomically")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only the drop-in: %v", len(entries), entries)
	}

	if _, err := WriteLimits(filepath.Join(dir, "missing", "x.conf"), rules); err == nil || !strings.Contains(err.Error(), "libpam-modules") {
		t.Errorf("WriteLimits into a missing directory = %v, want an error with a hint", err)
	}
}

func TestRemoveLimits(t *testing.T) {
	dir := t.TempDir()
	ours := filepath.Join(dir, "90-rdmad.conf")
	if _, err := WriteLimits(ours, nil); err != nil {
		t.Fatal(err)
	}
	if removed, err := RemoveLimits(ours); err != nil || !removed {
		t.Errorf("RemoveLimits(ours) = %v, %v; want true, nil", removed, err)
	}
	if removed, err := RemoveLimits(ours); err != nil || removed {
		t.Errorf("RemoveLimits(missing) = %v, %v; want false, nil", removed, err)
	}
	theirs := filepath.Join(dir, "90-admin.conf")
	os.WriteFile(theirs, []byte("* hard memlock unlimited\n"), 0o644)
	if removed, err := RemoveLimits(theirs); err == nil || removed {
		t.Errorf("RemoveLimits(admin file) = %v, %v; want an error and no removal", removed, err)
	}
	if _, err := os.Stat(theirs); err != nil {
		t.Errorf("admin file gone: %v", err)
	}
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return statIno(st)
}
