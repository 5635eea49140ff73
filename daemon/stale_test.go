package daemon

import (
	"os"
	"path/filepath"
	"testing"
)

// TestStartRemovesStaleTemporaries: the temporary file a predecessor
// killed mid-write left in the state directory (the kill-during-apply
// drill found .accepted-config.json.tmp-… left for good) is gone once
// rdmad serves; the directory's other files stay.
func TestStartRemovesStaleTemporaries(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(state, ".accepted-config.json.tmp-86b12c56e0ca196d")
	// Of a file this start does not write again: only the start-up sweep
	// removes it.
	staleRecord := filepath.Join(state, ".limits-files.tmp-0123456789abcdef")
	keep := filepath.Join(state, "notes.txt")
	for _, f := range []string{stale, staleRecord, keep} {
		if err := os.WriteFile(f, []byte("half"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	sock := filepath.Join(dir, "rdmad.sock")
	cfgPath := filepath.Join(dir, "rdmad.toml")
	if err := os.WriteFile(cfgPath, []byte("[daemon]\nsocket = \""+sock+"\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	runDaemon(t, sock, Options{ConfigPath: cfgPath, ConfigRequired: true, SysfsRoot: "../inventory/testdata/roce-ib", Version: "test", StateDir: state})
	for _, f := range []string{stale, staleRecord} {
		if _, err := os.Lstat(f); !os.IsNotExist(err) {
			t.Errorf("%s is still there after rdmad started (%v)", f, err)
		}
	}
	if _, err := os.Lstat(keep); err != nil {
		t.Errorf("rdmad's start removed %s: %v", keep, err)
	}
}
