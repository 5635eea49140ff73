package doctor

import (
	"fmt"

	"github.com/rdmad/rdmad/client/apitype"
)

// smFix is what to do about an InfiniBand port without a subnet manager.
const smFix = "start a subnet manager on one node of the subnet (apt/dnf install opensm; systemctl enable --now opensm), " +
	"or enable the managed switch's SM (UFM, or the switch's `ib sm` setting); sminfo and ibstat show what the port sees"

// NoSubnetManager reports whether InfiniBand port p has its link up but no
// subnet manager: the port stays INIT (an SM moves it to ARMED and
// ACTIVE), or it has neither a LID nor an SM's LID. Such a port carries
// no traffic. The health verdict asks the same (SubnetManagerMissing).
func NoSubnetManager(p apitype.Port) bool {
	if p.LinkLayer != "InfiniBand" || p.PhysState != "LinkUp" {
		return false
	}
	return p.State == "INIT" || (p.LID == 0 && p.SMLID == 0)
}

// checkSM judges the subnet manager each InfiniBand port sees: it fails
// for a port with its link up and no SM (NoSubnetManager), and warns when
// the SM's LID changed between the two counter reads (an SM failover or a
// fight between two masters; port state and LIDs are reassigned then).
// A port whose link is down is the ports check's.
func checkSM(e *Env) Result {
	devs, r := devicesOrSkip(e)
	if r != nil {
		return *r
	}
	var after map[string]int
	if e.Interval > 0 {
		if later, err := e.Later(); err == nil {
			after = map[string]int{}
			for _, d := range later {
				for _, p := range d.Ports {
					if p.LinkLayer == "InfiniBand" {
						after[fmt.Sprintf("%s/%d", d.Name, p.Port)] = p.SMLID
					}
				}
			}
		}
	}
	var c collector
	for _, d := range devs {
		for _, p := range d.Ports {
			if p.LinkLayer != "InfiniBand" {
				continue
			}
			name := fmt.Sprintf("%s/%d", d.Name, p.Port)
			if p.Netdev != "" {
				name += " (" + p.Netdev + ")"
			}
			key := fmt.Sprintf("%s/%d", d.Name, p.Port)
			switch {
			case p.PhysState != "LinkUp":
				c.add(Skip, fmt.Sprintf("%s: link %s, no subnet manager to see (see the ports check)", name, dash(p.PhysState)), "")
			case NoSubnetManager(p):
				c.add(Fail, fmt.Sprintf("%s: no subnet manager: state %s, LID %#x, SM LID %#x", name, p.State, p.LID, p.SMLID), smFix)
			default:
				if smlid, ok := after[key]; ok && smlid != p.SMLID {
					c.add(Warn, fmt.Sprintf("%s: the subnet manager moved from LID %#x to %#x within %s", name, p.SMLID, smlid, e.Interval),
						"an SM failover or two SMs fighting for master: check the SMs of the subnet (sminfo; opensm's log, /var/log/opensm.log) and keep one master with a clear priority")
					continue
				}
				c.add(OK, fmt.Sprintf("%s: %s, LID %#x, subnet manager at LID %#x", name, p.State, p.LID, p.SMLID), "")
			}
		}
	}
	return c.result("no InfiniBand ports (RoCE and iWARP need no subnet manager)")
}
