package packaging

import (
	"bytes"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/rdmad/rdmad/daemon/config"
)

// TestExampleDropinLoads: the example drop-in the packages install as
// documentation (/usr/share/doc/rdmad/examples/, never in
// /etc/rdmad/rdmad.d where it would apply) loads as a drop-in of the
// shipped rdmad.toml, and brings its policy and peers: the copy and edit
// its comment suggests starts from a file rdmad accepts.
func TestExampleDropinLoads(t *testing.T) {
	main, err := os.ReadFile("../etc/rdmad.toml")
	if err != nil {
		t.Fatal(err)
	}
	// The shipped file names the group the packages create; a host
	// without it loads it with this process's group (as
	// daemon/config's TestDefaultFileLoads).
	if _, err := user.LookupGroup("rdmad"); err != nil {
		g, err := user.LookupGroupId(strconv.Itoa(os.Getgid()))
		if err != nil {
			t.Fatalf("look up this process's group: %v", err)
		}
		main = bytes.Replace(main, []byte("\nsocket_group = \"rdmad\"\n"), []byte("\nsocket_group = \""+g.Name+"\"\n"), 1)
	}
	example, err := os.ReadFile("../etc/examples/50-fabric.toml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "rdmad.d"), 0o755)
	if err := os.WriteFile(filepath.Join(dir, "rdmad.toml"), main, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rdmad.d", "50-fabric.toml"), example, 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(filepath.Join(dir, "rdmad.toml"))
	if err != nil {
		t.Fatalf("etc/examples/50-fabric.toml as a drop-in of etc/rdmad.toml: %v", err)
	}
	if len(c.Policies) != 1 || c.Policies[0].Name != "fabric" || len(c.Peers) != 2 {
		t.Errorf("with the example drop-in: policies %+v, peers %+v; want the policy fabric and two peers", c.Policies, c.Peers)
	}
}
