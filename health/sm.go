package health

import (
	"fmt"

	"github.com/rdmad/rdmad/client/apitype"
)

// noSubnetManager reports whether InfiniBand port p has its link up but
// no subnet manager: the port stays INIT (an SM moves it to ARMED and
// ACTIVE), or it has neither a LID nor an SM's LID. The doctor's sm check
// asks the same (doctor.NoSubnetManager); this package imports only the
// wire types, so the test is written twice.
func noSubnetManager(p apitype.Port) bool {
	if p.LinkLayer != "InfiniBand" || p.PhysState != "LinkUp" {
		return false
	}
	return p.State == "INIT" || (p.LID == 0 && p.SMLID == 0)
}

// subnetManager is a problem for every InfiniBand port whose link is up
// without a subnet manager: such a port carries no traffic, whatever its
// cable and switch port do, and the fix is on the fabric, not the node.
// A port whose link is down is PortDown's alone.
func (e evaluator) subnetManager() apitype.Condition {
	const t = apitype.CondSubnetManager
	if !e.inventoryRead() {
		return e.notRead(t)
	}
	var objs, msgs []string
	ib := 0
	e.ports(func(d apitype.Device, p apitype.Port) {
		if p.LinkLayer != "InfiniBand" {
			return
		}
		ib++
		if !noSubnetManager(p) {
			return
		}
		k := portKey(d.Name, p.Port)
		objs = append(objs, k)
		m := k
		if p.Netdev != "" {
			m += " (" + p.Netdev + ")"
		}
		msgs = append(msgs, fmt.Sprintf("%s is %s with LID %#x and SM LID %#x", m, orUnknown(p.State), p.LID, p.SMLID))
	})
	if len(objs) > 0 {
		return problem(t, "NoSubnetManager", objs, list(msgs)+": no subnet manager; start opensm on one node of the subnet (systemctl enable --now opensm) or check the switch's SM")
	}
	if ib == 0 {
		return ok(t, "NoInfiniBandPorts", "no InfiniBand port (RoCE needs no subnet manager)")
	}
	return ok(t, "SubnetManagerPresent", fmt.Sprintf("%d InfiniBand port(s) see a subnet manager or have their link down", ib))
}
