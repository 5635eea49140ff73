package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// rdmactl links the wire types (client/apitype), the client, the doctor's
// checks and the sysfs inventory they read, and nothing of the daemon:
// docs/ARCHITECTURE.md's layout, as tailscale's deps_test.go keeps its CLI's.
var (
	// allowedOwn are the only packages of this module rdmactl may link.
	allowedOwn = map[string]bool{
		"github.com/rdmad/rdmad/client":         true,
		"github.com/rdmad/rdmad/client/apitype": true,
		"github.com/rdmad/rdmad/doctor":         true,
		"github.com/rdmad/rdmad/inventory":      true,
		// The verdict, decided the same way when rdmad does not answer
		// (rdmactl check): standard library and the wire types only.
		"github.com/rdmad/rdmad/health": true,
		// The pause and discard counters (ethtool netlink and ioctls):
		// the doctor's packet-loss check when rdmad does not answer.
		"github.com/rdmad/rdmad/inventory/ethtool": true,
		// RDMA netlink (mdlayher/netlink): resources when rdmad does not
		// answer.
		"github.com/rdmad/rdmad/inventory/rdmares": true,
		"github.com/rdmad/rdmad/internal/size":     true,
		// The doctor's memlock checks read /proc/PID/limits through it.
		"github.com/rdmad/rdmad/internal/memlimit": true,
	}
	// allowedOther are the packages of other modules rdmactl may link
	// besides golang.org/x/: the netlink sockets the inventory readers
	// speak over (no cgo; together +208 KiB stripped, 7.32 MB of the 8 MiB).
	allowedOther = map[string]bool{
		"github.com/mdlayher/genetlink":     true,
		"github.com/mdlayher/netlink":       true,
		"github.com/mdlayher/netlink/nlenc": true,
		"github.com/mdlayher/socket":        true,
	}
	// forbidden are modules rdmactl must never link: cgo verbs, policy
	// and the rtnetlink library, the metrics, config and bus libraries.
	forbidden = []string{
		"github.com/prometheus/",
		"github.com/BurntSushi/toml",
		"github.com/vishvananda/",
		"github.com/Mellanox/rdmamap",
		"github.com/godbus/",
		"github.com/fsnotify/",
		"github.com/coreos/",
		"google.golang.org/protobuf",
	}
)

// goList lists the packages pkg depends on (itself included), with
// CGO_ENABLED=0 as the check below builds.
func goList(t *testing.T, format, pkg string) []string {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-f", format, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	out, err := cmd.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, ee.Stderr)
		}
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}

func TestDeps(t *testing.T) {
	for _, p := range goList(t, "{{if not .Standard}}{{.ImportPath}}{{end}}", ".") {
		switch {
		case strings.HasPrefix(p, "github.com/rdmad/rdmad/cmd/rdmactl"):
		case strings.HasPrefix(p, "github.com/rdmad/rdmad/"):
			if !allowedOwn[p] {
				t.Errorf("rdmactl links %s: only the wire types, the client, the verdict, the doctor and the inventory may be linked (see docs/ARCHITECTURE.md)", p)
			}
		case p == "golang.org/x/sys/unix":
			// adjtimex for the doctor's clock check, TCGETS for the terminal check.
		case allowedOther[p]:
		default:
			for _, f := range forbidden {
				if strings.HasPrefix(p, f) {
					t.Errorf("rdmactl links %s", p)
				}
			}
			if !strings.HasPrefix(p, "golang.org/x/") {
				t.Errorf("rdmactl links %s, which this test does not know: add it to the allowed list only if a CLI needs it", p)
			}
		}
	}
}

// TestWireTypesAreALeaf: client/apitype imports only the standard library.
func TestWireTypesAreALeaf(t *testing.T) {
	for _, p := range goList(t, "{{if not .Standard}}{{.ImportPath}}{{end}}", "github.com/rdmad/rdmad/client/apitype") {
		if p != "github.com/rdmad/rdmad/client/apitype" {
			t.Errorf("client/apitype depends on %s; it must import only the standard library", p)
		}
	}
}

// TestBuildsWithoutCgo builds rdmactl as packaging/build ships it
// (CGO_ENABLED=0, -trimpath, -s -w: static, no libc) and as make build
// makes it, and bounds its size; packaging/check checks the shipped binary
// against the same 8 MiB.
func TestBuildsWithoutCgo(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	const maxSize = 8 << 20
	bin := filepath.Join(t.TempDir(), "rdmactl")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("CGO_ENABLED=0 go build ./cmd/rdmactl: %v\n%s", err, out)
	}
	fi, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("rdmactl, CGO_ENABLED=0, stripped: %d bytes", fi.Size())
	if fi.Size() > maxSize {
		t.Errorf("rdmactl is %d bytes, over %d: find what pulls in the weight (go tool nm -size -sort size)", fi.Size(), maxSize)
	}
}
