package apitype

import (
	"encoding/json"
	"strconv"
	"strings"
)

// FormatPriorities writes a set of priorities (those with PFC on, those
// with ECN on) as policy targets, the doctor, rdmactl and the fleet
// fingerprint show them: "3,4", "none" when none. Nodes compare these
// texts, so every writer of them uses this one.
func FormatPriorities(prios []int) string {
	if len(prios) == 0 {
		return "none"
	}
	ps := make([]string, len(prios))
	for i, p := range prios {
		ps[i] = strconv.Itoa(p)
	}
	return strings.Join(ps, ",")
}

// Trust modes of NetdevQoS.Trust: what classifies received traffic into
// priorities.
const (
	TrustPCP  = "pcp"  // the VLAN priority (PCP); untagged traffic goes to priority 0
	TrustDSCP = "dscp" // the IP DSCP, through the DSCP map
)

// A NetdevQoS is the DCB state one RoCE netdev runs, as the kernel's dcbnl
// reports it (what `mlnx_qos -i <netdev>` shows), read whether or not a
// [policy.qos] manages it.
type NetdevQoS struct {
	Netdev string `json:"netdev"`
	// Device is the RDMA device whose port runs over the netdev.
	Device string `json:"device,omitempty"`
	// Supported reports whether the netdev's DCB state was read. It is
	// false for a netdev whose driver has no dcbnl (veth, virtio, Soft-RoCE's
	// netdevs: the kernel answers EOPNOTSUPP) and for one that could not
	// be read; Error says which. The other fields are then empty.
	Supported bool   `json:"supported"`
	Error     string `json:"error,omitempty"`
	// Trust is "pcp" or "dscp" (TrustPCP, TrustDSCP); a kernel APP trust
	// table with other contents gives its selectors' names in order of
	// precedence, joined by spaces ("dscp pcp"; "" for an empty table).
	Trust string `json:"trust"`
	// TrustTable reports whether Trust is the kernel's APP trust table
	// (Linux 6.3+ with a driver that has one); otherwise it follows the
	// convention of mlx5 and mlnx_qos: the port trusts DSCP exactly when
	// its APP table has DSCP entries.
	TrustTable bool `json:"trust_table"`
	// DCBX names the DCBX mode bits: "host" (the host owns the settings),
	// "lld-managed" (the NIC's firmware negotiates them with the switch),
	// "cee", "ieee", "static"; [] when the driver does not say.
	DCBX []string `json:"dcbx"`
	// PFCEnabled lists the priorities (0-7, ascending) with priority flow
	// control on; [] when none, or when the driver reports no PFC
	// (HasPFC false).
	PFCEnabled []int `json:"pfc_enabled"`
	HasPFC     bool  `json:"has_pfc"`
	// PFCCap is how many priorities may have PFC on at once.
	PFCCap int `json:"pfc_cap"`
	// PFCDelay is struct ieee_pfc's delay: the allowance for the link's
	// round trip, in bits by the standard; mlx5 keeps the cable length in
	// meters there (mlnx_qos's "Cable len").
	PFCDelay int `json:"pfc_delay"`
	// DSCP is the DSCP part of the APP table, by DSCP value ascending
	// (several priorities for one value are listed as the kernel keeps
	// them, side by side); [] when it has none.
	DSCP []DSCPPriority `json:"dscp"`
	// ETS is the enhanced transmission selection, nil when the driver
	// reports none.
	ETS *ETS `json:"ets,omitempty"`
}

// A DSCPPriority maps one DSCP value (0-63) to a priority (0-7).
type DSCPPriority struct {
	DSCP     int `json:"dscp"`
	Priority int `json:"priority"`
}

// ETS is a port's IEEE 802.1Qaz enhanced transmission selection: which
// traffic class each priority is queued in, and how the classes share the
// link.
type ETS struct {
	Willing bool `json:"willing"`
	// Cap is the number of traffic classes the port supports (0: unknown).
	Cap int `json:"cap"`
	// PrioTC maps priority i (0-7) to its traffic class.
	PrioTC []int `json:"prio_tc"`
	// TCs are the traffic classes 0-7.
	TCs []TrafficClass `json:"tcs"`
}

// A TrafficClass is one ETS traffic class.
type TrafficClass struct {
	TC int `json:"tc"`
	// TSA is the transmission selection algorithm: "strict", "ets" (a
	// share of the bandwidth), "cbs" (credit-based shaper), "vendor".
	TSA string `json:"tsa"`
	// Bandwidth is the class's share of the link in percent (for "ets").
	Bandwidth int `json:"bandwidth"`
}

// MarshalJSON writes NetdevQoS with its lists as [] rather than null.
func (q NetdevQoS) MarshalJSON() ([]byte, error) {
	type plain NetdevQoS // no methods: no recursion
	return json.Marshal(plain(withLists(q)))
}

// MarshalJSON writes ETS with its lists as [] rather than null.
func (e ETS) MarshalJSON() ([]byte, error) {
	type plain ETS // no methods: no recursion
	return json.Marshal(plain(withLists(e)))
}

// DSCPToPriority returns the priority q maps dscp to, and whether its DSCP
// map has the value (the first entry, when the kernel keeps several).
func (q NetdevQoS) DSCPToPriority(dscp int) (int, bool) {
	for _, m := range q.DSCP {
		if m.DSCP == dscp {
			return m.Priority, true
		}
	}
	return 0, false
}

// PFCOn reports whether q has PFC enabled on priority prio.
func (q NetdevQoS) PFCOn(prio int) bool {
	for _, p := range q.PFCEnabled {
		if p == prio {
			return true
		}
	}
	return false
}
