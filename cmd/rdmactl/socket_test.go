package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestSocketNotASocket: --socket or RDMAD_SOCKET naming something that is
// not a socket says exactly that, and what to do, rather than "rdmad is
// not running ... connection refused".
func TestSocketNotASocket(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "rdmad.toml")
	if err := os.WriteFile(file, []byte("[daemon]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path, what string
	}{
		{file, "a regular file"},
		{dir, "a directory"},
		{fifo, "a named pipe"},
	} {
		for _, cmd := range [][]string{{"status"}, {"policy", "diff"}, {"watch"}, {"reload"}, {"version"}} {
			code, _, errs := rdmactl(t, append([]string{"--socket", tc.path}, cmd...)...)
			want := tc.path + " (--socket) is " + tc.what + ", not a socket: point --socket at rdmad's socket ([daemon] socket in /etc/rdmad/rdmad.toml, /run/rdmad/rdmad.sock by default)"
			if code != exitError || !strings.Contains(errs, want) {
				t.Errorf("rdmactl --socket %s %s: exit %d, stderr %q; want 1 and %q", tc.path, strings.Join(cmd, " "), code, errs, want)
			}
			if strings.Contains(errs, "not running") || strings.Contains(errs, "refused") {
				t.Errorf("rdmactl --socket %s %s blames a daemon that is not running: %q", tc.path, strings.Join(cmd, " "), errs)
			}
		}
	}
	t.Setenv("RDMAD_SOCKET", file)
	code, _, errs := rdmactl(t, "status")
	if want := file + " (RDMAD_SOCKET) is a regular file, not a socket: set RDMAD_SOCKET or --socket to rdmad's socket"; code != exitError || !strings.Contains(errs, want) {
		t.Errorf("RDMAD_SOCKET=%s rdmactl status: exit %d, stderr %q; want 1 and %q", file, code, errs, want)
	}
}

// TestSocketNobodyListens: a socket nobody listens on (rdmad stopped and
// left it) still means that rdmad is not running.
func TestSocketNobodyListens(t *testing.T) {
	dir, err := os.MkdirTemp("", "rdmactl")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "rdmad.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	code, _, errs := rdmactl(t, "--socket", path, "status")
	if code != exitError || !strings.Contains(errs, "rdmad is not running") || strings.Contains(errs, "not a socket") {
		t.Errorf("stale socket: exit %d, stderr %q; want 1 and rdmad is not running", code, errs)
	}
}

// TestDoctorNotASocket: doctor still runs the table itself, and its
// daemon check names the path that is not a socket.
func TestDoctorNotASocket(t *testing.T) {
	file := filepath.Join(t.TempDir(), "rdmad.sock")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := rdmactl(t, "--socket", file, "doctor", "--interval", "0")
	if code == exitUsage || code == exitError {
		t.Fatalf("doctor: exit %d, stderr %q", code, errs)
	}
	if want := "rdmad not reachable: " + file + " (--socket) is a regular file, not a socket"; !strings.Contains(out, want) {
		t.Errorf("doctor's daemon check lacks %q:\n%s", want, out)
	}
}
