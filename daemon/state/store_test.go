package state

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
)

func TestStoreUpdatePublishesCopies(t *testing.T) {
	s := NewStore(apitype.Snapshot{Version: "v", State: apitype.Starting})
	first := s.Load()
	changed := s.Changed()
	second := s.Update(func(n *apitype.Snapshot) {
		n.State = apitype.Running
		SetComponent(n, apitype.ComponentAPI, apitype.OK, nil, time.Unix(1, 0))
	})
	select {
	case <-changed:
	default:
		t.Fatal("Changed was not closed by Update")
	}
	if first.State != apitype.Starting || len(first.Components) != 0 {
		t.Errorf("Update modified the published snapshot: %+v", first)
	}
	if second.Seq != first.Seq+1 || second.State != apitype.Running || s.Load() != second {
		t.Errorf("second = %+v, want seq %d, running, current", second, first.Seq+1)
	}
	third := s.Update(func(n *apitype.Snapshot) { SetComponent(n, apitype.ComponentAPI, apitype.OK, nil, time.Unix(2, 0)) })
	if got := third.Components[apitype.ComponentAPI].Since; !got.Equal(time.Unix(1, 0)) {
		t.Errorf("unchanged component's Since moved to %v", got)
	}
	fourth := s.Update(func(n *apitype.Snapshot) {
		SetComponent(n, apitype.ComponentAPI, apitype.Error, errors.New("boom"), time.Unix(3, 0))
	})
	if c := fourth.Components[apitype.ComponentAPI]; c.State != apitype.Error || c.Error != "boom" || !c.Since.Equal(time.Unix(3, 0)) {
		t.Errorf("api = %+v", c)
	}
	if third.Components[apitype.ComponentAPI].State != apitype.OK {
		t.Error("SetComponent modified an earlier snapshot's map")
	}
}
func TestStoreConcurrentReaders(t *testing.T) {
	s := NewStore(apitype.Snapshot{})
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
		s.Update(func(n *apitype.Snapshot) { n.Summary = "x" })
	}
	wg.Wait()
	if got := s.Load().Seq; got != 1001 {
		t.Errorf("seq = %d after 1000 updates, want 1001", got)
	}
}

// TestGroupFaultsNeverNull: group_faults is [] in JSON however apitype.Peers was
// built, and the faults themselves come through.
