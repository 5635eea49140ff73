package daemon

import (
	"sync/atomic"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/state"
	"github.com/rdmad/rdmad/policy"
)

// probeClass resolves the GRH traffic class (RoCE v2: IP ToS) the probes use
// on each port: [probe] traffic_class when set, else the [policy.roce] tos
// of the policy in charge of the port (selecting its device or its netdev,
// as the reconciler resolves it, whatever the policy's mode), else 0. The
// configuration is set by the main loop (set); of is called by the probes'
// goroutines and reads the port's netdev from the latest inventory.
type probeClass struct {
	store *state.Store
	conf  atomic.Pointer[classConf]
}

type classConf struct {
	explicit *int
	policies []policy.Rule
}

func newProbeClass(store *state.Store, cfg *config.Config) *probeClass {
	c := &probeClass{store: store}
	c.set(cfg)
	return c
}

// set puts cfg's class settings in force.
func (c *probeClass) set(cfg *config.Config) {
	c.conf.Store(&classConf{explicit: cfg.Probe.TrafficClass, policies: cfg.Rules()})
}

// of returns the traffic class of dev's port.
func (c *probeClass) of(dev string, port int) uint8 {
	cc := c.conf.Load()
	if cc == nil {
		return 0
	}
	if cc.explicit != nil {
		return uint8(*cc.explicit)
	}
	return policyToS(cc.policies, c.store.Load().Devices, dev, port)
}

// policyToS is the [policy.roce] tos in force for dev's port, or 0 when no
// policy manages it.
func policyToS(policies []policy.Rule, devs []apitype.Device, dev string, port int) uint8 {
	pt := policy.Port{Device: dev, Port: port}
	for _, d := range devs {
		if d.Name != dev {
			continue
		}
		for _, p := range d.Ports {
			if p.Port == port {
				pt.Netdev = p.Netdev
			}
		}
	}
	if w := policy.Resolve(policies, nil, []policy.Port{pt}).Ports[pt]; w.ToS != nil {
		return uint8(*w.ToS)
	}
	return 0
}
