package bus

import (
	"slices"
	"sync"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/client/apitype"
)

// The records that can grow (docs/DBUS.md, "Records"): PeerRecords,
// PeerFigures, PolicyTargetRecords, QoSRecords, FleetMismatchRecords and
// PeerGroupFaultRecords are the a{sv}-keyed forms of the tuples Peers,
// PolicyTargets, QoS, FleetMismatches and PeerGroupFaults, whose
// signatures are frozen (a new field in a struct would be a new type,
// breaking every client that reads it). A record gains a key without breaking anyone, as in
// NetworkManager's and systemd's dictionaries, and healthDict's.

// A record is one a{sv} entry of a records property.
type record = map[string]dbus.Variant

// A lazyProp is an agent property built on its first read (Get, GetAll, a
// signal) instead of with every view: the peers' records are maps of
// variants, and building them for 1,000s of peers at each of up to ten
// views a second (a loopback probe publishes every 10 ms), and comparing
// them with reflection, cost 50 times what the rest of the view does
// (BenchmarkPeersPublish*).
type lazyProp struct {
	build func(*apitype.Snapshot) []record
	// same reports, without building either value, whether the property
	// is equal in two snapshots; nil for a quiet property, which changes
	// never signal.
	same func(old, cur *apitype.Snapshot) bool
}

// lazyAgentProps are the lazy properties of Interface. Whether one is
// quiet must agree with the introspection (TestQuietProperties).
var lazyAgentProps = map[string]lazyProp{
	"PeerRecords": {build: peerRecords, same: samePeerRecords},
	"PeerFigures": {build: peerFigureRecords},
	// The fleet's records are signalled with their values, as their
	// tuples are: they change only when a fingerprint or a group's
	// verdict does, and are small then. Lazy all the same, so that a view
	// (up to ten a second) neither builds their maps of variants nor
	// compares them with reflection; same compares the snapshot's fields.
	"FleetMismatchRecords":  {build: fleetMismatchRecords, same: sameFleetMismatches},
	"PeerGroupFaultRecords": {build: groupFaultRecords, same: sameGroupFaults},
}

// lazyProps returns the lazy properties of s's agent object, each built
// once on first read: views are read by several method handlers at once.
func lazyProps(s *apitype.Snapshot) map[string]func() dbus.Variant {
	m := make(map[string]func() dbus.Variant, len(lazyAgentProps))
	for name, p := range lazyAgentProps {
		m[name] = sync.OnceValue(func() dbus.Variant { return dbus.MakeVariant(p.build(s)) })
	}
	return m
}

// samePeerRecords reports whether PeerRecords is the same in old and cur:
// it compares exactly the fields peerRecords puts in the records (a field
// added there must be added here; TestSamePeerRecords checks each).
func samePeerRecords(old, cur *apitype.Snapshot) bool {
	return slices.EqualFunc(old.Peers.Peers, cur.Peers.Peers, func(a, b apitype.Peer) bool {
		return a.Name == b.Name && a.Address == b.Address && a.Group == b.Group && a.NodeID == b.NodeID &&
			a.State == b.State && a.Reason == b.Reason && unixMicro(a.Since) == unixMicro(b.Since) &&
			a.WireVersion == b.WireVersion && a.Authenticated == b.Authenticated &&
			slices.EqualFunc(a.Paths, b.Paths, func(x, y apitype.PeerPath) bool {
				return x.Local == y.Local && x.RemoteGID == y.RemoteGID && x.RemoteQPN == y.RemoteQPN &&
					x.State == y.State && unixMicro(x.Since) == unixMicro(y.Since) && x.Authenticated == y.Authenticated
			})
	})
}

// sameFleetMismatches reports whether FleetMismatchRecords (and
// FleetMismatches) is the same in old and cur: the mismatches in order,
// each with its peer's name. Peers without mismatches add nothing to the
// property, so a peer without any that joins or leaves the selection is
// no change. It allocates nothing: at 1,000 peers it runs at every view.
func sameFleetMismatches(old, cur *apitype.Snapshot) bool {
	op, cp := old.Peers.Peers, cur.Peers.Peers
	i, j := 0, 0
	for {
		for i < len(op) && len(op[i].Mismatches) == 0 {
			i++
		}
		for j < len(cp) && len(cp[j].Mismatches) == 0 {
			j++
		}
		if i == len(op) || j == len(cp) {
			return i == len(op) && j == len(cp)
		}
		// Mismatch is a struct of strings, so == compares every field
		// the record shows.
		if op[i].Name != cp[j].Name || !slices.Equal(op[i].Mismatches, cp[j].Mismatches) {
			return false
		}
		i, j = i+1, j+1
	}
}

