package bus

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/google/go-cmp/cmp"

	"github.com/rdmad/rdmad/client/apitype"
)

// fleetSnap is a snapshot with two peers, node2 with two mismatches and
// node3 with none, and a group fault.
func fleetSnap() *apitype.Snapshot {
	s := snapshot(nil)
	s.Peers = apitype.Peers{
		Peers: []apitype.Peer{
			{Name: "node2", State: apitype.PeerUp, Mismatches: []apitype.Mismatch{
				{Field: "mtu", Local: "1500", Peer: "4200", Severity: "must", LocalPort: "rxe0/1", PeerPort: "rxe0/2"},
				{Field: "firmware", Local: "1.0", Peer: "1.1 \xff", Severity: "info", LocalPort: "node", PeerPort: "node"},
			}},
			{Name: "node3", State: apitype.PeerUp},
		},
		GroupFaults: []apitype.GroupFault{{Group: "tor-a", Reason: "all 2 peers of tor-a are down"}},
	}
	return s
}

// TestFleetRecordProperties: FleetMismatchRecords and
// PeerGroupFaultRecords are aa{sv} with the keys docs/DBUS.md lists and
// the values of their tuples (text a peer sent made valid UTF-8), built
// on first read, the same from Get and GetAll.
func TestFleetRecordProperties(t *testing.T) {
	v := newView(fleetSnap())
	all, _ := v.objects[Path].all(Interface)
	for _, name := range []string{"FleetMismatchRecords", "PeerGroupFaultRecords"} {
		if _, built := v.objects[Path].props[Interface][name]; built {
			t.Errorf("%s is built with the view; it should be built on its first read", name)
		}
		one, _ := v.objects[Path].prop(Interface, name)
		if sig := one.Signature().String(); sig != "aa{sv}" {
			t.Errorf("%s has D-Bus type %s, want aa{sv} as introspected", name, sig)
		}
		if diff := cmp.Diff(plain(one), plain(all[name])); diff != "" {
			t.Errorf("%s differs between Get and GetAll: -Get +GetAll\n%s", name, diff)
		}
	}
	wantFM := []any{
		map[string]any{"peer": "node2", "field": "mtu", "local": "1500", "peer_value": "4200", "severity": "must",
			"local_port": "rxe0/1", "peer_port": "rxe0/2"},
		map[string]any{"peer": "node2", "field": "firmware", "local": "1.0", "peer_value": "1.1 \uFFFD", "severity": "info",
			"local_port": "node", "peer_port": "node"},
	}
	if diff := cmp.Diff(wantFM, plain(all["FleetMismatchRecords"])); diff != "" {
		t.Errorf("FleetMismatchRecords: -want +got\n%s", diff)
	}
	wantGF := []any{map[string]any{"group": "tor-a", "reason": "all 2 peers of tor-a are down"}}
	if diff := cmp.Diff(wantGF, plain(all["PeerGroupFaultRecords"])); diff != "" {
		t.Errorf("PeerGroupFaultRecords: -want +got\n%s", diff)
	}
	// Empty, not absent, when nothing differs: clients iterate it.
	empty := newView(snapshot(nil))
	for _, name := range []string{"FleetMismatchRecords", "PeerGroupFaultRecords"} {
		val, _ := empty.objects[Path].prop(Interface, name)
		if sig, n := val.Signature().String(), len(val.Value().([]record)); sig != "aa{sv}" || n != 0 {
			t.Errorf("%s without peers: type %s, %d records; want aa{sv}, none", name, sig, n)
		}
	}
}

// changedProps returns the names in the agent's PropertiesChanged from old
// to cur, with the values sent.
func changedProps(old, cur *apitype.Snapshot) map[string]dbus.Variant {
	for _, sg := range changes(newView(old), newView(cur)) {
		if sg.path == Path && sg.name == PropertiesInterface+".PropertiesChanged" && sg.body[0] == Interface {
			return sg.body[1].(map[string]dbus.Variant)
		}
	}
	return nil
}

