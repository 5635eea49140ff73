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

// TestListsNeverNull: every list of the status, the reload answer and the
// peer types is [] in JSON when the Go value holds nil, so that clients
// iterate them without a nil check whoever built the value.
func TestListsNeverNull(t *testing.T) {
	for _, tt := range []struct {
		name string
		v    any
		want []string
	}{
		{"zero Snapshot", Snapshot{}, []string{`"ports":[]`, `"peers":[]`, `"group_faults":[]`, `"files":[]`, `"pending_restart":[]`}},
		{"zero Peer", Peer{}, []string{`"paths":[]`, `"mismatches":[]`}},
		{"zero Fingerprint", Fingerprint{}, []string{`"ports":[]`}},
		{"rejected reload", ReloadResult{Error: "x"}, []string{`"restart_needed":[]`}},
		{"reload with a restart needed", ReloadResult{OK: true, RestartNeeded: []string{"daemon.socket"}}, []string{`"restart_needed":["daemon.socket"]`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(tt.v)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.want {
				if !strings.Contains(string(b), w) {
					t.Errorf("JSON %s lacks %s", b, w)
				}
			}
			// fingerprint is null when unknown, by design; no list is.
			if s := strings.ReplaceAll(string(b), `"fingerprint":null`, ""); tt.name != "zero Snapshot" && strings.Contains(s, "null") {
				t.Errorf("JSON %s has a null", b)
			}
		})
	}
	var back Snapshot
	if err := json.Unmarshal([]byte(`{"config":{"files":["a"],"pending_restart":["daemon.socket"]}}`), &back); err != nil ||
		len(back.Config.Files) != 1 || len(back.Config.PendingRestart) != 1 {
		t.Errorf("config does not round-trip: %+v, %v", back.Config, err)
	}
}

// TestComponentReason: a reason is its own field, absent when empty.
func TestComponentReason(t *testing.T) {
	b, _ := json.Marshal(Component{State: Disabled, Reason: "[probe] peers = false"})
	if s := string(b); !strings.Contains(s, `"reason":"[probe] peers = false"`) || strings.Contains(s, `"error"`) {
		t.Errorf("disabled component JSON %s: want reason and no error", s)
	}
	b, _ = json.Marshal(Component{State: Error, Error: "boom"})
	if s := string(b); strings.Contains(s, `"reason"`) {
		t.Errorf("component in error JSON %s: want no reason", s)
	}
}

// TestComponentDetail: the one text of a component that the status table,
// the doctor, the watch stream and D-Bus show: its error or its reason,
// both when both are set.
func TestComponentDetail(t *testing.T) {
	for _, tt := range []struct {
		c    Component
		want string
	}{
		{Component{State: OK}, ""},
		{Component{State: Error, Error: "bind: in use"}, "bind: in use"},
		{Component{State: Disabled, Reason: "[probe] peers = false"}, "[probe] peers = false"},
		{Component{State: OK, Error: "peers_file line 3: bad", Reason: "x"}, "peers_file line 3: bad; x"},
	} {
		if got := tt.c.Detail(); got != tt.want {
			t.Errorf("%+v: Detail() = %q, want %q", tt.c, got, tt.want)
		}
	}
}

// TestFormatPriorities: the one text of a priority set, which nodes compare
// in their fingerprints.
func TestFormatPriorities(t *testing.T) {
	for _, tt := range []struct {
		in   []int
		want string
	}{{nil, "none"}, {[]int{}, "none"}, {[]int{3}, "3"}, {[]int{3, 4}, "3,4"}} {
		if got := FormatPriorities(tt.in); got != tt.want {
			t.Errorf("FormatPriorities(%v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
