package doctor

import (
	"fmt"

	"github.com/rdmad/rdmad/client/apitype"
)

// checkFirmware judges the firmware targets of the policies ([[policy]]
// firmware): a device that runs another version than its policy expects
// is a warning. rdmad never flashes firmware, so the fix is the vendor's
// tool, not rdmactl policy apply.
func checkFirmware(e *Env) Result {
	if e.Snapshot == nil {
		return notReachable(e)
	}
	var c collector
	for _, p := range e.Snapshot.Policy.Policies {
		for _, t := range p.Targets {
			if t.Kind != "firmware" {
				continue
			}
			switch t.State {
			case apitype.InSync:
				c.add(OK, fmt.Sprintf("%s: firmware %s as policy %q expects (%s)", t.Object, t.Actual, p.Name, t.Desired), "")
			case apitype.Drifted:
				c.add(Warn, fmt.Sprintf("%s: firmware %s, policy %q expects %s", t.Object, dash(t.Actual), p.Name, t.Desired),
					"update the firmware with the vendor's tool (mlxfwmanager, mstflint) and reboot or reset the device; rdmad does not flash firmware")
			case apitype.Unsupported:
				c.add(Warn, fmt.Sprintf("%s: firmware version unknown (%s), policy %q expects %s", t.Object, dash(t.Error), p.Name, t.Desired),
					"leave devices without a firmware version (rxe) out of the policy's firmware")
			default:
				c.add(Warn, fmt.Sprintf("%s: firmware not checked: %s", t.Object, dash(t.Error)), "see journalctl -u rdmad")
			}
		}
	}
	return c.result("no [[policy]] declares a firmware version")
}
