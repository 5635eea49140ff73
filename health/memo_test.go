package health

import (
	"reflect"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
)

// TestMemo: along a run of publishes, each changing one thing a condition
// reads (or nothing of it: the peers' figures), the memo's verdict is
// Evaluate's, and a publish that changed nothing it reads reuses the last
// verdict rather than deciding it again (#29 item 2).
func TestMemo(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	flaps := NewFlaps(FlapConfig{Downs: 2, Window: time.Minute, Quiet: time.Minute})
	var m Memo
	prev := apitype.Health{}
	snap := node()
	snap.Peers = apitype.Peers{Ports: []apitype.PeerPort{{Key: "rxe0/1"}}, Peers: []apitype.Peer{{Name: "10.0.0.2", State: "up"}}}
	var expect Expect
	steps := []struct {
		name   string
		change func(s *apitype.Snapshot)
		reuse  bool
	}{
		{"first", func(*apitype.Snapshot) {}, false},
		{"peers' figures", func(s *apitype.Snapshot) {
			s.Peers.Peers = []apitype.Peer{{Name: "10.0.0.2", State: "up", Paths: []apitype.PeerPath{{Sent: 9}}}}
			s.Peers.Ports = []apitype.PeerPort{{Key: "rxe0/1", QPN: 7}}
		}, true},
		{"a local fault", func(s *apitype.Snapshot) {
			s.Peers.Ports = []apitype.PeerPort{{Key: "rxe0/1", LocalFault: "all 2 peers are down"}}
		}, false},
		{"the fault again", func(s *apitype.Snapshot) {
			s.Peers.Ports = []apitype.PeerPort{{Key: "rxe0/1", LocalFault: "all 2 peers are down"}}
		}, true},
		{"a port down", func(s *apitype.Snapshot) {
			s.Devices = []apitype.Device{{Name: "rxe0", Uverbs: "/dev/infiniband/uverbs0", Ports: []apitype.Port{{Port: 1, State: "DOWN", PhysState: "Disabled", Netdev: "eth0"}}}}
		}, false},
		{"a component in error", func(s *apitype.Snapshot) {
			s.Components = map[string]apitype.Component{apitype.ComponentInventory: {State: apitype.OK}, apitype.ComponentAPI: {State: apitype.Error, Error: "x"}}
		}, false},
		{"a config error", func(s *apitype.Snapshot) { s.Config.Error = "bad" }, false},
		{"a kernel fault", func(s *apitype.Snapshot) {
			s.KernelFaults = []apitype.KernelFault{{Device: "rxe0", Pattern: "p", Count: 1}}
		}, false},
		{"the loopback failing", func(s *apitype.Snapshot) {
			s.Loopback = []apitype.LoopbackPort{{Device: "rxe0", Port: 1, State: "failed"}}
		}, false},
		{"no peers", func(s *apitype.Snapshot) { s.Peers.Peers = nil }, false},
		{"nothing", func(*apitype.Snapshot) {}, true},
		// The loopback bandwidth condition reads the threshold and the
		// snapshot's bandwidth results.
		{"a loopback threshold", func(*apitype.Snapshot) { expect.MinLoopbackGbps = 100 }, false},
		{"a loopback bandwidth result", func(s *apitype.Snapshot) {
			s.Bandwidth = &apitype.BandwidthStatus{Loopback: []apitype.BandwidthResult{{Loopback: true, Local: "rxe0/1", Gbps: 10, Op: "write", QPs: 1}}}
		}, false},
		{"the same results", func(*apitype.Snapshot) {}, true},
		// InputRefused reads the refused input files.
		{"a refused peers file", func(s *apitype.Snapshot) {
			s.RefusedFiles = []apitype.RefusedFile{{Key: "probe.peers_file", Path: "/etc/rdmad/peers", Why: "writable by group or others (mode 0666)"}}
		}, false},
		{"the refusal taken back", func(s *apitype.Snapshot) { s.RefusedFiles = []apitype.RefusedFile{} }, false},
		{"a lower threshold", func(*apitype.Snapshot) { expect.MinLoopbackShare = 0.5 }, false},
		// DeviceMissing reads [health.expect] and the functions without
		// a device.
		{"an expected count", func(*apitype.Snapshot) { expect.Count = 2 }, false},
		{"expected ports", func(*apitype.Snapshot) { expect.Ports = 2 }, false},
		{"expected devices", func(*apitype.Snapshot) { expect.Devices = []ExpectedDevice{{Name: "rxe1"}} }, false},
		{"a function without a device", func(s *apitype.Snapshot) {
			s.FunctionsWithoutDevice = []apitype.PCIFunction{{Address: "0000:13:00.0", Class: "0x020700"}}
		}, false},
		{"the same expectation", func(*apitype.Snapshot) {}, true},
		{"flapping", func(*apitype.Snapshot) {
			for i := range 4 {
				flaps.Observe("rxe0/1", i%2 == 1, now)
			}
		}, false},
	}
	for _, st := range steps {
		next := *snap
		st.change(&next)
		snap = &next
		now = now.Add(time.Second)
		in := Input{Snap: snap, Prev: prev, Now: now, Expect: expect}
		want := in
		want.Flaps = flaps.State(now)
		wantH := Evaluate(want)
		got := m.Evaluate(in, flaps)
		if !reflect.DeepEqual(got, wantH) {
			t.Errorf("%s: memo %+v, want %+v", st.name, got, wantH)
		}
		if reused := len(prev.Conditions) > 0 && &got.Conditions[0] == &prev.Conditions[0]; reused != st.reuse {
			t.Errorf("%s: verdict reused %v, want %v", st.name, reused, st.reuse)
		}
		prev = got
	}
}

// The verdict's share of a publish of the peers' figures (the most
// frequent publish): deciding it (Evaluate) and the memo's check that
// nothing it reads changed.
//
//	go test -run '^$' -bench 'Verdict' ./health

func BenchmarkVerdictEvaluate(b *testing.B) { benchVerdict(b, false) }
func BenchmarkVerdictMemo(b *testing.B)     { benchVerdict(b, true) }

func benchVerdict(b *testing.B, memo bool) {
	snap := node()
	flaps := NewFlaps(FlapConfig{})
	flaps.Observe("rxe0/1", true, time.Now())
	snaps := [2]apitype.Snapshot{*snap, *snap}
	for i := range snaps {
		snaps[i].Peers.Ports = []apitype.PeerPort{{Key: "rxe0/1", QPN: uint32(i)}}
	}
	var m Memo
	prev := m.Evaluate(Input{Snap: &snaps[1], Now: time.Now()}, flaps)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		in := Input{Snap: &snaps[i%2], Prev: prev, Now: time.Now()}
		if memo {
			prev = m.Evaluate(in, flaps)
		} else {
			in.Flaps = flaps.State(in.Now)
			prev = Evaluate(in)
		}
		i++
	}
}
