package roce

import (
	"bufio"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeConfigfs lays out a temp dir like configfs with rdma_cm and an
// existing group for dev with the given ports. It is a fake: real configfs
// creates the ports when the group is made, and validates writes. The real
// thing is exercised by e2e/roce_test.go in the Soft-RoCE VM.
func fakeConfigfs(t *testing.T, dev string, ports ...string) string {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "rdma_cm"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range ports {
		dir := filepath.Join(root, "rdma_cm", dev, "ports", p)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, "default_roce_tos"), []byte("0\n"), 0o644)
		os.WriteFile(filepath.Join(dir, "default_roce_mode"), []byte("RoCE v2\n"), 0o644)
	}
	return root
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestObserveApply(t *testing.T) {
	root := fakeConfigfs(t, "mlx5_0", "1", "2")
	c := New(Options{Root: root})

	got, err := c.Observe("mlx5_0", 1)
	if err != nil || got != (Settings{ToS: 0, Mode: ModeV2}) {
		t.Fatalf("Observe = %+v, %v; want ToS 0, RoCE v2", got, err)
	}
	want := Settings{ToS: 106, Mode: ModeV1}
	if err := c.Apply("mlx5_0", 2, want); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	port2 := filepath.Join(root, "rdma_cm", "mlx5_0", "ports", "2")
	if got := readFile(t, filepath.Join(port2, "default_roce_tos")); got != "106" {
		t.Errorf("default_roce_tos = %q, want %q", got, "106")
	}
	if got := readFile(t, filepath.Join(port2, "default_roce_mode")); got != "IB/RoCE v1" {
		t.Errorf("default_roce_mode = %q, want %q", got, "IB/RoCE v1")
	}
	if got, err := c.Observe("mlx5_0", 2); err != nil || got != want {
		t.Errorf("Observe after Apply = %+v, %v; want %+v", got, err, want)
	}
	// Port 1 untouched.
	if got, err := c.Observe("mlx5_0", 1); err != nil || got != (Settings{ToS: 0, Mode: ModeV2}) {
		t.Errorf("Observe(port 1) = %+v, %v; want it unchanged", got, err)
	}
	// A pre-existing group is not removed (only groups this package made).
	if _, err := os.Stat(filepath.Join(root, "rdma_cm", "mlx5_0")); err != nil {
		t.Errorf("existing group removed: %v", err)
	}
}

func TestErrors(t *testing.T) {
	root := fakeConfigfs(t, "rxe0", "1")
	c := New(Options{Root: root})
	tests := []struct {
		name string
		do   func() error
		want string
	}{
		{"missing port", func() error { _, err := c.Observe("rxe0", 3); return err },
			"roce: observe RDMA-CM defaults of rxe0 port 3: no port 3 (ports: 1)"},
		{"port zero", func() error { _, err := c.Observe("rxe0", 0); return err },
			"roce: observe RDMA-CM defaults of rxe0 port 0: invalid port 0: ports count from 1"},
		{"path in device name", func() error { return c.Apply("../x", 1, Settings{Mode: ModeV2}) },
			`roce: apply RDMA-CM defaults of ../x port 1: invalid device name "../x"`},
		{"bad mode", func() error { return c.Apply("rxe0", 1, Settings{Mode: "v3"}) },
			`roce: apply on rxe0 port 1: invalid mode "v3"; use ParseMode`},
		{"not mounted", func() error {
			_, err := New(Options{Root: t.TempDir()}).Observe("rxe0", 1)
			return err
		}, "roce: observe RDMA-CM defaults of rxe0 port 1: configfs is not mounted at "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.do()
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("error = %v, want prefix %q", err, tt.want)
			}
		})
	}
}

func TestGroupCreatedAndRemoved(t *testing.T) {
	root := fakeConfigfs(t, "rxe0", "1")
	c := New(Options{Root: root})
	// In the fake, mkdir makes an empty group (real configfs would add the
	// ports), so the port is missing; the group made for the call must be
	// removed again either way.
	_, err := c.Observe("mlx5_1", 1)
	if err == nil || !strings.Contains(err.Error(), "no port 1 (ports: none)") {
		t.Fatalf("Observe on a device without ports = %v, want a no-port error", err)
	}
	if _, err := os.Stat(filepath.Join(root, "rdma_cm", "mlx5_1")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("group made by Observe still exists (stat: %v)", err)
	}
}

func TestParseMode(t *testing.T) {
	tests := []struct {
		in   string
		want Mode
		err  bool
	}{
		{"RoCE v2", ModeV2, false},
		{"v2", ModeV2, false},
		{"rocev2", ModeV2, false},
		{"IB/RoCE v1", ModeV1, false},
		{" V1 ", ModeV1, false},
		{"v3", "", true},
		{"", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseMode(tt.in)
			if (err != nil) != tt.err || got != tt.want {
				t.Errorf("ParseMode(%q) = %q, %v; want %q, error %v", tt.in, got, err, tt.want, tt.err)
			}
		})
	}
}

func TestMountinfoHas(t *testing.T) {
	const mountinfo = `22 1 0:21 / /sys rw,nosuid shared:7 - sysfs sysfs rw
37 22 0:33 / /sys/kernel/config rw,nosuid,nodev,noexec,relatime shared:15 - configfs configfs rw
38 1 0:34 / /mnt/with\040space rw - configfs none rw
39 1 0:35 / /mnt/tmp rw - tmpfs tmpfs rw
`
	tests := []struct {
		mountpoint string
		want       bool
	}{
		{"/sys/kernel/config", true},
		{"/mnt/with space", true},
		{"/mnt/tmp", false},
		{"/sys", false},
		{"/nowhere", false},
	}
	for _, tt := range tests {
		t.Run(tt.mountpoint, func(t *testing.T) {
			got, err := mountinfoHas(bufio.NewScanner(strings.NewReader(mountinfo)), tt.mountpoint, "configfs")
			if err != nil || got != tt.want {
				t.Errorf("mountinfoHas(%q) = %v, %v; want %v", tt.mountpoint, got, err, tt.want)
			}
		})
	}
}

// TestIntegrationMountWithoutConfigfs asks the real kernel to mount configfs
// where it is not built in, and checks that the error says so.
func TestIntegrationMountWithoutConfigfs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to call mount(2)")
	}
	fss, err := os.ReadFile("/proc/filesystems")
	if err != nil {
		t.Fatalf("read /proc/filesystems: %v", err)
	}
	if strings.Contains(string(fss), "\tconfigfs\n") {
		t.Skip("this kernel has configfs; mounting it is covered by e2e/roce_test.go in the VM")
	}
	_, err = New(Options{Root: t.TempDir(), Mount: true}).Observe("rxe0", 1)
	if err == nil || !strings.Contains(err.Error(), "mount configfs at ") || !strings.Contains(err.Error(), "CONFIG_CONFIGFS_FS") {
		t.Errorf("Observe with configfs unavailable = %v, want a mount error naming CONFIG_CONFIGFS_FS", err)
	}
	t.Log(err)
}