// TestFleetRecordsSignalled: a mismatch or group fault that appears,
// changes or goes is in PropertiesChanged with the new records, next to
// its tuple; figures moving, a peer's state, or a peer without mismatches
// joining is not a change of them.
func TestFleetRecordsSignalled(t *testing.T) {
	base := fleetSnap()
	for name, mutate := range map[string]func(s *apitype.Snapshot){
		"mismatch value": func(s *apitype.Snapshot) { s.Peers.Peers[0].Mismatches[0].Peer = "9000" },
		"mismatch gone":  func(s *apitype.Snapshot) { s.Peers.Peers[0].Mismatches = s.Peers.Peers[0].Mismatches[:1] },
		"group fault":    func(s *apitype.Snapshot) { s.Peers.GroupFaults[0].Reason = "all 3 peers of tor-a are down" },
	} {
		cur := fleetSnap()
		mutate(cur)
		changed := changedProps(base, cur)
		tuple, rec := "FleetMismatches", "FleetMismatchRecords"
		if name == "group fault" {
			tuple, rec = "PeerGroupFaults", "PeerGroupFaultRecords"
		}
		if _, ok := changed[tuple]; !ok {
			t.Errorf("%s: %s not signalled (the fixture tests nothing)", name, tuple)
		}
		got, ok := changed[rec]
		if !ok {
			t.Errorf("%s: PropertiesChanged has %v; want %s too, with its value", name, slices.Sorted(maps.Keys(changed)), rec)
			continue
		}
		want, _ := newView(cur).objects[Path].prop(Interface, rec)
		if diff := cmp.Diff(plain(want), plain(got)); diff != "" {
			t.Errorf("%s: the signalled %s is not the new one: -want +got\n%s", name, rec, diff)
		}
	}
	quiet := fleetSnap()
	quiet.Peers.Peers[1].State = apitype.PeerDown
	quiet.Peers.Peers[0].Paths = []apitype.PeerPath{{Local: "rxe0/1", RTTP50: time.Millisecond}}
	quiet.Peers.Peers = append(quiet.Peers.Peers, apitype.Peer{Name: "node4", State: apitype.PeerUnknown})
	for _, rec := range []string{"FleetMismatches", "FleetMismatchRecords", "PeerGroupFaults", "PeerGroupFaultRecords"} {
		if _, ok := changedProps(base, quiet)[rec]; ok {
			t.Errorf("a peer's state and figures changed and a peer without mismatches joined: %s signalled", rec)
		}
	}
}

