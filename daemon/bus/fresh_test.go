package bus

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon/service/servicetest"
	"github.com/rdmad/rdmad/daemon/state"
	"github.com/rdmad/rdmad/test/bench/peersnap"
)

// TestFigureGettersAskFresh: a Get of a property with peer figures (Peers,
// PeerFigures) and a GetAll of the agent's interface ask for fresh figures
// (Options.Fresh) and serve the snapshot that holds them, though the
// session has not built its view yet; other properties do not ask.
func TestFigureGettersAskFresh(t *testing.T) {
	store := state.NewStore(*peersnap.Snapshot(3, 1))
	h := newHandler(&servicetest.Backend{Store: store}, slog.New(slog.DiscardHandler))
	asked := 0
	h.load = store.Load
	h.freshen = func(context.Context) {
		asked++
		store.Update(func(s *apitype.Snapshot) {
			// A new state, as the manager publishes: the older
			// snapshots (and their views) keep theirs.
			s.Peers.Peers = slices.Clone(s.Peers.Peers)
			p := &s.Peers.Peers[0]
			p.Paths = slices.Clone(p.Paths)
			p.Paths[0].RTTP50 = time.Duration(asked) * time.Millisecond
			p.Paths[0].RTTP99 = time.Duration(asked) * time.Millisecond
		})
	}
	v0 := newView(store.Load())
	h.cur.Store(v0)
	o := serverObject{h: h, v: v0, path: Path}

	out, err := o.get(call{args: []any{Interface, "Peers"}})
	if err != nil {
		t.Fatal(err)
	}
	ps := out[0].(dbus.Variant).Value().([]PeerEntry)
	if asked != 1 || ps[0].RTTP50 != uint64(time.Millisecond) {
		t.Errorf("Get Peers: asked %d times, first peer's p50 %d ns; want 1 ask and the figure it made (1 ms)", asked, ps[0].RTTP50)
	}
	if _, err := o.get(call{args: []any{Interface, "PeerFigures"}}); err != nil || asked != 2 {
		t.Errorf("Get PeerFigures: %v, asked %d times; want 2", err, asked)
	}
	if _, err := o.get(call{args: []any{Interface, "State"}}); err != nil || asked != 2 {
		t.Errorf("Get State: %v, asked %d times; want no ask (no figures)", err, asked)
	}
	out, err = o.getAll(call{args: []any{Interface}})
	if err != nil {
		t.Fatal(err)
	}
	ps = out[0].(map[string]dbus.Variant)["Peers"].Value().([]PeerEntry)
	if asked != 3 || ps[0].RTTP50 != uint64(3*time.Millisecond) {
		t.Errorf("GetAll: asked %d times, first peer's p50 %d ns; want 3 asks and the figure of the last (3 ms)", asked, ps[0].RTTP50)
	}
	// Without Options.Fresh the view is served as it is.
	h.freshen = nil
	if out, err = o.get(call{args: []any{Interface, "Peers"}}); err != nil || out[0].(dbus.Variant).Value().([]PeerEntry)[0].RTTP50 != peerEntries(v0.snap)[0].RTTP50 {
		t.Errorf("Get Peers without Fresh: %v, %v; want the view's own figures", out, err)
	}
}
