package bus

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/google/go-cmp/cmp"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon/service/servicetest"
	"github.com/rdmad/rdmad/daemon/state"
)

// upPeer is a peer with one path, up; busctl's output of it is in
// docs/DBUS.md.
var upPeer = apitype.Peer{Name: "192.0.2.17", Address: "192.0.2.17", Group: "tor1", State: apitype.PeerUp,
	Paths: []apitype.PeerPath{{Local: "rxe0/1", State: apitype.PeerUp, RTTP50: 41 * time.Microsecond,
		RTTP99: 97 * time.Microsecond, LastRTT: 38 * time.Microsecond, Samples: 100}}}

func peersOf(ps ...apitype.Peer) apitype.Peers {
	return apitype.Peers{Configured: len(ps), Peers: ps}
}

// probeBackend is servicetest.ReloadOnly with the daemon's Probe: it
// answers for the peers it knows and refuses the others with the daemon's
// messages.
type probeBackend struct {
	*servicetest.Backend
	mu sync.Mutex
	// known maps a configured peer to the result of probing it.
	known map[string]apitype.Peer
	// stopped makes Probe answer like a daemon whose peer probes do not
	// run; hang makes it wait for ctx, like a stuck manager.
	stopped, hang bool
	n             int
}

func newProbeBackend(store *state.Store) *probeBackend {
	return &probeBackend{Backend: servicetest.ReloadOnly(store), known: map[string]apitype.Peer{upPeer.Name: upPeer}}
}

func (p *probeBackend) Probe(ctx context.Context, name string) (apitype.Peer, error) {
	p.mu.Lock()
	p.n++
	stopped, hang := p.stopped, p.hang
	res, ok := p.known[name]
	p.mu.Unlock()
	switch {
	case stopped:
		return apitype.Peer{}, fmt.Errorf("peer probes are not running; configure [[peer]] entries with [probe] peers = true and check `rdmactl status` for the peers component")
	case hang:
		<-ctx.Done()
		return apitype.Peer{}, ctx.Err()
	case !ok:
		return apitype.Peer{}, fmt.Errorf("peers: %q is not a configured peer; add it as a [[peer]] or to [probe] peers_file", name)
	}
	return res, nil
}

func (p *probeBackend) probes() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

func (p *probeBackend) set(f func(p *probeBackend)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f(p)
}

