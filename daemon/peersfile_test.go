package daemon

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/internal/safefile"
)

// TestReadPeersFileNotRegular is issue #13 item 11 for [probe] peers_file:
// a FIFO there made open(2) block the main loop forever; /dev/zero would
// never end. Both are refused at once, naming the file.
func TestReadPeersFileNotRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "peers")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, "/dev/zero"} {
		done := make(chan error, 1)
		go func() { _, err := readPeersFile(p); done <- err }()
		select {
		case err := <-done:
			if !errors.Is(err, safefile.ErrNotRegular) || !strings.Contains(err.Error(), "peers_file") || !strings.Contains(err.Error(), p) {
				t.Errorf("readPeersFile(%s) = %v, want a not-a-regular-file error naming peers_file and the path", p, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("readPeersFile(%s) blocks", p)
		}
	}
	big := filepath.Join(dir, "big")
	f, _ := os.Create(big)
	f.Truncate(maxPeersFileBytes + 1)
	f.Close()
	if _, err := readPeersFile(big); !errors.Is(err, safefile.ErrTooLarge) {
		t.Errorf("readPeersFile(9 MiB) = %v, want ErrTooLarge", err)
	}
}
