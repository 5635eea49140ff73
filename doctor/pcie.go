package doctor

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/rdmad/rdmad/client/apitype"
)

// checkPCIe fails for each PCIe link that trained below what its path
// allows (apitype.PCIeLink.Degraded): a x8 link on a x16 card in a x16
// slot halves the NIC's bandwidth to the host, whatever the port's rate
// says, and nothing else in the table would show it. A VF shares its PF's
// link, so the devices on one link are reported together.
func checkPCIe(e *Env) Result {
	devs, r := devicesOrSkip(e)
	if r != nil {
		return *r
	}
	var addrs []string
	names := map[string][]string{}
	links := map[string]apitype.PCIeLink{}
	for _, d := range devs {
		if d.PCIe == nil {
			continue
		}
		a := d.PCIe.Address
		if _, ok := links[a]; !ok {
			addrs = append(addrs, a)
			links[a] = *d.PCIe
		}
		names[a] = append(names[a], d.Name)
	}
	var c collector
	for _, a := range addrs {
		l := links[a]
		limit := ""
		if l.Limit != "" {
			limit = " (limited by " + l.Limit + ")"
		}
		who := fmt.Sprintf("%s (%s)", strings.Join(names[a], ", "), a)
		if l.Degraded() {
			c.add(Fail, fmt.Sprintf("%s: PCIe %s, its path allows %s%s", who, pcieStr(l.Speed, l.Width), pcieStr(l.PathMaxSpeed, l.PathMaxWidth), limit),
				fmt.Sprintf("reseat the card or move it to a%s slot; check `lspci -vv -s %s` LnkSta", slotStr(l), a))
			continue
		}
		c.add(OK, fmt.Sprintf("%s: PCIe %s, as its path allows%s", who, pcieStr(l.Speed, l.Width), limit), "")
	}
	return c.result("no RDMA device on PCIe (software devices only, or sysfs does not say)")
}

// pcieStr says a link's speed and width as lspci does: "16 GT/s x16".
func pcieStr(gts float64, width int) string {
	s := "unknown speed"
	if gts > 0 {
		s = strconv.FormatFloat(gts, 'f', -1, 64) + " GT/s"
	}
	if width > 0 {
		return s + " x" + strconv.Itoa(width)
	}
	return s + ", unknown width"
}

// slotStr names the slot a degraded link's card wants: " x16 Gen4".
func slotStr(l apitype.PCIeLink) string {
	s := ""
	if l.PathMaxWidth > 0 {
		s += " x" + strconv.Itoa(l.PathMaxWidth)
	}
	if g := apitype.PCIeGen(l.PathMaxSpeed); g > 0 {
		s += " Gen" + strconv.Itoa(g)
	}
	if s == "" {
		return "nother"
	}
	return s
}
