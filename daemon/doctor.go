package daemon

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon/access"
	"github.com/rdmad/rdmad/doctor"
	"github.com/rdmad/rdmad/inventory/ethtool"
	"github.com/rdmad/rdmad/policy/dcb"
)

// maxDoctorRuns bounds the doctor runs in progress, over the socket and
// D-Bus together: each holds a goroutine for the counter interval and
// reads sysfs twice, and a reader may ask for them in a loop.
// reservedDoctorRuns of them are the admins' alone, and a non-admin uid
// holds at most one: with one shared pool, two runs of one socket-group
// member kept root's rdmactl doctor refused for as long as it looped.
const (
	maxDoctorRuns      = 3
	reservedDoctorRuns = 1
)

// doctorSlots hands out the doctor runs (see maxDoctorRuns).
type doctorSlots struct {
	mu      sync.Mutex
	runs    int            // in progress, everyone's
	limited int            // in progress for non-admins
	perUID  map[uint32]int // in progress for each non-admin uid
}

// take returns the release of a run for caller (admin says whether it is
// one), or an error saying why none is free.
func (s *doctorSlots) take(caller access.Caller, admin bool) (release func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.runs >= maxDoctorRuns:
		return nil, fmt.Errorf("%d doctor runs are already in progress; try again in a few seconds", maxDoctorRuns)
	case admin:
		s.runs++
		return func() { s.mu.Lock(); s.runs--; s.mu.Unlock() }, nil
	case s.perUID[caller.UID] > 0:
		return nil, fmt.Errorf("uid %d already has a doctor run in progress; wait for it to end (one run per user at a time)", caller.UID)
	case s.limited >= maxDoctorRuns-reservedDoctorRuns:
		return nil, fmt.Errorf("%d doctor runs of other users are in progress; try again in a few seconds", s.limited)
	}
	if s.perUID == nil {
		s.perUID = map[uint32]int{}
	}
	s.runs++
	s.limited++
	s.perUID[caller.UID]++
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.runs--
		s.limited--
		if s.perUID[caller.UID]--; s.perUID[caller.UID] == 0 {
			delete(s.perUID, caller.UID)
		}
	}, nil
}

// Doctor runs the troubleshooting table on this node with rdmad's own
// state: as root, it reads every process's limits and dcbnl state a
// caller could not.
func (b backend) Doctor(ctx context.Context, interval time.Duration) (apitype.DoctorReport, error) {
	d := b.d
	// The transports put the caller they checked in ctx; a call without
	// one counts as a non-admin's (of no real uid).
	caller, ok := access.CallerFrom(ctx)
	if !ok {
		caller = access.Caller{UID: ^uint32(0)}
	}
	release, err := d.doctorRuns.take(caller, d.api.Roles().LevelFor(caller) >= access.Admin)
	if err != nil {
		return apitype.DoctorReport{}, err
	}
	defer release()
	// The peers check names a degraded peer's loss and round trips.
	d.freshPeers(ctx)
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
