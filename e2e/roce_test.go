//go:build e2e

package e2e

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/policy/roce"
)

// roceDev is the Soft-RoCE device guest/init creates.
const roceDev = "rxe0"

// roceReadRaw reads one port's rdma_cm attributes straight from configfs,
// independently of package roce: it makes the device group if needed and
// removes it again, like mlnx-tools' cma_roce_tos.
func roceReadRaw(t *testing.T, dev string, port int) (tos, mode string) {
	t.Helper()
	group := filepath.Join(roce.DefaultRoot, "rdma_cm", dev)
	if err := os.Mkdir(group, 0o755); err == nil {
		defer func() {
			if err := unix.Rmdir(group); err != nil {
				t.Errorf("rmdir %s: %v", group, err)
			}
		}()
	} else if !errors.Is(err, os.ErrExist) {
		t.Fatalf("mkdir %s: %v", group, err)
	}
	dir := filepath.Join(group, "ports", "1")
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatalf("read %s: %v", name, err)
		}
		return strings.TrimSpace(string(b))
	}
	return read("default_roce_tos"), read("default_roce_mode")
}

// roceConfigfsMounted reports whether configfs is mounted at its usual place.
func roceConfigfsMounted(t *testing.T) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		t.Fatalf("read mounts: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[1] == roce.DefaultRoot && f[2] == "configfs" {
			return true
		}
	}
	return false
}

func TestRoceConfigfs(t *testing.T) {
	requireVM(t)
	if _, err := os.Stat(filepath.Join("/sys/class/infiniband", roceDev)); err != nil {
		t.Fatalf("%s missing although RDMAD_VM=1: %v", roceDev, err)
	}
	// rdma_cm provides the configfs subsystem; with rxe it is normally
	// loaded already (rdma-core loads it), otherwise load it as rdmad's
	// docs tell admins to.
	if _, err := os.Stat("/sys/module/rdma_cm"); err != nil {
		mustRun(t, "modprobe", "rdma_cm")
	}
	if _, err := os.Stat("/sys/module/rdma_cm"); err != nil {
		t.Fatalf("rdma_cm module not present after modprobe: %v", err)
	}

	c := roce.New(roce.Options{}) // real configfs, mounted on demand
	orig, err := c.Observe(roceDev, 1)
	if err != nil {
		t.Fatalf("Observe: %v", err)
	}
	t.Logf("original defaults of %s port 1: %+v", roceDev, orig)
	t.Cleanup(func() {
		if err := c.Apply(roceDev, 1, orig); err != nil {
			t.Errorf("restore %+v: %v", orig, err)
		}
	})
	if !roceConfigfsMounted(t) {
		t.Errorf("configfs not mounted at %s after Observe", roce.DefaultRoot)
	}
	groupExisted := false
	if _, err := os.Stat(filepath.Join(roce.DefaultRoot, "rdma_cm", roceDev)); err == nil {
		groupExisted = true
	}

	for _, want := range []roce.Settings{{ToS: 106, Mode: roce.ModeV2}, {ToS: 0, Mode: roce.ModeV2}, {ToS: 184, Mode: roce.ModeV2}} {
		if err := c.Apply(roceDev, 1, want); err != nil {
			t.Fatalf("Apply(%+v): %v", want, err)
		}
		if got, err := c.Observe(roceDev, 1); err != nil || got != want {
			t.Errorf("Observe after Apply(%+v) = %+v, %v", want, got, err)
		}
		// Read back through a fresh group: the kernel kept the values on
		// the cma device although Apply removed the group it made.
		tos, mode := roceReadRaw(t, roceDev, 1)
		if tos != strconv.Itoa(int(want.ToS)) || mode != string(want.Mode) {
			t.Errorf("configfs shows tos %q mode %q, want %d %q", tos, mode, want.ToS, want.Mode)
		}
	}
	if _, err := os.Stat(filepath.Join(roce.DefaultRoot, "rdma_cm", roceDev)); !groupExisted && err == nil {
		t.Errorf("Apply left the configfs group it created behind")
	}

	// rxe is RoCE v2 only (RDMA_CORE_PORT_IBA_ROCE_UDP_ENCAP), so the
	// kernel refuses v1; the error must say why.
	err = c.Apply(roceDev, 1, roce.Settings{ToS: 0, Mode: roce.ModeV1})
	if !errors.Is(err, unix.EINVAL) || !strings.Contains(err.Error(), "does not support IB/RoCE v1") {
		t.Errorf("Apply(RoCE v1) on rxe = %v, want EINVAL with an explanation", err)
	}

	if _, err := c.Observe(roceDev, 2); err == nil || !strings.Contains(err.Error(), "no port 2 (ports: 1)") {
		t.Errorf("Observe(port 2) = %v, want a no-such-port error listing port 1", err)
	}
	_, err = c.Observe("nosuchdev0", 1)
	if err == nil || !strings.Contains(err.Error(), `rdma_cm knows no RDMA device "nosuchdev0"`) {
		t.Errorf("Observe(nosuchdev0) = %v, want an unknown-device error", err)
	}
}
