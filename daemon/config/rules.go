package config

import (
	"slices"

	"github.com/rdmad/rdmad/policy"
	"github.com/rdmad/rdmad/policy/qos"
)

// Rules converts the [[policy]] blocks to the rules the policy package
// resolves, in configuration order (later blocks win).
func (c *Config) Rules() []policy.Rule {
	out := make([]policy.Rule, len(c.Policies))
	for i, p := range c.Policies {
		out[i] = p.Rule()
	}
	return out
}

// Rule converts one [[policy]] block.
func (p Policy) Rule() policy.Rule {
	r := policy.Rule{Name: p.Name, Netdevs: p.Netdevs, Devices: p.Devices, Observe: p.Mode == "observe", MTU: p.MTU}
	if p.QoS != nil {
		r.QoS = &qos.Desired{Trust: p.QoS.Trust, PFC: p.QoS.PFC, DSCPToPrio: p.QoS.DSCPToPrio, ETS: p.QoS.ETS.desired()}
	}
	r.NIC, r.Firmware = p.nicRule(), p.Firmware
	if p.RDMA != nil {
		r.AdaptiveModeration = p.RDMA.AdaptiveModeration
		if oc := p.RDMA.OptionalCounters; oc != nil {
			names := slices.Clone(*oc)
			if names == nil {
				names = []string{}
			}
			slices.Sort(names)
			r.OptionalCounters = &names
		}
		r.QPCounters = p.RDMA.QPCounters
	}
	if p.RoCE != nil {
		r.RoCE = &policy.RoCERule{ToS: p.RoCE.TOS, Mode: p.RoCE.Mode}
	}
	if p.ECN != nil {
		r.ECN = &policy.ECNRule{NP: sortedPrios(p.ECN.NP), RP: sortedPrios(p.ECN.RP)}
	}
	return r
}

// sortedPrios returns a sorted copy of a priority list, keeping nil
// (unmanaged) apart from empty (all disabled).
func sortedPrios(p []int) []int {
	if p == nil {
		return nil
	}
	out := slices.Clone(p)
	if out == nil {
		out = []int{}
	}
	slices.Sort(out)
	return out
}
