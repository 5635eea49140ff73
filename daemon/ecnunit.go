package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rdmad/rdmad/daemon/unitjob"
	"github.com/rdmad/rdmad/policy/ecn"
)

// ecnUnitTimeout bounds one run of rdmad-ecn@<netdev>.service. The main
// loop waits for it (the reconciler runs there); the oneshot writes at
// most 16 sysfs files and takes milliseconds, and the watchdog
// (WatchdogSec=30s) is pinged every 15 s.
const ecnUnitTimeout = 5 * time.Second

// writeECNThroughUnit is policy.Options.ECNUnit for the host's sysfs (dir
// is ecn.WantDir): under rdmad.service /sys is read-only
// (ProtectKernelTunables=yes), so what rdmad cannot write it leaves in
// dir/<netdev> and has
// rdmad-ecn@<netdev>.service write, whose sandbox opens exactly that
// netdev's ecn directory (docs/SECURITY.md, "ECN under systemd"). The
// reconciler calls it only after its own write failed with EROFS, once per
// change, and reads the files back itself.
func writeECNThroughUnit(ctx context.Context, dir, netdev string, w ecn.Want) error {
	// The name comes from rdmad's inventory, but it becomes a path and a
	// unit instance: checked before either is touched.
	if err := ecn.ValidNetdev(netdev); err != nil {
		return err
	}
	if err := ecn.WriteWantFile(dir, netdev, w); err != nil {
		return err
	}
	// The next write replaces the file atomically: a failed removal
	// leaves nothing the unit would act on without rdmad starting it.
	defer ecn.RemoveWantFile(dir, netdev)
	ctx, cancel := context.WithTimeout(ctx, ecnUnitTimeout)
	defer cancel()
	err := unitjob.Start(ctx, ecn.UnitName(netdev))
	if errors.Is(err, unitjob.ErrNoBus) {
		// No bus yet (boot): the next pass tries again.
		return fmt.Errorf("%w: %w", ecn.ErrNotStarted, err)
	}
	return err
}
