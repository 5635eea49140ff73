package apitype

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestHealthy(t *testing.T) {
	tests := []struct {
		name string
		s    Snapshot
		want bool
	}{
		{"empty", Snapshot{}, true},
		{"config error", Snapshot{Config: Config{Error: "x"}}, false},
		{"component error", Snapshot{Components: map[string]Component{"a": {State: Error}}}, false},
		{"unavailable is healthy", Snapshot{Components: map[string]Component{"verbs": {State: Unavailable}}}, true},
		{"drift", Snapshot{Policy: PolicyState{Policies: []PolicyStatus{{Targets: []Target{{State: Drifted}}}}}}, false},
		{"unsupported is healthy", Snapshot{Policy: PolicyState{Policies: []PolicyStatus{{Targets: []Target{{State: Unsupported}}}}}}, true},
		{"no device after the inventory was read", Snapshot{Components: map[string]Component{"inventory": {State: Unavailable}}}, false},
		{"no device, empty list", Snapshot{Devices: []Device{}, Components: map[string]Component{"inventory": {State: OK}}}, false},
		{"inventory not read yet", Snapshot{Devices: []Device{}}, true},
		{"one device", Snapshot{Devices: []Device{{Name: "rxe0"}}, Components: map[string]Component{"inventory": {State: OK}}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.s.Healthy(); got != tt.want {
				t.Errorf("Healthy() = %v, want %v", got, tt.want)
			}
		})
	}
}
func TestGroupFaultsNeverNull(t *testing.T) {
	for _, tt := range []struct {
		name string
		p    Peers
		want string
	}{
		{"zero Peers", Peers{}, `"group_faults":[]`},
		{"one fault", Peers{GroupFaults: []GroupFault{{Group: "tor-a", Reason: "all 2 peers are down"}}}, `"group_faults":[{"group":"tor-a","reason":"all 2 peers are down"}]`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(Snapshot{Peers: tt.p})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(b), tt.want) {
				t.Errorf("JSON %s lacks %s", b, tt.want)
			}
			var back Snapshot
			if err := json.Unmarshal(b, &back); err != nil || len(back.Peers.GroupFaults) != len(tt.p.GroupFaults) {
				t.Errorf("round trip: %v, group faults %+v, want %+v", err, back.Peers.GroupFaults, tt.p.GroupFaults)
			}
		})
	}
}
