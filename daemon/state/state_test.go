package state

import (
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/inventory"
)

func TestStoreUpdatePublishesCopies(t *testing.T) {
	s := NewStore(Snapshot{Version: "v", State: Starting})
	first := s.Load()
	changed := s.Changed()
	second := s.Update(func(n *Snapshot) {
		n.State = Running
		SetComponent(n, "api", OK, nil, time.Unix(1, 0))
	})
	select {
	case <-changed:
	default:
		t.Fatal("Changed was not closed by Update")
	}
	if first.State != Starting || len(first.Components) != 0 {
		t.Errorf("Update modified the published snapshot: %+v", first)
	}
	if second.Seq != first.Seq+1 || second.State != Running || s.Load() != second {
		t.Errorf("second = %+v, want seq %d, running, current", second, first.Seq+1)
	}
	third := s.Update(func(n *Snapshot) { SetComponent(n, "api", OK, nil, time.Unix(2, 0)) })
	if got := third.Components["api"].Since; !got.Equal(time.Unix(1, 0)) {
		t.Errorf("unchanged component's Since moved to %v", got)
	}
	fourth := s.Update(func(n *Snapshot) { SetComponent(n, "api", Error, errors.New("boom"), time.Unix(3, 0)) })
	if c := fourth.Components["api"]; c.State != Error || c.Error != "boom" || !c.Since.Equal(time.Unix(3, 0)) {
		t.Errorf("api = %+v", c)
	}
	if third.Components["api"].State != OK {
		t.Error("SetComponent modified an earlier snapshot's map")
	}
}

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
		{"drift", Snapshot{Policy: Policy{Policies: []PolicyStatus{{Targets: []Target{{State: Drifted}}}}}}, false},
		{"unsupported is healthy", Snapshot{Policy: Policy{Policies: []PolicyStatus{{Targets: []Target{{State: Unsupported}}}}}}, true},
		{"no device after the inventory was read", Snapshot{Components: map[string]Component{"inventory": {State: Unavailable}}}, false},
		{"no device, empty list", Snapshot{Devices: []inventory.Device{}, Components: map[string]Component{"inventory": {State: OK}}}, false},
		{"inventory not read yet", Snapshot{Devices: []inventory.Device{}}, true},
		{"one device", Snapshot{Devices: []inventory.Device{{Name: "rxe0"}}, Components: map[string]Component{"inventory": {State: OK}}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.s.Healthy(); got != tt.want {
				t.Errorf("Healthy() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestStoreConcurrentReaders(t *testing.T) {
	s := NewStore(Snapshot{})
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := uint64(0)
			for j := 0; j < 1000; j++ {
				seq := s.Load().Seq
				if seq < last {
					t.Errorf("seq went back from %d to %d", last, seq)
					return
				}
				last = seq
			}
		}()
	}
	for i := 0; i < 1000; i++ {
		s.Update(func(n *Snapshot) { n.Summary = "x" })
	}
	wg.Wait()
	if got := s.Load().Seq; got != 1001 {
		t.Errorf("seq = %d after 1000 updates, want 1001", got)
	}
}

// TestGroupFaultsNeverNull: group_faults is [] in JSON however Peers was
// built, and the faults themselves come through.
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
