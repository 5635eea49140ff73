package memlock

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rdmad/rdmad/internal/size"
	"golang.org/x/sys/unix"
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
		{name: "domain injection", rules: []Rule{{Domain: "* hard nofile 1\n*", Soft: 1, Hard: 1}}, wantErr: `"* hard nofile 1\n*" is not a limits.conf domain`},
		{name: "uid range", rules: []Rule{{Domain: "1000:1999", Soft: size.KiB, Hard: size.KiB}, {Domain: "@:100", Soft: size.KiB, Hard: size.KiB}},
			want: limitsHeader + "1000:1999\tsoft\tmemlock\t1\n1000:1999\thard\tmemlock\t1\n@:100\tsoft\tmemlock\t1\n@:100\thard\tmemlock\t1\n"},
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

// TestDomainInjection performs the injections of issue #13 item 12: each
// control character or separator would make pam_limits read a second line,
// more fields or a comment. The renderer refuses every one of them itself,
// whatever validated (or did not validate) the value before.
func TestDomainInjection(t *testing.T) {
	for _, d := range []string{
		"*\vhard\tnproc\t0",     // \v: pam_limits splits fields at C isspace
		"*\x00hard nproc 0",     // \0: C string ends; the rest was a new rule
		"*\nhard nproc 0",       // a second line
		"*\rhard nproc 0",       // CR
		"*\fhard nproc 0",       // form feed
		"alice bob",             // two fields
		"@rdma#x",               // a comment
		"* hard nproc 0",        // spaces
		"\u0085",                // NEL
		"%rdma",                 // maxlogins only
		"-alice",                // option-like
		"@",                     // empty group
		strings.Repeat("a", 33), // too long
		"1000:x", ":", "2000:1000", "4294967295:", "@1:2:3",
	} {
		if err := CheckDomain(d); err == nil {
			t.Errorf("CheckDomain(%q) accepted it", d)
		}
		out, err := RenderLimits([]Rule{{Domain: d, Soft: size.KiB, Hard: size.KiB}})
		if err == nil {
			t.Errorf("RenderLimits(%q) = %q, want a refusal", d, out)
			continue
		}
		if strings.ContainsAny(err.Error(), "\n\v\r\x00") {
			t.Errorf("RenderLimits(%q): the error %q carries the control character", d, err)
		}
	}
	for _, d := range []string{"*", "alice", "@rdma", "svc.rdma_user-1", "@1000:", "1000:", ":999", "1000:2000", "@100:200", "@:5", "0:0",
		strings.Repeat("a", 32)} {
		if err := CheckDomain(d); err != nil {
			t.Errorf("CheckDomain(%q) = %v, want it accepted", d, err)
		}
	}
	if err := CheckDomain("%rdma"); err == nil || !strings.Contains(err.Error(), `use "@rdma"`) {
		t.Errorf("CheckDomain(%%rdma) = %v, want a hint to use @rdma", err)
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
	if removed, err := RemoveLimits(theirs); !errors.Is(err, ErrNotOurs) || removed {
		t.Errorf("RemoveLimits(admin file) = %v, %v; want an error and no removal", removed, err)
	}
	if _, err := os.Stat(theirs); err != nil {
		t.Errorf("admin file gone: %v", err)
	}
}

// TestWriteLimitsForeign: a file at the limits path that rdmad did not
// write (an admin's, a symlink to anything, a FIFO) is neither read through,
// overwritten nor replaced.
func TestWriteLimitsForeign(t *testing.T) {
	rules := []Rule{{Domain: "@rdma", Soft: Unlimited, Hard: Unlimited}}
	dir := t.TempDir()
	admin := filepath.Join(dir, "90-rdmad.conf")
	os.WriteFile(admin, []byte("@hpc hard memlock unlimited\n"), 0o644)
	if changed, err := WriteLimits(admin, rules); err == nil || changed || !errors.Is(err, ErrNotOurs) || !strings.Contains(err.Error(), "limits_file") {
		t.Errorf("WriteLimits over an admin's file = %v, %v; want ErrNotOurs with a hint", changed, err)
	}
	if b, _ := os.ReadFile(admin); string(b) != "@hpc hard memlock unlimited\n" {
		t.Errorf("admin's file changed to %q", b)
	}

	// A symlink at the path to a file elsewhere (say /etc/shadow): the
	// target is not written, the link not replaced.
	target := filepath.Join(dir, "shadow")
	os.WriteFile(target, []byte("root:x:0\n"), 0o600)
	link := filepath.Join(dir, "91-rdmad.conf")
	os.Symlink(target, link)
	if _, err := WriteLimits(link, rules); err == nil || !errors.Is(err, ErrNotOurs) {
		t.Errorf("WriteLimits over a symlink = %v, want ErrNotOurs", err)
	}
	// Even a symlink to a file with rdmad's header is not followed.
	ours := filepath.Join(dir, "ours.conf")
	if _, err := WriteLimits(ours, nil); err != nil {
		t.Fatal(err)
	}
	link2 := filepath.Join(dir, "92-rdmad.conf")
	os.Symlink(ours, link2)
	if _, err := WriteLimits(link2, rules); err == nil || !errors.Is(err, ErrNotOurs) {
		t.Errorf("WriteLimits over a symlink to rdmad's file = %v, want ErrNotOurs", err)
	}
	if b, _ := os.ReadFile(target); string(b) != "root:x:0\n" {
		t.Errorf("symlink target written: %q", b)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("symlink replaced: %v %v", fi, err)
	}
	if b, _ := os.ReadFile(ours); string(b) != limitsHeader {
		t.Errorf("rdmad's file changed through a symlink: %q", b)
	}

	fifo := filepath.Join(dir, "93-rdmad.conf")
	unix.Mkfifo(fifo, 0o644)
	done := make(chan error, 1)
	go func() { _, err := WriteLimits(fifo, rules); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrNotOurs) {
			t.Errorf("WriteLimits over a FIFO = %v, want ErrNotOurs", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("WriteLimits over a FIFO hangs")
	}
	// No temporary files are left behind by the refusals.
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("temporary file left: %s", e.Name())
		}
	}
}

