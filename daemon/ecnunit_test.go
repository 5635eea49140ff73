package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/daemon/unitjob"
	"github.com/rdmad/rdmad/policy/ecn"
)

// TestWriteECNThroughUnitNoBus: without a system bus the want file is
// written, the start reaches nothing, the error says so and is marked for
// a retry at the next pass (ecn.ErrNotStarted), and the want file is gone.
func TestWriteECNThroughUnitNoBus(t *testing.T) {
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", "unix:path="+filepath.Join(t.TempDir(), "nobus"))
	dir := filepath.Join(t.TempDir(), "ecn")
	err := writeECNThroughUnit(context.Background(), dir, "eth0", ecn.Want{NP: []int{3}})
	if !errors.Is(err, ecn.ErrNotStarted) || !errors.Is(err, unitjob.ErrNoBus) || !strings.Contains(err.Error(), "rdmad-ecn@eth0.service") {
		t.Errorf("writeECNThroughUnit without a bus = %v, want ErrNotStarted and ErrNoBus, naming the unit", err)
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
		t.Errorf("want directory after the start: %v, %v; want it empty", ents, err)
	}
}

// TestWriteECNThroughUnitRefusesNames: a netdev name that is a path or
// carries a newline is refused before any file or unit is touched.
func TestWriteECNThroughUnitRefusesNames(t *testing.T) {
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", "unix:path="+filepath.Join(t.TempDir(), "nobus"))
	base := t.TempDir()
	dir := filepath.Join(base, "ecn")
	for _, nd := range []string{"../eth0", "eth0/../../etc", "eth0\n", "eth0\nExecStart=/bin/sh", "", ".."} {
		err := writeECNThroughUnit(context.Background(), dir, nd, ecn.Want{NP: []int{3}})
		if err == nil || !strings.Contains(err.Error(), "invalid netdev name") || errors.Is(err, unitjob.ErrNoBus) {
			t.Errorf("writeECNThroughUnit(%q) = %v, want the name refused before the bus is asked", nd, err)
		}
	}
	if ents, _ := os.ReadDir(base); len(ents) != 0 {
		t.Errorf("refused names left %v in %s", ents, base)
	}
}
