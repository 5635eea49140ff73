package apitype

import (
	"encoding/json"
	"testing"
)

func TestNetdevQoSJSON(t *testing.T) {
	for _, tt := range []struct {
		v    NetdevQoS
		want string
	}{
		{NetdevQoS{Netdev: "eth0", Device: "rxe0", Error: "no DCB"},
			`{"netdev":"eth0","device":"rxe0","supported":false,"error":"no DCB","trust":"","trust_table":false,"dcbx":[],"pfc_enabled":[],"has_pfc":false,"pfc_cap":0,"pfc_delay":0,"dscp":[]}`},
		{NetdevQoS{Netdev: "ens1f0np0", Supported: true, Trust: TrustDSCP, DCBX: []string{"host", "ieee"}, PFCEnabled: []int{3}, HasPFC: true, PFCCap: 8,
			DSCP: []DSCPPriority{{26, 3}}, ETS: &ETS{Cap: 8, PrioTC: []int{0, 0, 0, 1, 0, 0, 0, 0}, TCs: []TrafficClass{{0, "ets", 50}, {1, "strict", 0}}}},
			`{"netdev":"ens1f0np0","supported":true,"trust":"dscp","trust_table":false,"dcbx":["host","ieee"],"pfc_enabled":[3],"has_pfc":true,"pfc_cap":8,"pfc_delay":0,` +
				`"dscp":[{"dscp":26,"priority":3}],"ets":{"willing":false,"cap":8,"prio_tc":[0,0,0,1,0,0,0,0],"tcs":[{"tc":0,"tsa":"ets","bandwidth":50},{"tc":1,"tsa":"strict","bandwidth":0}]}}`},
		{NetdevQoS{Netdev: "x", Supported: true, ETS: &ETS{}},
			`{"netdev":"x","supported":true,"trust":"","trust_table":false,"dcbx":[],"pfc_enabled":[],"has_pfc":false,"pfc_cap":0,"pfc_delay":0,"dscp":[],"ets":{"willing":false,"cap":0,"prio_tc":[],"tcs":[]}}`},
	} {
		b, err := json.Marshal(tt.v)
		if err != nil || string(b) != tt.want {
			t.Errorf("Marshal(%+v) =\n%s, %v; want\n%s", tt.v, b, err, tt.want)
		}
		var back NetdevQoS
		if err := json.Unmarshal(b, &back); err != nil || back.Netdev != tt.v.Netdev || back.Supported != tt.v.Supported ||
			len(back.DSCP) != len(tt.v.DSCP) || (back.ETS == nil) != (tt.v.ETS == nil) {
			t.Errorf("round trip of %s: %+v, %v", b, back, err)
		}
	}
	b, _ := json.Marshal(Snapshot{QoS: []NetdevQoS{{Netdev: "x", Supported: true, PFCEnabled: []int{3}}}})
	var back Snapshot
	if err := json.Unmarshal(b, &back); err != nil || len(back.QoS) != 1 || !back.QoS[0].PFCOn(3) || back.QoS[0].PFCOn(4) {
		t.Errorf("snapshot qos round trip: %+v, %v (%s)", back.QoS, err, b)
	}
}

func TestNetdevQoSDSCPToPriority(t *testing.T) {
	q := NetdevQoS{DSCP: []DSCPPriority{{24, 3}, {26, 3}, {26, 5}}}
	if p, ok := q.DSCPToPriority(26); !ok || p != 3 {
		t.Errorf("DSCPToPriority(26) = %d, %v; want the first entry, 3", p, ok)
	}
	if _, ok := q.DSCPToPriority(46); ok {
		t.Error("DSCPToPriority(46) found an unmapped value")
	}
}
