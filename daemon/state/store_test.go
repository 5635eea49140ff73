package state

import (
	"encoding/json"
	"errors"
	"strings"
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

// TestSetComponentReason: the text of a disabled or unavailable component
// is its reason, not an error; a changed reason is a change (new Since, a
// component event whose message is the reason).
func TestSetComponentReason(t *testing.T) {
	s := NewStore(apitype.Snapshot{})
	a := s.Update(func(n *apitype.Snapshot) {
		SetComponent(n, apitype.ComponentPeers, apitype.Disabled, errors.New("[probe] peers = false"), time.Unix(1, 0))
		SetComponent(n, apitype.ComponentVerbs, apitype.Unavailable, errors.New("libibverbs not found"), time.Unix(1, 0))
		SetComponent(n, apitype.ComponentAPI, apitype.Error, errors.New("boom"), time.Unix(1, 0))
	})
	for name, want := range map[string]apitype.Component{
		apitype.ComponentPeers: {State: apitype.Disabled, Reason: "[probe] peers = false", Since: time.Unix(1, 0)},
		apitype.ComponentVerbs: {State: apitype.Unavailable, Reason: "libibverbs not found", Since: time.Unix(1, 0)},
		apitype.ComponentAPI:   {State: apitype.Error, Error: "boom", Since: time.Unix(1, 0)},
	} {
		if got := a.Components[name]; got != want {
			t.Errorf("%s = %+v, want %+v", name, got, want)
		}
	}
	b := s.Update(func(n *apitype.Snapshot) {
		SetComponent(n, apitype.ComponentPeers, apitype.Disabled, errors.New("no [[peer]] configured"), time.Unix(2, 0))
	})
	if c := b.Components[apitype.ComponentPeers]; c.Reason != "no [[peer]] configured" || !c.Since.Equal(time.Unix(2, 0)) {
		t.Errorf("peers after a new reason = %+v, want the new reason since 2", c)
	}
	d := Compare(a, b)
	if len(d.Components) != 1 || d.Components[0].Name != apitype.ComponentPeers || d.Components[0].Error != "no [[peer]] configured" {
		t.Errorf("diff of a changed reason: %+v, want one peers change carrying the reason", d.Components)
	}
	if evs := d.Events(""); len(evs) != 1 || evs[0].Message != "no [[peer]] configured" {
		t.Errorf("events of a changed reason: %+v", evs)
	}
}

// TestStorePublishesNoNullLists: whatever an update leaves nil, the
// snapshot the store publishes has [] and {} in its JSON (Snapshot fills
// them once per publish, not at every marshal).
func TestStorePublishesNoNullLists(t *testing.T) {
	s := NewStore(apitype.Snapshot{})
	snap := s.Update(func(n *apitype.Snapshot) { n.Devices, n.Components, n.QoS = nil, nil, nil })
	b, err := json.Marshal(snap)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{`"devices":[]`, `"components":{}`, `"qos":[]`, `"loopback":[]`} {
		if !strings.Contains(string(b), f) {
			t.Errorf("published snapshot lacks %s: %s", f, b)
		}
	}
}