// TestSameFleetRecords: a change of anything FleetMismatchRecords or
// PeerGroupFaultRecords shows makes their same function false (else it
// would not be signalled), and sameFleetMismatches agrees with comparing
// the records themselves; only peers without mismatches differing does
// not count.
func TestSameFleetRecords(t *testing.T) {
	mutations := map[string]func(s *apitype.Snapshot){
		"peer":            func(s *apitype.Snapshot) { s.Peers.Peers[0].Name = "node9" },
		"field":           func(s *apitype.Snapshot) { s.Peers.Peers[0].Mismatches[1].Field = "driver" },
		"local":           func(s *apitype.Snapshot) { s.Peers.Peers[0].Mismatches[0].Local = "9000" },
		"peer_value":      func(s *apitype.Snapshot) { s.Peers.Peers[0].Mismatches[0].Peer = "1500" },
		"severity":        func(s *apitype.Snapshot) { s.Peers.Peers[0].Mismatches[0].Severity = "warn" },
		"local_port":      func(s *apitype.Snapshot) { s.Peers.Peers[0].Mismatches[0].LocalPort = "rxe1/1" },
		"peer_port":       func(s *apitype.Snapshot) { s.Peers.Peers[0].Mismatches[0].PeerPort = "rxe1/1" },
		"order":           func(s *apitype.Snapshot) { slices.Reverse(s.Peers.Peers[0].Mismatches) },
		"mismatch added":  func(s *apitype.Snapshot) { s.Peers.Peers[1].Mismatches = []apitype.Mismatch{{Field: "rate"}} },
		"mismatch gone":   func(s *apitype.Snapshot) { s.Peers.Peers[0].Mismatches = nil },
		"moved to a peer": func(s *apitype.Snapshot) { p := s.Peers.Peers; p[1].Mismatches, p[0].Mismatches = p[0].Mismatches, nil },
		"peers reordered": func(s *apitype.Snapshot) {
			p := s.Peers.Peers
			p[1].Mismatches = []apitype.Mismatch{{Field: "rate"}}
			p[0], p[1] = p[1], p[0]
		},
	}
	for name, mutate := range mutations {
		cur := fleetSnap()
		mutate(cur)
		if sameFleetMismatches(fleetSnap(), cur) {
			t.Errorf("%s changed: sameFleetMismatches says the records are the same", name)
		}
		if diff := cmp.Diff(plain(fleetMismatchRecords(fleetSnap())), plain(fleetMismatchRecords(cur))); diff == "" {
			t.Errorf("%s changed: FleetMismatchRecords does not show it (the mutation tests nothing)", name)
		}
	}
	for name, mutate := range map[string]func(s *apitype.Snapshot){
		"peer without mismatches joined": func(s *apitype.Snapshot) {
			s.Peers.Peers = slices.Insert(s.Peers.Peers, 0, apitype.Peer{Name: "node0"})
		},
		"peer without mismatches left": func(s *apitype.Snapshot) { s.Peers.Peers = s.Peers.Peers[:1] },
		"empty, not nil":               func(s *apitype.Snapshot) { s.Peers.Peers[1].Mismatches = []apitype.Mismatch{} },
		"state and figures": func(s *apitype.Snapshot) {
			s.Peers.Peers[0].State, s.Peers.Peers[0].ClockSamples = apitype.PeerDown, 3
		},
	} {
		cur := fleetSnap()
		mutate(cur)
		if !sameFleetMismatches(fleetSnap(), cur) {
			t.Errorf("%s: sameFleetMismatches says the records differ", name)
		}
	}
	for name, mutate := range map[string]func(s *apitype.Snapshot){
		"group":  func(s *apitype.Snapshot) { s.Peers.GroupFaults[0].Group = "tor-b" },
		"reason": func(s *apitype.Snapshot) { s.Peers.GroupFaults[0].Reason = "x" },
		"added": func(s *apitype.Snapshot) {
			s.Peers.GroupFaults = append(s.Peers.GroupFaults, apitype.GroupFault{Group: "tor-c"})
		},
		"gone": func(s *apitype.Snapshot) { s.Peers.GroupFaults = nil },
	} {
		cur := fleetSnap()
		mutate(cur)
		if sameGroupFaults(fleetSnap(), cur) {
			t.Errorf("group fault %s changed: sameGroupFaults says the records are the same", name)
		}
	}
	if !sameFleetMismatches(fleetSnap(), fleetSnap()) || !sameGroupFaults(fleetSnap(), fleetSnap()) {
		t.Error("equal snapshots: a same function says the records differ")
	}
}