// sameGroupFaults reports whether PeerGroupFaultRecords (and
// PeerGroupFaults) is the same in old and cur.
func sameGroupFaults(old, cur *apitype.Snapshot) bool {
	return slices.Equal(old.Peers.GroupFaults, cur.Peers.GroupFaults)
}

// fleetMismatchRecords returns the FleetMismatchRecords property of s,
// FleetMismatches as records. The keys are the JSON names of
// apitype.Mismatch, except that the peer's value is peer_value: peer is
// the peer's name, as in the tuple (in the JSON the mismatch sits inside
// its peer). The values come from the peers' fingerprints, text another
// node sent, hence validText.
func fleetMismatchRecords(s *apitype.Snapshot) []record {
	out := []record{}
	for _, p := range s.Peers.Peers {
		for _, m := range p.Mismatches {
			out = append(out, record{
				"peer":       dbus.MakeVariant(validText(p.Name)),
				"field":      dbus.MakeVariant(validText(m.Field)),
				"local":      dbus.MakeVariant(validText(m.Local)),
				"peer_value": dbus.MakeVariant(validText(m.Peer)),
				"severity":   dbus.MakeVariant(validText(m.Severity)),
				"local_port": dbus.MakeVariant(validText(m.LocalPort)),
				"peer_port":  dbus.MakeVariant(validText(m.PeerPort)),
			})
		}
	}
	return out
}

// groupFaultRecords returns the PeerGroupFaultRecords property of s,
// PeerGroupFaults as records with apitype.GroupFault's JSON names.
func groupFaultRecords(s *apitype.Snapshot) []record {
	out := make([]record, 0, len(s.Peers.GroupFaults))
	for _, g := range s.Peers.GroupFaults {
		out = append(out, record{"group": dbus.MakeVariant(validText(g.Group)), "reason": dbus.MakeVariant(validText(g.Reason))})
	}
	return out
}

func durationNs(d time.Duration) uint64 { return uint64(max(d, 0)) }

// peerRecords returns the PeerRecords property of s, in the snapshot's
// order: what a peer is and how it is doing, without the figures that move
// with every probe (those are in PeerFigures), so that it changes only when
// a peer's or a path's state does, or the selection of peers does, and can
// be signalled.
func peerRecords(s *apitype.Snapshot) []record {
	out := make([]record, 0, len(s.Peers.Peers))
	for _, p := range s.Peers.Peers {
		paths := make([]record, 0, len(p.Paths))
		for _, pa := range p.Paths {
			paths = append(paths, record{
				"local":         dbus.MakeVariant(pa.Local),
				"remote_gid":    dbus.MakeVariant(pa.RemoteGID),
				"remote_qpn":    dbus.MakeVariant(pa.RemoteQPN),
				"state":         dbus.MakeVariant(pa.State),
				"since":         dbus.MakeVariant(unixMicro(pa.Since)),
				"authenticated": dbus.MakeVariant(pa.Authenticated),
			})
		}
		out = append(out, record{
			"name":          dbus.MakeVariant(p.Name),
			"address":       dbus.MakeVariant(p.Address),
			"group":         dbus.MakeVariant(p.Group),
			"node_id":       dbus.MakeVariant(p.NodeID),
			"state":         dbus.MakeVariant(p.State),
			"reason":        dbus.MakeVariant(validText(p.Reason)),
			"since":         dbus.MakeVariant(unixMicro(p.Since)),
			"wire_version":  dbus.MakeVariant(uint32(max(p.WireVersion, 0))),
			"authenticated": dbus.MakeVariant(p.Authenticated),
			"paths":         dbus.MakeVariant(paths),
		})
	}
	return out
}

