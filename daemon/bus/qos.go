package bus

import "github.com/rdmad/rdmad/client/apitype"

// A QoSEntry is one RoCE netdev's DCB state as the QoS property shows it
// (D-Bus type (ssbssaua(uu)aua(uus))): what `rdmactl qos` prints.
type QoSEntry struct {
	Netdev string
	Device string
	// Supported is false when the netdev's driver has no dcbnl or the
	// read failed; Error says which, and the rest is empty.
	Supported bool
	Error     string
	Trust     string   // pcp, dscp, or a trust table's selectors
	PFC       []uint32 // priorities with PFC on, ascending
	DSCP      []DSCPMap
	// PrioTC maps priority i to its ETS traffic class; empty without ETS.
	PrioTC []uint32
	TCs    []TrafficClass
}

// A DSCPMap is one DSCP value and its priority (D-Bus type (uu)).
type DSCPMap struct {
	DSCP     uint32
	Priority uint32
}

// A TrafficClass is one ETS traffic class (D-Bus type (uus)).
type TrafficClass struct {
	TC        uint32
	Bandwidth uint32 // percent
	TSA       string // ets, strict, cbs, vendor
}

// qosEntries returns the QoS property of s, in the snapshot's (netdev)
// order.
func qosEntries(s *apitype.Snapshot) []QoSEntry {
	out := make([]QoSEntry, 0, len(s.QoS))
	for _, q := range s.QoS {
		e := QoSEntry{Netdev: q.Netdev, Device: q.Device, Supported: q.Supported, Error: q.Error, Trust: q.Trust,
			PFC: []uint32{}, DSCP: []DSCPMap{}, PrioTC: []uint32{}, TCs: []TrafficClass{}}
		for _, p := range q.PFCEnabled {
			e.PFC = append(e.PFC, uint32(p))
		}
		for _, m := range q.DSCP {
			e.DSCP = append(e.DSCP, DSCPMap{DSCP: uint32(m.DSCP), Priority: uint32(m.Priority)})
		}
		if q.ETS != nil {
			for _, tc := range q.ETS.PrioTC {
				e.PrioTC = append(e.PrioTC, uint32(tc))
			}
			for _, tc := range q.ETS.TCs {
				e.TCs = append(e.TCs, TrafficClass{TC: uint32(tc.TC), Bandwidth: uint32(tc.Bandwidth), TSA: tc.TSA})
			}
		}
		out = append(out, e)
	}
	return out
}