// TestIntegrationPeerChangeSignals: on the private bus, a peer going from
// up to down is announced by PeerStateChanged and by a PropertiesChanged
// that invalidates PeerRecords and carries neither Peers nor PeerFigures
// (quiet: their figures move with every probe); a fingerprint mismatch
// that appears is a PropertiesChanged carrying FleetMismatchRecords with
// its value. This is what docs/DBUS.md tells a client to follow instead of
// Peers.
func TestIntegrationPeerChangeSignals(t *testing.T) {
	requireRoot(t)
	startBus(t, "")
	store := newStore()
	up := apitype.Peer{Name: "192.0.2.30", Address: "192.0.2.30", Group: "tor1", State: apitype.PeerUp,
		Paths: []apitype.PeerPath{{Local: "rxe0/1", State: apitype.PeerUp, RTTP50: 40 * time.Microsecond}}}
	store.Update(func(s *apitype.Snapshot) { s.Peers = peersOf(up) })
	startRun(t, store, newProbeBackend(store)).waitFor(t, 0, apitype.OK, "")
	conn := rootConn(t)
	obj := conn.Object(Name, Path)
	waitProperty(t, obj, "Peers", [][]any{{"192.0.2.30", "192.0.2.30", "tor1", "up", "", uint64(40000), uint64(0), float64(0)}})
	sigs := subscribe(t, conn)

	down := up
	down.State, down.Reason = apitype.PeerDown, "control endpoint does not answer"
	down.Paths = []apitype.PeerPath{{Local: "rxe0/1", State: apitype.PeerDown, RTTP50: 90 * time.Microsecond, LossPct: 100}}
	store.Update(func(s *apitype.Snapshot) { s.Peers = peersOf(down) })
	var invalidated, stateChanged bool
	timeout := time.After(5 * time.Second)
	for !invalidated || !stateChanged {
		var sig *dbus.Signal
		select {
		case sig = <-sigs:
		case <-timeout:
			t.Fatalf("within 5s of the peer going down: PeerRecords invalidated %v, PeerStateChanged %v; want both", invalidated, stateChanged)
		}
		switch sig.Name {
		case PropertiesInterface + ".PropertiesChanged":
			if sig.Path != Path || sig.Body[0] != Interface {
				continue
			}
			for _, quiet := range []string{"Peers", "PeerFigures"} {
				if _, ok := sig.Body[1].(map[string]dbus.Variant)[quiet]; ok {
					t.Errorf("PropertiesChanged carries %s; it is EmitsChangedSignal=false", quiet)
				}
			}
			if _, ok := sig.Body[1].(map[string]dbus.Variant)["PeerRecords"]; ok {
				t.Error("PropertiesChanged carries PeerRecords' value; it is only invalidated")
			}
			invalidated = invalidated || slices.Contains(sig.Body[2].([]string), "PeerRecords")
		case Interface + ".PeerStateChanged":
			if diff := cmp.Diff([]any{"192.0.2.30", "up", "down", "control endpoint does not answer"}, sig.Body); diff != "" {
				t.Errorf("PeerStateChanged: -want +got\n%s", diff)
			}
			stateChanged = true
		}
	}
	// What the invalidation tells a client to Get.
	v, err := obj.GetProperty(Interface + ".PeerRecords")
	if err != nil {
		t.Fatal(err)
	}
	if recs := v.Value().([]map[string]dbus.Variant); len(recs) != 1 || recs[0]["state"].Value() != "down" {
		t.Errorf("PeerRecords after the invalidation: %v; want the peer down", v.Value())
	}

	mismatched := down
	mismatched.Mismatches = []apitype.Mismatch{{Field: "mtu", Local: "1500", Peer: "4200", Severity: "must", LocalPort: "rxe0/1", PeerPort: "rxe0/1"}}
	store.Update(func(s *apitype.Snapshot) { s.Peers = peersOf(mismatched) })
	timeout = time.After(5 * time.Second)
	for {
		var sig *dbus.Signal
		select {
		case sig = <-sigs:
		case <-timeout:
			t.Fatal("no PropertiesChanged with FleetMismatchRecords within 5s of a mismatch appearing")
		}
		if sig.Name != PropertiesInterface+".PropertiesChanged" || sig.Path != Path {
			continue
		}
		val, ok := sig.Body[1].(map[string]dbus.Variant)["FleetMismatchRecords"]
		if !ok {
			continue
		}
		want := []map[string]dbus.Variant{{"peer": dbus.MakeVariant("192.0.2.30"), "field": dbus.MakeVariant("mtu"),
			"local": dbus.MakeVariant("1500"), "peer_value": dbus.MakeVariant("4200"), "severity": dbus.MakeVariant("must"),
			"local_port": dbus.MakeVariant("rxe0/1"), "peer_port": dbus.MakeVariant("rxe0/1")}}
		if diff := cmp.Diff(plainWire(want), plainWire(val.Value())); diff != "" {
			t.Errorf("signalled FleetMismatchRecords: -want +got\n%s", diff)
		}
		break
	}
}

// plainWire turns records as a client decodes them into plain maps.
func plainWire(v any) any {
	recs, ok := v.([]map[string]dbus.Variant)
	if !ok {
		return v
	}
	out := make([]map[string]any, 0, len(recs))
	for _, r := range recs {
		m := map[string]any{}
		for k, val := range r {
			m[k] = val.Value()
		}
		out = append(out, m)
	}
	return out
}
