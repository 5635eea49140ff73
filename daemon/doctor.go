package daemon

import (
	"context"
	"fmt"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/doctor"
	"github.com/rdmad/rdmad/inventory/ethtool"
	"github.com/rdmad/rdmad/policy/dcb"
)

// maxDoctorRuns bounds the doctor runs in progress, over the socket and
// D-Bus together: each holds a goroutine for the counter interval and
// reads sysfs twice, and a reader may ask for them in a loop.
const maxDoctorRuns = 2

// Doctor runs the troubleshooting table on this node with rdmad's own
// state: as root, it reads every process's limits and dcbnl state a
// caller could not.
func (b backend) Doctor(ctx context.Context, interval time.Duration) (apitype.DoctorReport, error) {
	d := b.d
	select {
	case d.doctorRuns <- struct{}{}:
		defer func() { <-d.doctorRuns }()
	default:
		return apitype.DoctorReport{}, fmt.Errorf("%d doctor runs are already in progress; try again in a few seconds", maxDoctorRuns)
	}
	inv := d.inv
	env := &doctor.Env{
		Ctx:         ctx,
		SysRoot:     inv.Root,
		IPoIBDevice: inv.IPoIBDevice,
		Snapshot:    d.store.Load(),
		Interval:    interval,
	}
	if inv.Root == "" || inv.Root == "/" {
		// The pause and discard counters of the RoCE netdevs (ethtool
		// netlink and ioctls, which the doctor package cannot link); not
		// for a fixture tree, whose netdevs are not this host's.
		if r, err := ethtool.Open(nil); err == nil {
			defer r.Close()
			env.NetCounters = r.FlatCounters
		} else {
			env.NetCounters = func(string) (map[string]uint64, error) { return nil, err }
		}
		// The DCB state of the RoCE netdevs now, for the pfc and
		// dscp-trust checks (dcbnl); without it they use the snapshot's.
		if c, err := dcb.Dial(nil); err == nil {
			defer c.Close()
			env.QoS = func(netdev, device string) apitype.NetdevQoS {
				q, _ := observeQoS(c, netdev, device)
				return q
			}
		}
	}
	if d.resources != nil {
		// Who pins memory, for the memlock check when registration is at
		// risk (read only then, bounded by the run's context).
		env.Resources = func() (apitype.Resources, error) { return d.readResources(ctx) }
	}
	checks := doctor.Run(env, doctor.Checks)
	if err := ctx.Err(); err != nil {
		return apitype.DoctorReport{}, fmt.Errorf("doctor: %w", err)
	}
	return apitype.DoctorReport{Worst: doctor.Worst(checks), Checks: checks}, nil
}