// TestRemoveLimitsSymlink: removal never follows a symlink, neither to read
// the header nor to unlink, whatever the link points to.
func TestRemoveLimitsSymlink(t *testing.T) {
	dir := t.TempDir()
	ours := filepath.Join(dir, "real.conf")
	if _, err := WriteLimits(ours, []Rule{{Domain: "*", Soft: 1, Hard: 1}}); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "90-rdmad.conf")
	os.Symlink(ours, link)
	if removed, err := RemoveLimits(link); removed || !errors.Is(err, ErrNotOurs) {
		t.Errorf("RemoveLimits(symlink to rdmad's file) = %v, %v; want false, ErrNotOurs", removed, err)
	}
	if _, err := os.Lstat(link); err != nil {
		t.Errorf("symlink removed: %v", err)
	}
	if _, err := os.Stat(ours); err != nil {
		t.Errorf("symlink target removed: %v", err)
	}
	dangling := filepath.Join(dir, "91-rdmad.conf")
	os.Symlink(filepath.Join(dir, "nowhere"), dangling)
	if removed, err := RemoveLimits(dangling); removed || !errors.Is(err, ErrNotOurs) {
		t.Errorf("RemoveLimits(dangling symlink) = %v, %v; want false, ErrNotOurs", removed, err)
	}
	if _, err := os.Lstat(dangling); err != nil {
		t.Errorf("dangling symlink removed: %v", err)
	}
	// A header that is only similar is not rdmad's.
	near := filepath.Join(dir, "92-rdmad.conf")
	os.WriteFile(near, []byte("# managed by rdmad (copied by hand)\n* hard memlock 1\n"), 0o644)
	if removed, err := RemoveLimits(near); removed || !errors.Is(err, ErrNotOurs) {
		t.Errorf("RemoveLimits(near header) = %v, %v", removed, err)
	}
}

func TestWriteLimitsUmask(t *testing.T) {
	old := unix.Umask(0o077)
	defer unix.Umask(old)
	path := filepath.Join(t.TempDir(), "90-rdmad.conf")
	if _, err := WriteLimits(path, nil); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o644 {
		t.Errorf("mode under umask 077 = %v, %v; want 0644", st.Mode(), err)
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

// TestLimitsHeaderNamesConfig: the header names the configuration rdmad
// runs with, not a fixed path; a file written from another configuration
// is still rdmad's (overwritten, removed); a name that would break the
// comment line is not written.
func TestLimitsHeaderNamesConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "90-rdmad.conf")
	rules := []Rule{{Domain: "*", Soft: 1024, Hard: 1024}}
	if _, err := WriteLimitsFrom(path, "/srv/rdmad/node.toml", rules); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if !strings.HasPrefix(string(b), "# Managed by rdmad: written from the memlock settings in /srv/rdmad/node.toml.\n") {
		t.Errorf("header:\n%s", b)
	}
	if changed, err := WriteLimitsFrom(path, "/etc/rdmad/rdmad.toml", rules); err != nil || !changed {
		t.Errorf("rewrite from another configuration: %v, %v; want it rewritten", changed, err)
	}
	if h := header("/x\n*\thard\tmemlock\tunlimited"); strings.Count(h, "\n") != 2 || !strings.Contains(h, " rdmad.toml.") {
		t.Errorf("header of a name with a newline: %q", h)
	}
	if removed, err := RemoveLimits(path); err != nil || !removed {
		t.Errorf("RemoveLimits: %v, %v", removed, err)
	}
}
