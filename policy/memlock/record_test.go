package memlock

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

// TestRecord: what is added and dropped is in the file, and a new Record
// read from it (rdmad's next start) sees the same paths.
func TestRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), RecordName)
	r, err := LoadRecord(path)
	if err != nil || len(r.Paths()) != 0 {
		t.Fatalf("LoadRecord of nothing = %v, %v; want empty, nil", r.Paths(), err)
	}
	for _, p := range []string{"/etc/security/limits.d/91-rdmad.conf", "/etc/security/limits.d/90-rdmad.conf", "/etc/security/limits.d/91-rdmad.conf"} {
		if err := r.Add(p); err != nil {
			t.Fatalf("Add(%s): %v", p, err)
		}
	}
	want := []string{"/etc/security/limits.d/90-rdmad.conf", "/etc/security/limits.d/91-rdmad.conf"}
	again, err := LoadRecord(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, again.Paths()); diff != "" {
		t.Errorf("record after Add (-want +got):\n%s", diff)
	}
	b, _ := os.ReadFile(path)
	if !strings.HasPrefix(string(b), "# ") || !strings.HasSuffix(string(b), "\n/etc/security/limits.d/90-rdmad.conf\n/etc/security/limits.d/91-rdmad.conf\n") {
		t.Errorf("record file:\n%s", b)
	}

	if err := again.Drop(want[0]); err != nil {
		t.Fatal(err)
	}
	if err := again.Drop("/not/recorded"); err != nil {
		t.Fatal(err)
	}
	third, err := LoadRecord(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want[1:], third.Paths()); diff != "" {
		t.Errorf("record after Drop (-want +got):\n%s", diff)
	}

	// The zero Record is in memory only.
	var mem Record
	if err := mem.Add("/x/y.conf"); err != nil || !mem.Has("/x/y.conf") {
		t.Errorf("in-memory Add: %v, %v", err, mem.Paths())
	}
}

// TestRecordRefuses: a path that is not one absolute, clean line is
// neither recorded nor read back from a record someone edited; the error
// names the line and the problem, and the good lines are kept.
func TestRecordRefuses(t *testing.T) {
	for _, p := range []string{"", "limits.d/x.conf", "/etc/security/limits.d/../limits.conf", "/etc//x.conf", "/etc/x.conf/", "/", "/etc/x\n/etc/y", "/etc/x\r", "/etc/\x7fx"} {
		var r Record
		if err := r.Add(p); err == nil {
			t.Errorf("Add(%q) accepted", p)
		}
		if len(r.Paths()) != 0 {
			t.Errorf("Add(%q) recorded %q", p, r.Paths())
		}
	}

	path := filepath.Join(t.TempDir(), RecordName)
	os.WriteFile(path, []byte("# comment\n\n/etc/security/limits.d/90-rdmad.conf\nrelative.conf\n/etc/security/limits.d/../x.conf\n/etc/security/limits.d/91-rdmad.conf"), 0o644)
	r, err := LoadRecord(path)
	if err == nil || !strings.Contains(err.Error(), "line 4: \"relative.conf\" is not an absolute path") || !strings.Contains(err.Error(), "line 5:") {
		t.Errorf("LoadRecord error = %v, want lines 4 and 5 named", err)
	}
	want := []string{"/etc/security/limits.d/90-rdmad.conf", "/etc/security/limits.d/91-rdmad.conf"}
	if diff := cmp.Diff(want, r.Paths()); diff != "" {
		t.Errorf("paths (-want +got):\n%s", diff)
	}
	// The next change rewrites the file without the bad lines, even a
	// change that changes nothing.
	if err := r.Drop("/not/recorded"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); strings.Contains(string(b), "relative") || strings.Contains(string(b), "..") {
		t.Errorf("bad lines kept:\n%s", b)
	}
}

// TestRecordSymlink: a symlink at the record's path is neither read nor
// written through; saving replaces the link itself.
func TestRecordSymlink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "elsewhere")
	os.WriteFile(target, []byte("/etc/security/limits.d/x.conf\n"), 0o644)
	path := filepath.Join(dir, RecordName)
	os.Symlink(target, path)
	r, err := LoadRecord(path)
	if err == nil || len(r.Paths()) != 0 {
		t.Fatalf("LoadRecord through a symlink = %v, %v; want an error and nothing", r.Paths(), err)
	}
	if err := r.Add("/etc/security/limits.d/90-rdmad.conf"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(target); string(b) != "/etc/security/limits.d/x.conf\n" {
		t.Errorf("written through the symlink: %q", b)
	}
	if fi, err := os.Lstat(path); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("record is not a regular file: %v %v", fi, err)
	}
}

// TestRecordNoStateDir: without the state directory the path stays
// recorded in memory, the error says what is missing, and the save is
// tried again once the directory is there.
func TestRecordNoStateDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "rdmad")
	r, err := LoadRecord(filepath.Join(dir, RecordName))
	if err != nil {
		t.Fatal(err)
	}
	p := "/etc/security/limits.d/90-rdmad.conf"
	err = r.Add(p)
	if err == nil || !strings.Contains(err.Error(), "StateDirectory=rdmad") {
		t.Errorf("Add without the directory: %v", err)
	}
	if !r.Has(p) {
		t.Errorf("%s not kept in memory", p)
	}
	os.Mkdir(dir, 0o750)
	if err := r.Add(p); err != nil {
		t.Fatalf("Add again: %v", err)
	}
	if again, _ := LoadRecord(filepath.Join(dir, RecordName)); !again.Has(p) {
		t.Errorf("not saved once the directory exists: %v", again.Paths())
	}
}

// TestRecordFIFOAndHuge: a FIFO at the record's path does not hang rdmad's
// start, and a record over the size bound is refused rather than read
// whole; either way the next change writes a regular record in its place.
func TestRecordFIFOAndHuge(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo", RecordName)
	os.Mkdir(filepath.Dir(fifo), 0o750)
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	huge := filepath.Join(dir, "huge", RecordName)
	os.Mkdir(filepath.Dir(huge), 0o750)
	line := "/etc/security/limits.d/x.conf\n"
	if err := os.WriteFile(huge, []byte(strings.Repeat(line, maxRecord/len(line)+2)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{fifo, huge} {
		done := make(chan struct{})
		var r *Record
		var err error
		go func() { r, err = LoadRecord(path); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("LoadRecord(%s) hangs", path)
		}
		if err == nil || len(r.Paths()) != 0 {
			t.Errorf("LoadRecord(%s) = %v, %v; want an error and nothing", path, r.Paths(), err)
		}
		if err := r.Add("/etc/security/limits.d/90-rdmad.conf"); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Lstat(path); err != nil || !fi.Mode().IsRegular() || fi.Size() > maxRecord {
			t.Errorf("%s after Add: %v %v; want a small regular file", path, fi, err)
		}
	}
}