// peerFigureRecords returns the PeerFigures property of s, in the
// snapshot's order: each peer's round trips and loss, the worst of its
// paths first (as Peers has them) and then each path's. It moves with
// every probe and is quiet.
func peerFigureRecords(s *apitype.Snapshot) []record {
	out := make([]record, 0, len(s.Peers.Peers))
	for _, p := range s.Peers.Peers {
		f := summarisePeer(p)
		paths := make([]record, 0, len(p.Paths))
		for _, pa := range p.Paths {
			paths = append(paths, record{
				"local":             dbus.MakeVariant(pa.Local),
				"remote_gid":        dbus.MakeVariant(pa.RemoteGID),
				"rtt_p50_ns":        dbus.MakeVariant(durationNs(pa.RTTP50)),
				"rtt_p99_ns":        dbus.MakeVariant(durationNs(pa.RTTP99)),
				"host_delay_p99_ns": dbus.MakeVariant(durationNs(pa.HostDelayP99)),
				"last_rtt_ns":       dbus.MakeVariant(durationNs(pa.LastRTT)),
				"loss_percent":      dbus.MakeVariant(pa.LossPct),
				"samples":           dbus.MakeVariant(uint32(max(pa.Samples, 0))),
				"sent":              dbus.MakeVariant(pa.Sent),
				"lost":              dbus.MakeVariant(pa.Lost),
				"lossy_flows":       dbus.MakeVariant(uint32(max(pa.LossyFlows, 0))),
			})
		}
		out = append(out, record{
			"name":         dbus.MakeVariant(p.Name),
			"rtt_p50_ns":   dbus.MakeVariant(f.p50),
			"rtt_p99_ns":   dbus.MakeVariant(f.p99),
			"last_rtt_ns":  dbus.MakeVariant(f.lastRTT),
			"loss_percent": dbus.MakeVariant(f.loss),
			"paths":        dbus.MakeVariant(paths),
			// The peer's clock against this node's (docs/PROBES.md,
			// "Clock offset"): meaningless while clock_samples is 0.
			"clock_offset_ns":       dbus.MakeVariant(int64(p.ClockOffset)),
			"clock_offset_error_ns": dbus.MakeVariant(durationNs(p.ClockOffsetError)),
			"clock_samples":         dbus.MakeVariant(uint32(max(p.ClockSamples, 0))),
		})
	}
	return out
}

// targetRecords returns ts, the PolicyTargets tuples of the agent or a
// device, as PolicyTargetRecords.
func targetRecords(ts []Target) []record {
	out := make([]record, 0, len(ts))
	for _, t := range ts {
		out = append(out, record{
			"policy":  dbus.MakeVariant(t.Policy),
			"kind":    dbus.MakeVariant(t.Kind),
			"object":  dbus.MakeVariant(t.Object),
			"desired": dbus.MakeVariant(t.Desired),
			"actual":  dbus.MakeVariant(t.Actual),
			"state":   dbus.MakeVariant(t.State),
			"error":   dbus.MakeVariant(validText(t.Error)),
		})
	}
	return out
}

// qosRecords returns the QoS tuples es as QoSRecords; the DSCP map and the
// traffic classes are records too, so that they can grow as well.
func qosRecords(es []QoSEntry) []record {
	out := make([]record, 0, len(es))
	for _, e := range es {
		dscp := make([]record, 0, len(e.DSCP))
		for _, m := range e.DSCP {
			dscp = append(dscp, record{"dscp": dbus.MakeVariant(m.DSCP), "priority": dbus.MakeVariant(m.Priority)})
		}
		tcs := make([]record, 0, len(e.TCs))
		for _, tc := range e.TCs {
			tcs = append(tcs, record{"tc": dbus.MakeVariant(tc.TC), "bandwidth": dbus.MakeVariant(tc.Bandwidth),
				"tsa": dbus.MakeVariant(tc.TSA)})
		}
		out = append(out, record{
			"netdev":    dbus.MakeVariant(e.Netdev),
			"device":    dbus.MakeVariant(e.Device),
			"supported": dbus.MakeVariant(e.Supported),
			"error":     dbus.MakeVariant(validText(e.Error)),
			"trust":     dbus.MakeVariant(e.Trust),
			"pfc":       dbus.MakeVariant(e.PFC),
			"dscp":      dbus.MakeVariant(dscp),
			"prio_tc":   dbus.MakeVariant(e.PrioTC),
			"tcs":       dbus.MakeVariant(tcs),
		})
	}
	return out
}