func TestIntegrationProbe(t *testing.T) {
	requireRoot(t)
	startBus(t, "")
	store := newStore()
	pb := newProbeBackend(store)
	down := apitype.Peer{Name: "192.0.2.18", State: apitype.PeerDown, Reason: "3 probes in a row unanswered",
		Paths: []apitype.PeerPath{{Local: "rxe0/1", State: apitype.PeerDown, LossPct: 12.5, LastRTT: 50 * time.Microsecond},
			{Local: "rxe0/2", State: apitype.PeerUp, LossPct: 0, LastRTT: 70 * time.Microsecond}}}
	pb.known[down.Name] = down
	const probeTimeout = 300 * time.Millisecond
	startRunOpts(t, Options{Store: store, Backend: pb, ProbeTimeout: probeTimeout}).waitFor(t, 0, apitype.OK, "")
	obj := rootConn(t).Object(Name, Path)

	tests := []struct {
		name    string
		setup   func(p *probeBackend)
		peer    string
		want    []any
		wantErr string
		// wantMsg are parts of the error message: the peer and what to do.
		wantMsg []string
	}{
		{name: "up", peer: upPeer.Name, want: []any{"up", uint64(38000), float64(0), ""}},
		{name: "down is a result, worst path figures", peer: down.Name,
			want: []any{"down", uint64(70000), 12.5, "3 probes in a row unanswered"}},
		{name: "empty name", peer: "", wantErr: ErrInvalidArgs, wantMsg: []string{"say which peer", "Peers property"}},
		{name: "unknown peer", peer: "198.51.100.9", wantErr: ErrFailed,
			wantMsg: []string{`"198.51.100.9"`, "not a configured peer", "add it as a [[peer]]"}},
		{name: "peer probes not running", peer: upPeer.Name, setup: func(p *probeBackend) { p.stopped = true },
			wantErr: ErrFailed, wantMsg: []string{`"192.0.2.17"`, "peer probes are not running", "[probe] peers = true"}},
		{name: "stuck probe is cut off", peer: upPeer.Name, setup: func(p *probeBackend) { p.hang = true },
			wantErr: ErrTimeout, wantMsg: []string{`"192.0.2.17"`, "no result within 300ms", "rdmactl status"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pb.set(func(p *probeBackend) { p.stopped, p.hang = false, false })
			if tt.setup != nil {
				pb.set(tt.setup)
			}
			start := time.Now()
			c := obj.Call(Interface+".Probe", 0, tt.peer)
			if tt.wantErr == "" {
				if c.Err != nil {
					t.Fatalf("Probe %q: %v", tt.peer, c.Err)
				}
				if diff := cmp.Diff(tt.want, c.Body); diff != "" {
					t.Errorf("Probe %q: -want +got\n%s", tt.peer, diff)
				}
				return
			}
			if !isDBusError(c.Err, tt.wantErr) {
				t.Fatalf("Probe %q: err = %v, want %s", tt.peer, c.Err, tt.wantErr)
			}
			for _, m := range tt.wantMsg {
				if !strings.Contains(c.Err.Error(), m) {
					t.Errorf("Probe %q: message %q lacks %q", tt.peer, c.Err.Error(), m)
				}
			}
			if d := time.Since(start); d > probeTimeout+5*time.Second {
				t.Errorf("Probe %q took %s, want about the probe timeout %s at most", tt.peer, d, probeTimeout)
			}
		})
	}

	// The service keeps answering after every error above.
	pb.set(func(p *probeBackend) { p.stopped, p.hang = false, false })
	var st string
	if err := obj.Call(Interface+".Probe", 0, upPeer.Name).Store(&st, new(uint64), new(float64), new(string)); err != nil || st != "up" {
		t.Errorf("Probe after the errors = %q, %v; want up", st, err)
	}
	waitProperty(t, obj, "State", "running")
}

func TestIntegrationProbeNotSupported(t *testing.T) {
	requireRoot(t)
	startBus(t, "")
	store := newStore()
	startRun(t, store, servicetest.ReloadOnly(store)).waitFor(t, 0, apitype.OK, "")
	obj := rootConn(t).Object(Name, Path)
	err := obj.Call(Interface+".Probe", 0, upPeer.Name).Err
	if !isDBusError(err, ErrNotSupported) || !strings.Contains(err.Error(), `"192.0.2.17"`) {
		t.Errorf("Probe on a backend without Probe: err = %v, want %s naming the peer", err, ErrNotSupported)
	}
	if err := obj.Call(Interface+".Probe", 0, uint32(7)).Err; !isDBusError(err, ErrInvalidArgs) {
		t.Errorf("Probe with a number: err = %v, want %s", err, ErrInvalidArgs)
	}
	waitProperty(t, obj, "State", "running")
}

