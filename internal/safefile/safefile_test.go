package safefile

import (
	"bytes"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// within fails the test if f does not return within d: every attack here
// is first of all an attempt to make the reader hang.
func within(t *testing.T, d time.Duration, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("read did not return within %v (it blocks)", d)
	}
}

func wantErr(t *testing.T, err error, is error, contains ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %v", is)
	}
	if !errors.Is(err, is) {
		t.Errorf("error %q is not %v", err, is)
	}
	for _, c := range contains {
		if !strings.Contains(err.Error(), c) {
			t.Errorf("error %q does not contain %q", err, c)
		}
	}
}

func TestReadRegular(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	os.WriteFile(p, []byte("hello"), 0o644)
	b, err := ReadRegular(p, 5)
	if err != nil || string(b) != "hello" {
		t.Errorf("ReadRegular(5 bytes, max 5) = %q, %v", b, err)
	}
	// A symlink to a regular file is the admin's choice and is followed.
	l := filepath.Join(dir, "link")
	os.Symlink(p, l)
	if b, err := ReadRegular(l, 5); err != nil || string(b) != "hello" {
		t.Errorf("ReadRegular(symlink to a file) = %q, %v", b, err)
	}
	_, err = ReadRegular(filepath.Join(dir, "missing"), 5)
	wantErr(t, err, fs.ErrNotExist, filepath.Join(dir, "missing"), "does not exist")
	e := new(Error)
	if !errors.As(err, &e) || e.Path != filepath.Join(dir, "missing") {
		t.Errorf("error %#v does not carry the path", err)
	}
}

func TestTooLarge(t *testing.T) {
	p := filepath.Join(t.TempDir(), "big")
	os.WriteFile(p, bytes.Repeat([]byte("x"), 1<<20+1), 0o644)
	_, err := ReadRegular(p, 1<<20)
	wantErr(t, err, ErrTooLarge, p, "larger than 1 MiB")

	// A file that claims size 0 but has content (as /proc files do) is
	// bounded by what is read, not by what fstat says.
	_, err = ReadRegular("/proc/self/maps", 16)
	wantErr(t, err, ErrTooLarge, "/proc/self/maps")
}

func TestFIFO(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link-to-fifo")
	os.Symlink(fifo, link)
	for _, p := range []string{fifo, link} {
		var err error
		within(t, 2*time.Second, func() { _, err = ReadRegular(p, 1024) })
		wantErr(t, err, ErrNotRegular, p, "FIFO (named pipe)", "replace it with a file")
	}
	// A FIFO with a writer that never stops is refused as well, without
	// a byte read.
	w, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.Write([]byte("[daemon]\n"))
	var rerr error
	within(t, 2*time.Second, func() { _, rerr = ReadRegular(fifo, 1024) })
	wantErr(t, rerr, ErrNotRegular)
}

func TestOtherTypes(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for p, want := range map[string]string{
		dir:         "directory",
		"/dev/zero": "character device",
		"/dev/null": "character device",
		sock:        "socket",
	} {
		var err error
		within(t, 2*time.Second, func() { _, err = ReadRegular(p, 1024) })
		wantErr(t, err, ErrNotRegular, p, want)
	}
}

// TestSwapRace swaps a name between a regular file and a FIFO while it is
// read: whatever the reader catches, it never blocks and never returns
// anything but the regular file's content.
func TestSwapRace(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	reg, fifo := filepath.Join(dir, "reg"), filepath.Join(dir, "fifo")
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			if i%2 == 0 {
				os.WriteFile(reg, []byte("ok"), 0o644)
				os.Rename(reg, p)
			} else {
				unix.Mkfifo(fifo, 0o644)
				os.Rename(fifo, p)
			}
		}
	}()
	defer func() { stop.Store(true); wg.Wait() }()
	var regular, refused int
	within(t, 20*time.Second, func() {
		for i := 0; i < 5000; i++ {
			b, err := ReadRegular(p, 1024)
			switch {
			case err == nil && string(b) == "ok":
				regular++
			case errors.Is(err, ErrNotRegular) || errors.Is(err, fs.ErrNotExist):
				refused++
			default:
				t.Errorf("read %d: %q, %v", i, b, err)
				return
			}
		}
	})
	t.Logf("%d regular reads, %d refused", regular, refused)
}

func TestNoFollow(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	os.WriteFile(p, []byte("x"), 0o644)
	l := filepath.Join(dir, "l")
	os.Symlink(p, l)
	_, _, err := Read(l, Options{Max: 10, NoFollow: true})
	wantErr(t, err, ErrSymlink, l, "symbolic link")
	b, fi, err := Read(p, Options{Max: 10, NoFollow: true})
	if err != nil || string(b) != "x" || !fi.Mode().IsRegular() {
		t.Errorf("Read(regular, NoFollow) = %q, %v, %v", b, fi, err)
	}
}

func TestReadSecret(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make root-owned and foreign-owned files (CI runs as root)")
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "key")
	os.WriteFile(p, []byte("s3cret"), 0o600)
	os.Chmod(p, 0o600)
	if b, err := ReadSecret(p, 64); err != nil || string(b) != "s3cret" {
		t.Errorf("ReadSecret(root 0600) = %q, %v", b, err)
	}
	os.Chmod(p, 0o400)
	if _, err := ReadSecret(p, 64); err != nil {
		t.Errorf("ReadSecret(root 0400) = %v", err)
	}
	for _, mode := range []os.FileMode{0o640, 0o604, 0o620, 0o602, 0o601} {
		os.Chmod(p, mode)
		_, err := ReadSecret(p, 64)
		wantErr(t, err, ErrInsecure, p, "chmod 600")
	}
	os.Chmod(p, 0o600)
	os.Chown(p, 65534, 0)
	_, err := ReadSecret(p, 64)
	wantErr(t, err, ErrInsecure, p, "uid 65534", "chown root")
	// The same file is fine for a plain read: only secrets are checked.
	if _, err := ReadRegular(p, 64); err != nil {
		t.Errorf("ReadRegular(foreign-owned) = %v", err)
	}
	// A secret is a regular file too.
	fifo := filepath.Join(dir, "fifo")
	unix.Mkfifo(fifo, 0o600)
	within(t, 2*time.Second, func() { _, err = ReadSecret(fifo, 64) })
	wantErr(t, err, ErrNotRegular)
}

// TestReadRootWritable: a file that decides whom rdmad trusts (the peers
// file) may be read by others but written by root alone.
func TestReadRootWritable(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make root-owned and foreign-owned files (CI runs as root)")
	}
	p := filepath.Join(t.TempDir(), "peers")
	os.WriteFile(p, []byte("192.0.2.17\n"), 0o600)
	read := func() error {
		_, _, err := Read(p, Options{Max: 64, RootWritable: true})
		return err
	}
	for _, mode := range []os.FileMode{0o644, 0o600, 0o444, 0o755} {
		os.Chmod(p, mode)
		if err := read(); err != nil {
			t.Errorf("Read(root %04o, RootWritable) = %v, want read", mode, err)
		}
	}
	for _, mode := range []os.FileMode{0o664, 0o646, 0o666, 0o620} {
		os.Chmod(p, mode)
		wantErr(t, read(), ErrInsecure, p, "chmod go-w")
	}
	os.Chmod(p, 0o644)
	os.Chown(p, 65534, 0)
	wantErr(t, read(), ErrInsecure, p, "uid 65534", "chown root")
}
