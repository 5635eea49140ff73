package safefile

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestRemoveStale: the temporary files a writer killed between create and
// rename left are removed (all of the directory's, or those of one file),
// and nothing else: not another file's, not a name that only looks alike,
// not a symlink of that name (whose target is left alone too).
func TestRemoveStale(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(t.TempDir(), "target")
	write := func(name string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(".accepted-config.json.tmp-86b12c56e0ca196d")
	write(".limits-files.tmp-0123456789abcdef")
	write(".limits-files.tmp-0123")             // not 16 hex digits
	write("limits-files.tmp-0123456789abcdef")  // not hidden
	write(".limits-files.tmp-0123456789abcdeg") // not hex
	write("accepted-config.json")
	write(target[len(filepath.Dir(target))+1:]) // a file named like the target, in dir
	os.WriteFile(target, []byte("keep"), 0o600)
	if err := os.Symlink(target, filepath.Join(dir, ".x.tmp-ffffffffffffffff")); err != nil {
		t.Fatal(err)
	}

	if got := RemoveStale(dir, "limits-files"); !slices.Equal(got, []string{".limits-files.tmp-0123456789abcdef"}) {
		t.Errorf("RemoveStale(limits-files) removed %q", got)
	}
	if got := RemoveStale(dir, ""); !slices.Equal(got, []string{".accepted-config.json.tmp-86b12c56e0ca196d"}) {
		t.Errorf("RemoveStale(all) removed %q", got)
	}
	ents, _ := os.ReadDir(dir)
	var left []string
	for _, e := range ents {
		left = append(left, e.Name())
	}
	want := []string{".limits-files.tmp-0123", ".limits-files.tmp-0123456789abcdeg", ".x.tmp-ffffffffffffffff", "accepted-config.json", "limits-files.tmp-0123456789abcdef", "target"}
	if !slices.Equal(left, want) {
		t.Errorf("left %q, want %q", left, want)
	}
	if b, err := os.ReadFile(target); err != nil || string(b) != "keep" {
		t.Errorf("the symlink's target: %q, %v", b, err)
	}
}

// TestWriteAtomicRemovesStale: writing a file removes the temporary file
// of it that a killed writer left, so that a restarted writer leaves no
// trace of the kill.
func TestWriteAtomicRemovesStale(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "accepted-config.json")
	stale := filepath.Join(dir, ".accepted-config.json.tmp-86b12c56e0ca196d")
	other := filepath.Join(dir, ".limits-files.tmp-0123456789abcdef")
	for _, f := range []string{stale, other} {
		if err := os.WriteFile(f, []byte("half"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := WriteAtomic(path, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(stale); !os.IsNotExist(err) {
		t.Errorf("the stale temporary file of %s is still there (%v)", path, err)
	}
	if _, err := os.Lstat(other); err != nil {
		t.Errorf("another file's temporary file was removed: %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "{}" {
		t.Errorf("%s holds %q", path, b)
	}
}
