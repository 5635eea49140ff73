package policy

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/policy/memlock"
)

func memlockTargets(ps []apitype.PolicyStatus) []apitype.Target {
	for _, p := range ps {
		if p.Name == "memlock" {
			return p.Targets
		}
	}
	return nil
}

// TestUserMemlockRemoved is issue #13 item 13 at the reconciler: the
// limits.d file goes when [memlock] users goes (and from its old path when
// limits_file moves), is reported as a target, and a file rdmad did not
// write is never removed.
func TestUserMemlockRemoved(t *testing.T) {
	r := &Reconciler{log: slog.New(slog.NewTextHandler(io.Discard, nil)), now: time.Now,
		targets: map[string]entry{}, unsupported: map[string]int{}}
	dir := t.TempDir()
	a, b := filepath.Join(dir, "90-rdmad.conf"), filepath.Join(dir, "91-rdmad.conf")
	size := memlock.Size(64 << 20)
	decl := Declared{Memlock: Memlock{UsersDomain: "*", LimitsFile: memlock.DefaultLimitsPath}}
	decl.Memlock.Users, decl.Memlock.LimitsFile = &size, a

	_, ps := r.Pass(decl, nil, nil, true)
	if ts := memlockTargets(ps); len(ts) != 1 || ts[0].State != apitype.Applied || ts[0].Object != a {
		t.Fatalf("write: targets %+v", ts)
	}
	if !memlock.IsOurs(a) {
		t.Fatalf("%s not written", a)
	}

	// limits_file moves: written at b, removed at a.
	decl.Memlock.LimitsFile = b
	_, ps = r.Pass(decl, nil, nil, true)
	if _, err := os.Lstat(a); !os.IsNotExist(err) {
		t.Errorf("old limits file %s still there: %v", a, err)
	}
	if !memlock.IsOurs(b) {
		t.Errorf("new limits file %s not written", b)
	}
	var removed bool
	for _, tg := range memlockTargets(ps) {
		if tg.Object == a && tg.State == apitype.Applied && tg.Actual == "(removed)" {
			removed = true
		}
	}
	if !removed {
		t.Errorf("the removal of %s is not reported: %+v", a, memlockTargets(ps))
	}

	// The key goes: a diff says the file would go, then a pass removes it.
	decl.Memlock.Users = nil
	cs, _ := r.Pass(decl, nil, nil, false)
	if len(cs) != 1 || cs[0].Object != b || cs[0].To != "(removed)" {
		t.Errorf("diff without users: %+v, want the removal of %s", cs, b)
	}
	if !memlock.IsOurs(b) {
		t.Fatalf("a diff removed %s", b)
	}
	_, ps = r.Pass(decl, nil, nil, true)
	if _, err := os.Lstat(b); !os.IsNotExist(err) {
		t.Errorf("limits file %s still there after users went: %v", b, err)
	}
	if ts := memlockTargets(ps); len(ts) != 1 || ts[0].State != apitype.Applied || ts[0].Object != b {
		t.Errorf("removal target: %+v", ts)
	}
	// Next pass: nothing to do, nothing reported.
	if _, ps = r.Pass(decl, nil, nil, true); len(memlockTargets(ps)) != 0 {
		t.Errorf("after the removal: %+v", memlockTargets(ps))
	}

	// An admin's file at the path, and a symlink to rdmad's header: kept,
	// quietly (they are not rdmad's business without the key).
	os.WriteFile(b, []byte("@hpc hard memlock unlimited\n"), 0o644)
	other := filepath.Join(dir, "elsewhere.conf")
	if _, err := memlock.WriteLimits(other, nil); err != nil {
		t.Fatal(err)
	}
	decl2 := decl
	decl2.Memlock.LimitsFile = filepath.Join(dir, "92-rdmad.conf")
	os.Symlink(other, decl2.Memlock.LimitsFile)
	for _, c := range []Declared{decl, decl2} {
		_, ps = r.Pass(c, nil, nil, true)
		if ts := memlockTargets(ps); len(ts) != 0 {
			t.Errorf("foreign file at %s: targets %+v", c.Memlock.LimitsFile, ts)
		}
	}
	if got, _ := os.ReadFile(b); string(got) != "@hpc hard memlock unlimited\n" {
		t.Errorf("admin's file changed: %q", got)
	}
	if _, err := os.Lstat(decl2.Memlock.LimitsFile); err != nil || !memlock.IsOurs(other) {
		t.Errorf("symlink or its target removed: %v", err)
	}

	// With the key set, an admin's file is not overwritten: an error that
	// says what to do.
	decl.Memlock.Users = &size
	_, ps = r.Pass(decl, nil, nil, true)
	ts := memlockTargets(ps)
	if len(ts) != 1 || ts[0].State != apitype.TargetError || !strings.Contains(ts[0].Error, "not written by rdmad") || !strings.Contains(ts[0].Error, "limits_file") {
		t.Errorf("users over an admin's file: %+v", ts)
	}
	if got, _ := os.ReadFile(b); string(got) != "@hpc hard memlock unlimited\n" {
		t.Errorf("admin's file overwritten: %q", got)
	}
	// Nor recorded: the package scripts would look at it on purge.
	if r.written.Has(b) {
		t.Errorf("admin's file %s recorded as rdmad's", b)
	}
}

