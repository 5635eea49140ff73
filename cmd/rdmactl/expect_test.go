package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client"
	"github.com/rdmad/rdmad/daemon"
)

// syncLog is a test's log as an io.Writer for rdmad.
type syncLog struct{ t *testing.T }

func (w syncLog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestCheckExpectedDevices is #39 item 2's test: rdmad on the sysfs of a
// node with two HCAs (inventory/testdata/lost: mlx5_0, mlx5_1 and a third
// ConnectX whose RDMA device is gone) and a [health.expect] naming three;
// rdmactl check exits 1 naming the missing one, by name and by PCI
// address, in the NPD and the NHC formats. Without the expectation the
// function that lost its device is still found.
func TestCheckExpectedDevices(t *testing.T) {
	for _, tc := range []struct {
		name, expect, want string
	}{
		{"by name", `
[health.expect]
devices = 3
[[health.expect.device]]
name = "mlx5_0"
[[health.expect.device]]
name = "mlx5_1"
[[health.expect.device]]
name = "mlx5_2"
rail = "rail2"
`, "DeviceMissing: mlx5_2 (rail2) is missing"},
		{"by PCI", `
[[health.expect.device]]
pci = "0000:17:00.0"
[[health.expect.device]]
pci = "0000:2a:00.0"
[[health.expect.device]]
pci = "0000:3d:00.0"
rail = "rail2"
`, "DeviceMissing: 0000:3d:00.0 (rail2) is missing: its PCI function has no RDMA device"},
		{"nothing declared", "", "DeviceMissing: PCI function 0000:3d:00.0 (0x15b3:0x1021, driver mlx5_core) has no"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, err := os.MkdirTemp("", "rdmactl")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			cfg := filepath.Join(dir, "rdmad.toml")
			// irdma0 (on an E810) is not one of the HCAs; 0000:4e:00.0 (an
			// unbound ConnectX) is ignored so that only the case under test
			// is a problem.
			body := "[health]\nignore = [\"irdma0\", \"0000:4e:00.0\"]\n" + tc.expect
			if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			sock := filepath.Join(dir, "rdmad.sock")
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				done <- daemon.Run(ctx, daemon.Options{ConfigPath: cfg, Socket: sock, SysfsRoot: "../../inventory/testdata/lost",
					StateDir: filepath.Join(dir, "state"), Version: "test", Stderr: syncLog{t}})
			}()
			t.Cleanup(func() {
				cancel()
				select {
				case <-done:
				case <-time.After(10 * time.Second):
					t.Error("rdmad did not stop within 10 s")
				}
			})
			deadline := time.Now().Add(10 * time.Second)
			for {
				h, _, err := client.New(sock).HealthRaw(context.Background())
				if c, ok := h.Condition("DeviceMissing"); err == nil && ok && c.Status != "unknown" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no DeviceMissing verdict within 10 s: %v", err)
				}
				time.Sleep(50 * time.Millisecond)
			}
			code, out, errOut := rdmactl(t, "--socket", sock, "check")
			t.Logf("rdmactl check: %d %q", code, out)
			if code != 1 || !strings.HasPrefix(out, tc.want[:min(len(tc.want), 70)]) {
				t.Errorf("rdmactl check: exit %d, %q (stderr %q); want 1 and %q", code, out, errOut, tc.want)
			}
			code, out, _ = rdmactl(t, "--socket", sock, "check", "--format", "nhc")
			if code != 1 || !strings.Contains(out, "rdmad: "+strings.Replace(tc.want, ": ", " problem: ", 1)) {
				t.Errorf("rdmactl check --format nhc: exit %d, %q; want 1 and %q", code, out, tc.want)
			}
		})
	}
}
