package config

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestSavedCopy: the copy of an accepted configuration loads to the same
// configuration, main file and drop-ins, after the files changed; it is
// written 0600 and replaces a symlink at its path instead of writing
// through it; a copy that no longer loads, or of another format, is an
// error, and a missing one wraps fs.ErrNotExist.
func TestSavedCopy(t *testing.T) {
	p := write(t, map[string]string{
		"rdmad.toml":        "[daemon]\nlog_level = \"debug\"\n[[policy]]\nname = \"a\"\nnetdevs = [\"x\"]\nmtu = 1500\n",
		"rdmad.d/50-b.toml": "[[policy]]\nname = \"b\"\nnetdevs = [\"y\"]\nmtu = 9000\n",
	})
	cfg, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	copyPath := SavedPath(state)
	victim := filepath.Join(state, "victim")
	if err := os.WriteFile(victim, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, copyPath); err != nil {
		t.Fatal(err)
	}
	if err := SaveCopy(cfg, copyPath); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Errorf("SaveCopy wrote through a symlink: the target holds %q", b)
	}
	fi, err := os.Lstat(copyPath)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Fatalf("copy: %v, %v; want a regular file of mode 0600", fi, err)
	}

	// The same configuration again (a reload) leaves the file alone.
	if err := SaveCopy(cfg, copyPath); err != nil {
		t.Fatal(err)
	}
	if again, err := os.Lstat(copyPath); err != nil || !os.SameFile(fi, again) {
		t.Errorf("saving an unchanged configuration replaced the copy (%v)", err)
	}

	// The files change (one breaks): the copy still loads as accepted.
	os.WriteFile(p, []byte("bogus = 1\n"), 0o644)
	os.Remove(filepath.Join(filepath.Dir(p), "rdmad.d", "50-b.toml"))
	got, err := LoadSaved(copyPath)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(cfg, got, cmpIgnoreSrc); diff != "" {
		t.Errorf("copy loads differently (-accepted +copy):\n%s", diff)
	}
	if len(got.Files) != 2 || got.Policies[1].Name != "b" {
		t.Errorf("copy files %v, policies %+v", got.Files, got.Policies)
	}

	// A copy that this rdmad reads differently (a key it no longer knows).
	var s saved
	b, _ := os.ReadFile(copyPath)
	json.Unmarshal(b, &s)
	s.Files[0].Data = append(s.Files[0].Data, []byte("gone_key = 1\n")...)
	b, _ = json.Marshal(s)
	os.WriteFile(copyPath, b, 0o600)
	if _, err := LoadSaved(copyPath); err == nil || !strings.Contains(err.Error(), "gone_key: unknown key") {
		t.Errorf("a copy with an unknown key: %v; want its error", err)
	}
	s.Format = 99
	b, _ = json.Marshal(s)
	os.WriteFile(copyPath, b, 0o600)
	if _, err := LoadSaved(copyPath); err == nil || !strings.Contains(err.Error(), "format 99") {
		t.Errorf("a copy of another format: %v", err)
	}
	os.WriteFile(copyPath, []byte("{"), 0o600)
	if _, err := LoadSaved(copyPath); err == nil || !strings.Contains(err.Error(), "damaged") {
		t.Errorf("a damaged copy: %v", err)
	}
	// Read with the bounded reader, and never through a symlink.
	os.Remove(copyPath)
	os.Symlink(victim, copyPath)
	if _, err := LoadSaved(copyPath); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("a symlink at the copy's path: %v", err)
	}
	if _, err := LoadSaved(filepath.Join(state, "none")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing copy: %v; want fs.ErrNotExist", err)
	}
	if err := SaveCopy(Default(), copyPath); err == nil {
		t.Error("SaveCopy of a configuration not loaded from files: no error")
	}
}