func TestIntegrationPeers(t *testing.T) {
	requireRoot(t)
	startBus(t, "")
	store := newStore()
	fresh := apitype.Peer{Name: "node2.example", Group: "tor2", State: apitype.PeerUnknown}
	store.Update(func(s *apitype.Snapshot) { s.Peers = peersOf(fresh) })
	startRun(t, store, newProbeBackend(store)).waitFor(t, 0, apitype.OK, "")
	conn := rootConn(t)
	obj := conn.Object(Name, Path)
	waitProperty(t, obj, "Peers", [][]any{{"node2.example", "", "tor2", "unknown", "", uint64(0), uint64(0), float64(0)}})
	sigs := subscribe(t, conn)

	// The peer answers and a second one is added already up.
	up := fresh
	up.Address, up.State = "192.0.2.20", apitype.PeerUp
	up.Paths = []apitype.PeerPath{{Local: "rxe0/1", State: apitype.PeerUp, RTTP50: 40 * time.Microsecond, RTTP99: 90 * time.Microsecond, LossPct: 0.5}}
	store.Update(func(s *apitype.Snapshot) { s.Peers = peersOf(up, upPeer) })
	wantPeers := [][]any{
		{"node2.example", "192.0.2.20", "tor2", "up", "", uint64(40000), uint64(90000), 0.5},
		{"192.0.2.17", "192.0.2.17", "tor1", "up", "", uint64(41000), uint64(97000), float64(0)},
	}
	// Peers is read, not signalled: its RTTs move with every probe.
	var got [][]any
	timeout := time.After(5 * time.Second)
	for len(got) < 2 {
		var sig *dbus.Signal
		select {
		case sig = <-sigs:
		case <-timeout:
			t.Fatalf("got PeerStateChanged %v within 5s, want 2", got)
		}
		switch sig.Name {
		case PropertiesInterface + ".PropertiesChanged":
			if v, ok := sig.Body[1].(map[string]dbus.Variant)["Peers"]; ok {
				t.Errorf("PropertiesChanged carries Peers %v; the property is EmitsChangedSignal=false", v)
			}
		case Interface + ".PeerStateChanged":
			got = append(got, sig.Body)
		}
	}
	want := [][]any{{"node2.example", "unknown", "up", ""}, {"192.0.2.17", "unknown", "up", ""}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("PeerStateChanged: -want +got\n%s", diff)
	}
	waitProperty(t, obj, "Peers", wantPeers)

	// It goes down; the other one is rotated out, which is no change.
	down := up
	down.State, down.Reason = apitype.PeerDown, "control endpoint does not answer"
	store.Update(func(s *apitype.Snapshot) { s.Peers = peersOf(down) })
	sig := nextSignal(t, sigs, Interface+".PeerStateChanged")
	if diff := cmp.Diff([]any{"node2.example", "up", "down", "control endpoint does not answer"}, sig.Body); diff != "" {
		t.Errorf("PeerStateChanged: -want +got\n%s", diff)
	}
	// A later change must come next: nothing for the rotated-out peer.
	store.Update(func(s *apitype.Snapshot) { s.State = apitype.Degraded })
	waitProperty(t, obj, "State", apitype.Degraded)
	deadline := time.After(300 * time.Millisecond)
	for {
		select {
		case s := <-sigs:
			if s.Name == Interface+".PeerStateChanged" {
				t.Errorf("PeerStateChanged %v after the only change was signalled", s.Body)
			}
			continue
		case <-deadline:
		}
		break
	}
}

// TestIntegrationProbeCallLimit checks that stuck probes count against
// MaxCalls like the other privileged methods and are cut off by the probe
// timeout, after which calls are served again.
func TestIntegrationProbeCallLimit(t *testing.T) {
	requireRoot(t)
	startBus(t, "")
	store := newStore()
	pb := newProbeBackend(store)
	pb.hang = true
	const probeTimeout = 2 * time.Second
	startRunOpts(t, Options{Store: store, Backend: pb, ProbeTimeout: probeTimeout}).waitFor(t, 0, apitype.OK, "")
	obj := rootConn(t).Object(Name, Path)
	var wg sync.WaitGroup
	errs := make([]error, MaxCalls)
	for i := range MaxCalls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = obj.Call(Interface+".Probe", 0, upPeer.Name).Err
		}()
	}
	deadline := time.Now().Add(probeTimeout / 2)
	for pb.probes() < MaxCalls && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := pb.probes(); n != MaxCalls {
		t.Fatalf("%d probes reached the backend within %s, want %d", n, probeTimeout/2, MaxCalls)
	}
	if err := obj.Call(Interface+".Probe", 0, upPeer.Name).Err; !isDBusError(err, ErrBusy) {
		t.Errorf("Probe number %d while %d hang: err = %v, want %s", MaxCalls+1, MaxCalls, err, ErrBusy)
	}
	wg.Wait()
	for i, err := range errs {
		if !isDBusError(err, ErrTimeout) {
			t.Errorf("hung Probe %d: err = %v, want %s", i, err, ErrTimeout)
		}
	}
	pb.set(func(p *probeBackend) { p.hang = false })
	if err := obj.Call(Interface+".Probe", 0, upPeer.Name).Err; err != nil {
		t.Errorf("Probe after the hung ones timed out: %v", err)
	}
}
