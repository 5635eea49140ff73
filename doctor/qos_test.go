package doctor

import (
	"strings"
	"testing"

	"github.com/rdmad/rdmad/client/apitype"
)

// qosSnap is a snapshot with mlx5_0's port 1 over ens1f0np0 and rxe0's
// over eth0, and the observed QoS state qs, without any policy.
func qosSnap(qs ...apitype.NetdevQoS) *apitype.Snapshot {
	s := snapWith()
	s.Devices = []apitype.Device{
		{Name: "mlx5_0", Ports: []apitype.Port{{Port: 1, LinkLayer: "Ethernet", Netdev: "ens1f0np0"}}},
		{Name: "rxe0", Ports: []apitype.Port{{Port: 1, LinkLayer: "Ethernet", Netdev: "eth0"}}},
	}
	s.QoS = qs
	return s
}

// withToS adds the roce target of mlx5_0/1 with ToS tos.
func withToS(s *apitype.Snapshot, tos string) *apitype.Snapshot {
	s.Policy.Policies[0].Targets = append(s.Policy.Policies[0].Targets,
		apitype.Target{Kind: "roce", Object: "mlx5_0/1", Desired: "tos=" + tos, Actual: "tos=" + tos, State: apitype.InSync})
	return s
}

// mlx5 is ens1f0np0's state as mlx5 reports it after `mlnx_qos --trust
// dscp`: every DSCP value mapped to DSCP>>3, PFC on pfc.
func mlx5(trust string, pfc ...int) apitype.NetdevQoS {
	q := apitype.NetdevQoS{Netdev: "ens1f0np0", Device: "mlx5_0", Supported: true, Trust: trust, HasPFC: true, PFCCap: 8, PFCEnabled: pfc}
	if trust == apitype.TrustDSCP {
		for d := range 64 {
			q.DSCP = append(q.DSCP, apitype.DSCPPriority{DSCP: d, Priority: d >> 3})
		}
	}
	return q
}

var rxeNoDCB = apitype.NetdevQoS{Netdev: "eth0", Device: "rxe0",
	Error: "no DCB: the driver of eth0 has no dcbnl support (dcb: get IEEE on eth0: operation not supported), so its trust, PFC and DSCP map cannot be read or set"}

