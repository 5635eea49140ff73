package daemon

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/policy/dcb"
	"github.com/rdmad/rdmad/policy/qos"
)

// A qosObserver reads the DCB state of the RoCE netdevs over dcbnl at every
// inventory refresh, whether or not a policy manages it, for the snapshot's
// QoS list. It belongs to the main loop.
//
// A netdev whose state cannot be read (its driver has no dcbnl, as veth,
// virtio and Soft-RoCE's netdevs) is in the list with Supported false and
// the reason, at every refresh, and logged once: again only when the
// reason changes, or after the netdev was read or gone.
type qosObserver struct {
	log *slog.Logger
	// dial opens the dcbnl connection, on first use and again after a
	// failure.
	dial func() (*dcb.Conn, error)
	conn *dcb.Conn
	// logged holds, per netdev, the reason last logged for it.
	logged map[string]string
}

func newQoSObserver(log *slog.Logger, dial func() (*dcb.Conn, error)) *qosObserver {
	return &qosObserver{log: log, dial: dial, logged: map[string]string{}}
}

// close closes the dcbnl connection.
func (o *qosObserver) close() {
	if o != nil && o.conn != nil {
		o.conn.Close()
		o.conn = nil
	}
}

// roceNetdev is a RoCE netdev and the RDMA device whose port runs over it.
type roceNetdev struct{ netdev, device string }

// roceNetdevsOf returns the netdevs of the Ethernet ports of devs, in name
// order, each with the first device (in devs' order) that runs over it.
func roceNetdevsOf(devs []apitype.Device) []roceNetdev {
	var out []roceNetdev
	for _, d := range devs {
		for _, p := range d.Ports {
			if p.LinkLayer != "Ethernet" || p.Netdev == "" ||
				slices.ContainsFunc(out, func(r roceNetdev) bool { return r.netdev == p.Netdev }) {
				continue
			}
			out = append(out, roceNetdev{p.Netdev, d.Name})
		}
	}
	slices.SortFunc(out, func(a, b roceNetdev) int { return cmp.Compare(a.netdev, b.netdev) })
	return out
}

// read returns the QoS state of the RoCE netdevs of devs. A nil observer
// (rdmad on a fixture tree, whose netdevs are not this host's) reads
// nothing.
func (o *qosObserver) read(devs []apitype.Device) []apitype.NetdevQoS {
	out := []apitype.NetdevQoS{}
	if o == nil {
		return out
	}
	netdevs := roceNetdevsOf(devs)
	if o.conn == nil && len(netdevs) > 0 {
		c, err := o.dial()
		if err != nil {
			for _, n := range netdevs {
				q := apitype.NetdevQoS{Netdev: n.netdev, Device: n.device,
					Error: fmt.Sprintf("dcbnl unavailable, the DCB state cannot be read: %v", err)}
				o.note(q, false)
				out = append(out, q)
			}
			o.prune(netdevs)
			return out
		}
		o.conn = c
	}
	for _, n := range netdevs {
		q, err := observeQoS(o.conn, n.netdev, n.device)
		o.note(q, qos.IsUnsupported(err))
		out = append(out, q)
	}
	o.prune(netdevs)
	return out
}

// note logs q's reason when it differs from what was last logged for its
// netdev, and forgets the netdev once it was read.
func (o *qosObserver) note(q apitype.NetdevQoS, unsupported bool) {
	if q.Supported {
		delete(o.logged, q.Netdev)
		return
	}
	if o.logged[q.Netdev] == q.Error {
		return
	}
	o.logged[q.Netdev] = q.Error
	if unsupported {
		o.log.Info("netdev has no DCB (dcbnl); its trust, PFC and DSCP map are reported as unsupported",
			"netdev", q.Netdev, "device", q.Device, "reason", q.Error)
		return
	}
	o.log.Warn("DCB state of a RoCE netdev unreadable", "netdev", q.Netdev, "device", q.Device, "err", q.Error)
}

// prune forgets the netdevs that are gone, so that one coming back is
// logged again.
func (o *qosObserver) prune(netdevs []roceNetdev) {
	for nd := range o.logged {
		if !slices.ContainsFunc(netdevs, func(r roceNetdev) bool { return r.netdev == nd }) {
			delete(o.logged, nd)
		}
	}
}

// observeQoS reads the DCB state of netdev (a port of device) over c. When
// it cannot be read, the entry has Supported false and Error says why, and
// the error is returned too (qos.IsUnsupported tells a driver without
// dcbnl from a failure).
func observeQoS(c *dcb.Conn, netdev, device string) (apitype.NetdevQoS, error) {
	q := apitype.NetdevQoS{Netdev: netdev, Device: device}
	a, err := qos.Observe(c, netdev)
	if err != nil {
		cause := error(err)
		var oe *dcb.OpError
		if errors.As(err, &oe) {
			cause = oe
		}
		if qos.IsUnsupported(err) {
			q.Error = fmt.Sprintf("no DCB: the driver of %s has no dcbnl support (%v), so its trust, PFC and DSCP map cannot be read or set", netdev, cause)
		} else {
			q.Error = fmt.Sprintf("cannot read the DCB state: %v", cause)
		}
		return q, err
	}
	return qosOf(q, a), nil
}

// qosOf fills q from what qos.Observe read.
func qosOf(q apitype.NetdevQoS, a qos.Actual) apitype.NetdevQoS {
	q.Supported = true
	q.Trust, q.TrustTable = a.Trust, a.TrustTable
	q.DCBX = []string{}
	q.PFCEnabled = slices.Clone(a.PFC)
	if q.PFCEnabled == nil {
		q.PFCEnabled = []int{}
	}
	q.DSCP = make([]apitype.DSCPPriority, 0, len(a.DSCPApps))
	for _, app := range a.DSCPApps {
		q.DSCP = append(q.DSCP, apitype.DSCPPriority{DSCP: int(app.Protocol), Priority: int(app.Priority)})
	}
	// By DSCP value; entries for one value keep the kernel's order, whose
	// first is the one DSCPToPriority (and the NIC) goes by.
	slices.SortStableFunc(q.DSCP, func(x, y apitype.DSCPPriority) int { return cmp.Compare(x.DSCP, y.DSCP) })
	ieee := a.IEEE
	if ieee == nil {
		return q
	}
	if ieee.HasDCBX {
		q.DCBX = dcb.DCBXNames(ieee.DCBX)
	}
	if p := ieee.PFC; p != nil {
		q.HasPFC, q.PFCCap, q.PFCDelay = true, int(p.Cap), int(p.Delay)
	}
	if e := ieee.ETS; e != nil {
		ets := &apitype.ETS{Willing: e.Willing != 0, Cap: int(e.Cap), PrioTC: make([]int, dcb.MaxPriorities)}
		for prio, tc := range e.PrioTC {
			ets.PrioTC[prio] = int(tc)
		}
		n := dcb.MaxPriorities
		if e.Cap > 0 && int(e.Cap) < n {
			n = int(e.Cap)
		}
		for tc := range n {
			ets.TCs = append(ets.TCs, apitype.TrafficClass{TC: tc, TSA: dcb.TSAName(e.TCTSA[tc]), Bandwidth: int(e.TCTxBW[tc])})
		}
		q.ETS = ets
	}
	return q
}
