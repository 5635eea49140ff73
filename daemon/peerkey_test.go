package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/daemon/config"
)

// TestReadProbeKey checks the checks on [probe] key_file: a key others can
// read or write, a short key, a missing file, a FIFO are refused with the
// file and the fix; a good key is trimmed.
func TestReadProbeKey(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the key must be owned by root")
	}
	dir := t.TempDir()
	file := func(name, body string, mode os.FileMode, uid int) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, 0); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := "  c2VjcmV0IGtleSBvZiB0aGUgZmxlZXQsIDMyIGJ5dGVzIQ==\n"
	fifo := filepath.Join(dir, "fifo")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path string
		want       []string // in the error; none: no error
	}{
		{"good", file("good", good, 0o600, 0), nil},
		{"read-only for root is fine", file("ro", good, 0o400, 0), nil},
		{"group readable", file("g", good, 0o640, 0), []string{"key_file", "chmod 600"}},
		{"world readable", file("w", good, 0o604, 0), []string{"chmod 600"}},
		{"not owned by root", file("nobody", good, 0o600, 65534), []string{"uid 65534", "chown root"}},
		{"short", file("short", " 0123456789abcde \n", 0o600, 0), []string{"15 bytes", "at least 16", "head -c 32 /dev/urandom"}},
		{"missing", filepath.Join(dir, "none"), []string{filepath.Join(dir, "none"), "head -c 32 /dev/urandom"}},
		{"FIFO", fifo, []string{fifo}},
		{"a rotation's short line", file("rot-short", good+"0123456789\n", 0o600, 0), []string{":2", "10 bytes"}},
		{"too many keys", file("rot-many", strings.Repeat(good, 5), 0o600, 0), []string{":5", "more than 4 keys"}},
		{"a rotation group readable", file("rot-g", good+good, 0o640, 0), []string{"chmod 600"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			keys, err := readProbeKey(tt.path)
			if tt.want == nil {
				if err != nil || len(keys) != 1 || string(keys[0]) != strings.TrimSpace(good) {
					t.Fatalf("readProbeKey = %q, %v; want the trimmed key", keys, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("readProbeKey = %q; want an error", keys)
			}
			for _, w := range append(tt.want, "key_file") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}

	// A rotation (#24 item 9): one key per line, the first tags; blank
	// lines and comments skipped. A binary key with a newline byte inside
	// stays one key, as before.
	next := "bmV3IGZsZWV0IGtleSBvZiB0aGUgcm90YXRpb24sIDMyIQ==\n"
	keys, err := readProbeKey(file("rot", "# tag with the first\n"+next+"\n"+good, 0o600, 0))
	if err != nil || len(keys) != 2 || string(keys[0]) != strings.TrimSpace(next) || string(keys[1]) != strings.TrimSpace(good) {
		t.Errorf("rotation file: %q, %v; want the two keys, the new one first", keys, err)
	}
	raw := "\x01\x02binary key\nwith a newline byte\xff\x00"
	keys, err = readProbeKey(file("raw", raw, 0o600, 0))
	if err != nil || len(keys) != 1 || string(keys[0]) != raw {
		t.Errorf("binary key with a newline: %q, %v; want it whole", keys, err)
	}

	// auth defaults to require with a key; prefer is kept; no key_file is
	// no authentication.
	r := &peerRunner{}
	for _, tt := range []struct {
		probe        config.Probe
		key, require bool
	}{
		{config.Probe{KeyFile: tests[0].path, Auth: "require"}, true, true},
		{config.Probe{KeyFile: tests[0].path, Auth: "prefer"}, true, false},
		{config.Probe{}, false, false},
	} {
		a, err := r.loadAuth(&config.Config{Probe: tt.probe})
		if err != nil || (len(a.Key) > 0) != tt.key || a.Require != tt.require {
			t.Errorf("loadAuth(%+v) = %+v, %v; want key %v require %v", tt.probe, a, err, tt.key, tt.require)
		}
	}
	if _, err := r.loadAuth(&config.Config{Probe: config.Probe{KeyFile: tests[2].path, Auth: "require"}}); err == nil || r.keyError() == nil {
		t.Errorf("a group-readable key loaded (err %v); want an error kept for the component", err)
	}
}
