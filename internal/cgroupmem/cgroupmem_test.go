package cgroupmem

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tree writes files (path relative to a new root → content) and returns
// the root.
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestReadV2(t *testing.T) {
	root := tree(t, map[string]string{
		"proc/cgroup":                                       "0::/system.slice/rdmad.service\n",
		"sys/cgroup.controllers":                            "cpu memory pids\n",
		"sys/system.slice/memory.max":                       "max\n",
		"sys/system.slice/memory.current":                   "900000000\n",
		"sys/system.slice/rdmad.service/memory.max":         "536870912\n",
		"sys/system.slice/rdmad.service/memory.current":     "52428800\n",
		"sys/system.slice/rdmad.service/cgroup.controllers": "",
	})
	l, err := Read(filepath.Join(root, "proc/cgroup"), filepath.Join(root, "sys"))
	if err != nil {
		t.Fatal(err)
	}
	want := Limit{Limited: true, Max: 512 << 20, Current: 50 << 20, Cgroup: "/system.slice/rdmad.service"}
	if l != want {
		t.Fatalf("Read = %+v, want %+v", l, want)
	}
	if got := l.Available(); got != 462<<20 {
		t.Errorf("Available = %d, want %d", got, 462<<20)
	}
}

// TestReadAncestorTighter: a slice with less room than the unit's own
// limit is the one that binds (the kernel charges every ancestor).
func TestReadAncestorTighter(t *testing.T) {
	root := tree(t, map[string]string{
		"proc/cgroup":                                   "0::/system.slice/rdmad.service\n",
		"sys/cgroup.controllers":                        "memory\n",
		"sys/system.slice/memory.max":                   "1073741824\n",
		"sys/system.slice/memory.current":               "1000000000\n",
		"sys/system.slice/rdmad.service/memory.max":     "536870912\n",
		"sys/system.slice/rdmad.service/memory.current": "1048576\n",
	})
	l, err := Read(filepath.Join(root, "proc/cgroup"), filepath.Join(root, "sys"))
	if err != nil {
		t.Fatal(err)
	}
	if l.Cgroup != "/system.slice" || l.Available() != 1073741824-1000000000 {
		t.Fatalf("Read = %+v (available %d), want /system.slice with %d left", l, l.Available(), 1073741824-1000000000)
	}
}

func TestReadV1(t *testing.T) {
	root := tree(t, map[string]string{
		"proc/cgroup":                             "9:name=systemd:/\n4:cpu,memory:/jobs/a\n0::/\n",
		"sys/memory/memory.limit_in_bytes":        "9223372036854771712\n", // v1's "no limit"
		"sys/memory/memory.usage_in_bytes":        "123\n",
		"sys/memory/jobs/a/memory.limit_in_bytes": "268435456\n",
		"sys/memory/jobs/a/memory.usage_in_bytes": "268435457\n",
	})
	l, err := Read(filepath.Join(root, "proc/cgroup"), filepath.Join(root, "sys"))
	if err != nil {
		t.Fatal(err)
	}
	if !l.Limited || l.Max != 256<<20 || l.Cgroup != "/jobs/a" || l.Available() != 0 {
		t.Fatalf("Read = %+v (available %d), want /jobs/a at 256 MiB with nothing left", l, l.Available())
	}
}

func TestReadUnlimited(t *testing.T) {
	root := tree(t, map[string]string{
		"proc/cgroup":                          "0::/user.slice\n",
		"sys/cgroup.controllers":               "memory\n",
		"sys/user.slice/memory.max":            "max\n",
		"sys/user.slice/memory.current":        "1\n",
		"sys/memory.current":                   "5\n", // the root has no memory.max
		"sys/user.slice/unrelated/memory.max":  "1\n",
		"sys/user.slice/unrelated/memory.peak": "1\n",
	})
	l, err := Read(filepath.Join(root, "proc/cgroup"), filepath.Join(root, "sys"))
	if err != nil {
		t.Fatal(err)
	}
	if l.Limited {
		t.Fatalf("Read = %+v, want no limit", l)
	}
}

// TestReadMalformed: a value that is not a number is an error naming the
// file, not a limit of 0 (which would refuse every registration) nor no
// limit (which would hide the file's trouble).
func TestReadMalformed(t *testing.T) {
	root := tree(t, map[string]string{
		"proc/cgroup":            "0::/a\n",
		"sys/cgroup.controllers": "memory\n",
		"sys/a/memory.max":       "lots\n",
	})
	_, err := Read(filepath.Join(root, "proc/cgroup"), filepath.Join(root, "sys"))
	if err == nil || !strings.Contains(err.Error(), filepath.Join(root, "sys/a/memory.max")) || !strings.Contains(err.Error(), `"lots"`) {
		t.Fatalf("Read = %v, want an error naming the file and its value", err)
	}
	if _, err := Read(filepath.Join(root, "proc/none"), filepath.Join(root, "sys")); err == nil {
		t.Fatal("Read of a missing /proc/PID/cgroup: no error")
	}
}

// TestReadEscape: a cgroup path with ".." cannot walk the reader out of
// the hierarchy's root.
func TestReadEscape(t *testing.T) {
	root := tree(t, map[string]string{
		"proc/cgroup":            "0::/../outside\n",
		"sys/cgroup.controllers": "memory\n",
		"outside/memory.max":     "1\n",
	})
	l, err := Read(filepath.Join(root, "proc/cgroup"), filepath.Join(root, "sys"))
	if err != nil {
		t.Fatal(err)
	}
	if l.Limited {
		t.Fatalf("Read = %+v: read a file outside the hierarchy", l)
	}
}

// TestOwn reads this process's own cgroup: whatever the host, it answers.
func TestOwn(t *testing.T) {
	l, err := Own()
	if err != nil {
		t.Fatal(err)
	}
	if l.Limited && l.Max == 0 {
		t.Fatalf("Own = %+v: a limit of 0 bytes", l)
	}
	t.Logf("own cgroup memory limit: %+v", l)
}
