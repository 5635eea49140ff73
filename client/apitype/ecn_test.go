package apitype

import (
	"encoding/json"
	"testing"
)

func TestNetdevECNJSON(t *testing.T) {
	for _, tt := range []struct {
		v    NetdevECN
		want string
	}{
		{NetdevECN{Netdev: "ens1f0np0"}, `{"netdev":"ens1f0np0","np":[],"rp":[]}`},
		{NetdevECN{Netdev: "ens1f0np0", NP: []int{3}, RP: []int{3, 4}}, `{"netdev":"ens1f0np0","np":[3],"rp":[3,4]}`},
	} {
		b, err := json.Marshal(tt.v)
		if err != nil || string(b) != tt.want {
			t.Errorf("Marshal(%+v) = %s, %v; want %s", tt.v, b, err, tt.want)
		}
		var back NetdevECN
		if err := json.Unmarshal(b, &back); err != nil || back.Netdev != tt.v.Netdev || len(back.NP) != len(tt.v.NP) || len(back.RP) != len(tt.v.RP) {
			t.Errorf("round trip of %s: %+v, %v", b, back, err)
		}
	}
	b, _ := json.Marshal(Snapshot{ECN: []NetdevECN{{Netdev: "x", NP: []int{3}}}})
	var back Snapshot
	if err := json.Unmarshal(b, &back); err != nil || len(back.ECN) != 1 || back.ECN[0].NP[0] != 3 {
		t.Errorf("snapshot ecn round trip: %+v, %v (%s)", back.ECN, err, b)
	}
}