// TestLimitsFileMovedWhileStopped is issue #13 item 13 (b): limits_file
// moved while rdmad was stopped. Before, the old path was remembered in
// memory only, so the file rdmad wrote there stayed and PAM kept applying
// it. Now the record in the state directory carries it over the restart:
// the new Reconciler removes rdmad's file at the old path and writes the
// new one; an admin's file and a symlink that the record names are left
// alone and forgotten.
func TestLimitsFileMovedWhileStopped(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	state, dir := t.TempDir(), t.TempDir()
	a, b := filepath.Join(dir, "90-rdmad.conf"), filepath.Join(dir, "91-rdmad.conf")
	size := memlock.Size(64 << 20)
	decl := Declared{Memlock: Memlock{Users: &size, UsersDomain: "*", LimitsFile: a}}

	r := NewReconciler(log, Options{StateDir: state})
	if _, ps := r.Pass(decl, nil, nil, true); len(memlockTargets(ps)) != 1 || memlockTargets(ps)[0].State != apitype.Applied {
		t.Fatalf("write %s: %+v", a, memlockTargets(ps))
	}
	r.Close()
	if !memlock.IsOurs(a) {
		t.Fatalf("%s not written", a)
	}

	// Stopped: limits_file moves, and the record (as another rdmad or a
	// hand edit may have left it) also names an admin's file and a
	// symlink to a file with rdmad's header.
	admin := filepath.Join(dir, "50-admin.conf")
	os.WriteFile(admin, []byte("@hpc hard memlock unlimited\n"), 0o644)
	kept := filepath.Join(dir, "kept.conf")
	if _, err := memlock.WriteLimits(kept, nil); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "80-link.conf")
	os.Symlink(kept, link)
	rec, err := memlock.LoadRecord(filepath.Join(state, memlock.RecordName))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{admin, link} {
		if err := rec.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	decl.Memlock.LimitsFile = b

	r = NewReconciler(log, Options{StateDir: state})
	defer r.Close()
	_, ps := r.Pass(decl, nil, nil, true)
	if _, err := os.Lstat(a); !os.IsNotExist(err) {
		t.Errorf("rdmad's file at the old path %s survived the restart: %v", a, err)
	}
	if !memlock.IsOurs(b) {
		t.Errorf("%s not written", b)
	}
	var removed bool
	for _, tg := range memlockTargets(ps) {
		removed = removed || tg.Object == a && tg.Actual == "(removed)"
	}
	if !removed {
		t.Errorf("the removal of %s is not reported: %+v", a, memlockTargets(ps))
	}
	if got, _ := os.ReadFile(admin); string(got) != "@hpc hard memlock unlimited\n" {
		t.Errorf("admin's file changed: %q", got)
	}
	if _, err := os.Lstat(link); err != nil || !memlock.IsOurs(kept) {
		t.Errorf("symlink or its target removed: %v", err)
	}
	rec, err = memlock.LoadRecord(filepath.Join(state, memlock.RecordName))
	if err != nil {
		t.Fatal(err)
	}
	if got := rec.Paths(); len(got) != 1 || got[0] != b {
		t.Errorf("record after the restart = %q, want only %s", got, b)
	}

	// Stopped again, [memlock] users removed: the next start removes b
	// and the record is empty.
	decl.Memlock.Users = nil
	r2 := NewReconciler(log, Options{StateDir: state})
	defer r2.Close()
	r2.Pass(decl, nil, nil, true)
	if _, err := os.Lstat(b); !os.IsNotExist(err) {
		t.Errorf("%s survived users going: %v", b, err)
	}
	if rec, _ := memlock.LoadRecord(filepath.Join(state, memlock.RecordName)); len(rec.Paths()) != 0 {
		t.Errorf("record after the removal = %q, want empty", rec.Paths())
	}
}

// TestLimitsRecordNotSaved is issue #24's state-directory drill at the
// reconciler: while the state directory cannot be written, the limits file
// is still written, and its target says the record is not saved (the
// status, not only the log); once the directory is back the next pass
// saves the record and the target's error goes.
func TestLimitsRecordNotSaved(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	state, dir := t.TempDir(), t.TempDir()
	a := filepath.Join(dir, "90-rdmad.conf")
	size := memlock.Size(64 << 20)
	decl := Declared{Memlock: Memlock{Users: &size, UsersDomain: "*", LimitsFile: a}}
	r := NewReconciler(log, Options{StateDir: state})
	defer r.Close()

	// A file where the directory was: every write into it fails, even as
	// root (chmod would not stop root; chattr +i needs ext4).
	if err := os.Remove(state); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(state, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, ps := r.Pass(decl, nil, nil, true)
	ts := memlockTargets(ps)
	if len(ts) != 1 || ts[0].State != apitype.Applied || !strings.Contains(ts[0].Error, "limits file record not saved") {
		t.Fatalf("state directory unwritable: targets %+v, want applied with the record's error", ts)
	}
	if !memlock.IsOurs(a) {
		t.Fatalf("%s not written while the record could not be saved", a)
	}

	if err := os.Remove(state); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(state, 0o750); err != nil {
		t.Fatal(err)
	}
	_, ps = r.Pass(decl, nil, nil, true)
	if ts := memlockTargets(ps); len(ts) != 1 || ts[0].State != apitype.InSync || ts[0].Error != "" {
		t.Errorf("state directory back: targets %+v, want in-sync without an error", ts)
	}
	rec, err := memlock.LoadRecord(filepath.Join(state, memlock.RecordName))
	if err != nil {
		t.Fatal(err)
	}
	if got := rec.Paths(); len(got) != 1 || got[0] != a {
		t.Errorf("record once the directory is back = %q, want %s", got, a)
	}
}
