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
}
