package memlock

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// fullChild names the directory the child of TestRecordFull mounts its
// small tmpfs on.
const fullChild = "RDMAD_TEST_FULL_DIR"

// TestRecordFull: the state directory full (ENOSPC), as the e2e drill
// TestDrillStateDirFull makes it with a tmpfs over /var/lib/rdmad. The
// record's save fails naming the cause and where room is missing; the
// record on disk is the old one, whole (the write went to a temporary
// file, which is removed); the path stays recorded in memory, and the
// next change once there is room saves it. The test runs itself again in
// a user and mount namespace of its own, where it may mount a tmpfs.
func TestRecordFull(t *testing.T) {
	dir := os.Getenv(fullChild)
	if dir == "" {
		dir = t.TempDir()
		cmd := exec.Command(os.Args[0], "-test.run=^TestRecordFull$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), fullChild+"="+dir)
		cmd.SysProcAttr = &syscall.SysProcAttr{
			Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
		}
		out, err := cmd.CombinedOutput()
		switch {
		case err != nil && cmd.ProcessState == nil:
			t.Skipf("no user and mount namespace for a tmpfs: %v", err)
		case strings.Contains(string(out), "--- SKIP"):
			t.Skipf("the child skipped:\n%s", out)
		case err != nil:
			t.Fatalf("the child in its own namespace: %v\n%s", err, out)
		}
		t.Logf("the child:\n%s", out)
		return
	}
	// Mounts stay in this namespace.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		t.Skipf("make / private: %v", err)
	}
	if err := unix.Mount("e2e-full", dir, "tmpfs", 0, "size=16k"); err != nil {
		t.Skipf("mount a tmpfs on %s: %v", dir, err)
	}
	defer unix.Unmount(dir, 0)
	path := filepath.Join(dir, RecordName)
	r, err := LoadRecord(path)
	if err != nil {
		t.Fatal(err)
	}
	a, b := "/etc/security/limits.d/90-rdmad.conf", "/etc/security/limits.d/91-other.conf"
	if err := r.Add(a); err != nil {
		t.Fatalf("Add with room: %v", err)
	}
	old, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Fill it: every block taken.
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := f.Write(make([]byte, 4096)); err != nil {
			if !errors.Is(err, unix.ENOSPC) {
				t.Fatalf("filling: %v", err)
			}
			break
		}
	}
	f.Close()

	err = r.Add(b)
	if err == nil || !errors.Is(err, unix.ENOSPC) || !strings.Contains(err.Error(), "is full: free space there") {
		t.Fatalf("Add when full = %v; want ENOSPC, saying where room is missing", err)
	}
	if strings.Count(err.Error(), ".tmp-") != 1 {
		t.Errorf("the error names the temporary file more than once: %v", err)
	}
	t.Logf("Add when full: %v", err)
	if now, _ := os.ReadFile(path); string(now) != string(old) {
		t.Errorf("the record on disk changed when full:\n%s\nwas:\n%s", now, old)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, ".*.tmp-*")); len(m) != 0 {
		t.Errorf("temporary files left: %v", m)
	}
	if !r.Has(b) {
		t.Errorf("%s not recorded in memory after a failed save", b)
	}

	if err := os.Remove(filepath.Join(dir, "filler")); err != nil {
		t.Fatal(err)
	}
	if err := r.Add(b); err != nil {
		t.Fatalf("Add with room again: %v", err)
	}
	again, err := LoadRecord(path)
	if err != nil || !again.Has(a) || !again.Has(b) {
		t.Errorf("the record saved with room again: %v, %v; want both paths", again.Paths(), err)
	}
}
