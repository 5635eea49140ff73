package memlimit

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/internal/size"
)

// TestOwnMatchesProc: the process's own limit by prlimit is what its
// /proc/self/limits says.
func TestOwnMatchesProc(t *testing.T) {
	own, err := Own()
	if err != nil {
		t.Fatal(err)
	}
	var r unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &r); err != nil {
		t.Fatal(err)
	}
	if own.Soft != size.Size(r.Cur) || own.Hard != size.Size(r.Max) {
		t.Errorf("Own = %v, getrlimit says soft %d hard %d", own, r.Cur, r.Max)
	}
	proc, err := ReadProc("/proc/self/limits")
	if err != nil {
		t.Fatal(err)
	}
	if proc != own {
		t.Errorf("ReadProc(/proc/self/limits) = %v, Own = %v", proc, own)
	}
}

func TestReadProc(t *testing.T) {
	const head = "Limit                     Soft Limit           Hard Limit           Units     \n" +
		"Max open files            1024                 524288               files     \n"
	for _, tt := range []struct {
		name, text string
		want       Limit
		err        string
	}{
		{"bytes", head + "Max locked memory         65536                8388608              bytes     \n", Limit{Soft: 64 << 10, Hard: 8 << 20}, ""},
		{"unlimited", head + "Max locked memory         unlimited            unlimited            bytes     \n", Limit{Soft: size.Unlimited, Hard: size.Unlimited}, ""},
		{"no line", head, Limit{}, "has no Max locked memory line"},
		{"short line", head + "Max locked memory         65536\n", Limit{}, "has no Max locked memory line"},
		{"not a number", head + "Max locked memory         lots                 8388608              bytes     \n", Limit{}, `"Max locked memory         lots`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "limits")
			if err := os.WriteFile(path, []byte(tt.text), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := ReadProc(path)
			switch {
			case tt.err == "" && err != nil:
				t.Fatalf("ReadProc: %v", err)
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err) || !strings.Contains(err.Error(), path)):
				t.Fatalf("ReadProc: %v, want an error naming %s and saying %q", err, path, tt.err)
			case got != tt.want:
				t.Errorf("ReadProc = %v, want %v", got, tt.want)
			}
		})
	}
	if _, err := ReadProc(filepath.Join(t.TempDir(), "absent")); !os.IsNotExist(err) {
		t.Errorf("ReadProc of a missing file: %v, want not-exist", err)
	}
}