// TestObservedQoSChecks: the pfc and dscp-trust checks judge the DCB state
// the RoCE netdevs run, with or without a [policy.qos].
func TestObservedQoSChecks(t *testing.T) {
	tests := []struct {
		name, check  string
		snap         *apitype.Snapshot
		verdict      string
		message, fix string
		notMessage   string
	}{
		{"pfc on the RoCE priority", "pfc", withToS(qosSnap(mlx5("dscp", 3), rxeNoDCB), "106"), OK,
			"ens1f0np0: PFC on priority 3, the one RoCE traffic is classified into (ToS 106 from [policy.roce] tos of mlx5_0/1, DSCP 26 → priority 3)", "", ""},
		{"pfc off on the RoCE priority", "pfc", withToS(qosSnap(mlx5("dscp", 4)), "106"), Warn,
			"ens1f0np0: PFC off on priority 3, the one RoCE traffic is classified into (ToS 106 from [policy.roce] tos of mlx5_0/1, DSCP 26 → priority 3); PFC is on for: 4",
			"[policy.qos] pfc = [3] in the [[policy]] that selects ens1f0np0 (by hand: mlnx_qos -i ens1f0np0 --pfc 0,0,0,1,0,0,0,0", ""},
		{"pfc ToS from the probes", "pfc", func() *apitype.Snapshot {
			s := qosSnap(mlx5("dscp", 5))
			s.Loopback = []apitype.LoopbackPort{{Device: "mlx5_0", Port: 1, TrafficClass: 184}} // DSCP 46 → 5
			return s
		}(), OK, "PFC on priority 5, the one RoCE traffic is classified into (ToS 184 from the probes' traffic class on mlx5_0/1, DSCP 46 → priority 5)", "", ""},
		{"pfc ToS unknown, some on", "pfc", qosSnap(mlx5("pcp", 3)), OK, "ens1f0np0: PFC on priority 3", "", ""},
		{"pfc off everywhere", "pfc", qosSnap(mlx5("pcp")), Warn, "ens1f0np0: PFC off on every priority and no ECN (DCQCN) known on it", "[policy.ecn] np = [3]", ""},
		{"pfc off everywhere, lossy with ECN", "pfc", func() *apitype.Snapshot {
			s := withToS(qosSnap(mlx5("dscp")), "106")
			s.ECN = []apitype.NetdevECN{{Netdev: "ens1f0np0", NP: []int{3, 5}, RP: []int{3}}}
			return s
		}(), OK, "ens1f0np0: PFC off on every priority: lossy RoCE, with ECN (DCQCN np and rp) on priority 3", "", ""},
		{"pfc no DCB only", "pfc", qosSnap(rxeNoDCB), Skip, "eth0: no DCB: the driver of eth0 has no dcbnl support", "", ""},
		{"pfc driver without PFC", "pfc", qosSnap(apitype.NetdevQoS{Netdev: "ens1f0np0", Supported: true, Trust: "pcp"}), Skip,
			"ens1f0np0: its driver reports no PFC object", "", ""},
		{"pfc nothing observed", "pfc", qosSnap(), Skip, "no RoCE netdev whose DCB state rdmad reads", "", ""},
		// The policy's comparison stays, and a netdev the policy covers
		// is not reported twice as unsupported.
		{"pfc policy unsupported", "pfc", func() *apitype.Snapshot {
			s := qosSnap(rxeNoDCB)
			s.Policy.Policies[0].Targets = []apitype.Target{{Kind: "qos", Object: "eth0", Desired: "pfc=3", Actual: "no DCB", State: apitype.Unsupported}}
			return s
		}(), Warn, "eth0: PFC cannot be set: the netdev has no DCB", "lossless RoCE needs a NIC with DCB", "no dcbnl support"},
		{"pfc policy in sync but the RoCE priority off", "pfc", func() *apitype.Snapshot {
			s := withToS(qosSnap(mlx5("dscp", 4)), "106")
			s.Policy.Policies[0].Targets = append(s.Policy.Policies[0].Targets,
				apitype.Target{Kind: "qos", Object: "ens1f0np0", Desired: "pfc=4", Actual: "pfc=4", State: apitype.InSync})
			return s
		}(), Warn, `ens1f0np0: PFC 4 as policy "fabric" declares; ens1f0np0: PFC off on priority 3`, "[policy.qos] pfc = [3]", ""},

		{"trust dscp, RoCE mapped", "dscp-trust", withToS(qosSnap(mlx5("dscp", 3)), "106"), OK,
			"ens1f0np0: trusts DSCP; RoCE traffic goes to priority 3 (ToS 106 from [policy.roce] tos of mlx5_0/1, DSCP 26)", "", ""},
		{"trust dscp, RoCE's DSCP unmapped", "dscp-trust", func() *apitype.Snapshot {
			q := mlx5("pcp", 3)
			q.Trust, q.DSCP = "dscp", []apitype.DSCPPriority{{DSCP: 46, Priority: 5}}
			return withToS(qosSnap(q), "106")
		}(), Warn, "ens1f0np0: trusts DSCP, but the DSCP of RoCE traffic is not in its DSCP map (ToS 106", "dscp_to_prio = { 26 = <priority> }", ""},
		{"trust pcp with DSCP-marked RoCE", "dscp-trust", withToS(qosSnap(mlx5("pcp", 3)), "106"), Warn,
			"ens1f0np0: trust is pcp, but RoCE traffic is DSCP-marked (ToS 106 from [policy.roce] tos of mlx5_0/1, DSCP 26): the NIC ignores the DSCP",
			`trust = "dscp" with dscp_to_prio = { 26 = <the PFC priority> }`, ""},
		{"trust pcp, ToS unknown", "dscp-trust", qosSnap(mlx5("pcp", 3)), OK, "ens1f0np0: trust pcp: traffic is classified by its VLAN priority (untagged: priority 0); rdmad does not know RoCE's ToS", "", ""},
		{"trust pcp, ToS 0", "dscp-trust", withToS(qosSnap(mlx5("pcp", 3)), "0"), OK, "RoCE traffic carries DSCP 0", "", ""},
		{"trust dscp, ToS unknown", "dscp-trust", qosSnap(mlx5("dscp", 3)), OK, "ens1f0np0: trusts DSCP (64 DSCP values mapped)", "", ""},
		{"trust table dscp then pcp", "dscp-trust", withToS(qosSnap(func() apitype.NetdevQoS {
			q := mlx5("dscp", 3)
			q.Trust, q.TrustTable = "dscp pcp", true
			return q
		}()), "106"), OK, "ens1f0np0: trusts DSCP; RoCE traffic goes to priority 3", "", ""},
		{"trust no DCB", "dscp-trust", qosSnap(rxeNoDCB), Skip, "eth0: no DCB", "", ""},
	}
	byID := map[string]Check{}
	for _, c := range Checks {
		byID[c.ID] = c
	}
	for _, tt := range tests {
		t.Run(tt.check+"/"+tt.name, func(t *testing.T) {
			r := byID[tt.check].Run(&Env{Snapshot: tt.snap})
			if r.Verdict != tt.verdict || !strings.Contains(r.Message, tt.message) || !strings.Contains(r.Fix, tt.fix) ||
				(tt.notMessage != "" && strings.Contains(r.Message, tt.notMessage)) {
				t.Errorf("got %s %q (fix %q)\nwant %s, message containing %q (not %q), fix containing %q",
					r.Verdict, r.Message, r.Fix, tt.verdict, tt.message, tt.notMessage, tt.fix)
			}
			if (r.Verdict == Warn || r.Verdict == Fail) && r.Fix == "" {
				t.Errorf("verdict %s without a fix", r.Verdict)
			}
		})
	}
}

// TestObservedQoSHook: with Env.QoS set (rdmad reads dcbnl at the doctor
// run), the checks judge what it returns for the netdevs the snapshot
// lists, not the snapshot's older state, and read each netdev once for
// both checks.
func TestObservedQoSHook(t *testing.T) {
	calls := map[string]int{}
	e := &Env{Snapshot: withToS(qosSnap(mlx5("dscp", 3), rxeNoDCB), "106"),
		QoS: func(netdev, device string) apitype.NetdevQoS {
			calls[netdev+" "+device]++
			if netdev == "ens1f0np0" {
				return mlx5("pcp") // reset by a driver reload since the snapshot
			}
			return rxeNoDCB
		}}
	if r := checkPFC(e); r.Verdict != Warn || !strings.Contains(r.Message, "ens1f0np0: PFC off on every priority") {
		t.Errorf("pfc with the hook: %s %q; want the fresh state (PFC off everywhere)", r.Verdict, r.Message)
	}
	if r := checkTrust(e); r.Verdict != Warn || !strings.Contains(r.Message, "trust is pcp") {
		t.Errorf("dscp-trust with the hook: %s %q; want the fresh state (trust pcp)", r.Verdict, r.Message)
	}
	if want := map[string]int{"ens1f0np0 mlx5_0": 1, "eth0 rxe0": 1}; len(calls) != 2 || calls["ens1f0np0 mlx5_0"] != 1 || calls["eth0 rxe0"] != 1 {
		t.Errorf("QoS hook calls %v, want %v", calls, want)
	}
}
