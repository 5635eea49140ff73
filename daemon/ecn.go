package daemon

import (
	"slices"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/policy/ecn"
)

// readECN reads DCQCN's state of the RoCE netdevs of devs (the netdevs of
// their Ethernet ports) below the sysfs root, whether or not a policy
// manages it. A netdev without the ecn files (not mlx5) is left out; one
// whose files cannot be read is left out and returned in errs, by netdev.
func readECN(root string, devs []apitype.Device) (out []apitype.NetdevECN, errs map[string]error) {
	var netdevs []string
	for _, d := range devs {
		for _, p := range d.Ports {
			if p.LinkLayer == "Ethernet" && p.Netdev != "" && !slices.Contains(netdevs, p.Netdev) {
				netdevs = append(netdevs, p.Netdev)
			}
		}
	}
	slices.Sort(netdevs)
	c := ecn.New(ecn.Options{Root: root})
	out = []apitype.NetdevECN{}
	for _, nd := range netdevs {
		s, err := c.Observe(nd)
		switch {
		case ecn.IsUnsupported(err):
			continue
		case err != nil:
			if errs == nil {
				errs = map[string]error{}
			}
			errs[nd] = err
			continue
		}
		out = append(out, apitype.NetdevECN{Netdev: nd, NP: s.NP, RP: s.RP})
	}
	return out, errs
}
