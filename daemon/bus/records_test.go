package bus

import (
	"bytes"
	"encoding/binary"
	"slices"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/google/go-cmp/cmp"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/internal/rusage"
	"github.com/rdmad/rdmad/test/bench/peersnap"
)

// plain turns a records value into maps of plain values, so that tests
// compare what a client decodes and not the Variant wrapping.
func plain(v any) any {
	switch x := v.(type) {
	case dbus.Variant:
		return plain(x.Value())
	case []record:
		out := make([]any, 0, len(x))
		for _, r := range x {
			out = append(out, plain(r))
		}
		return out
	case record:
		out := make(map[string]any, len(x))
		for k, val := range x {
			out[k] = plain(val)
		}
		return out
	}
	return v
}

// TestRecordProperties: each records property has the introspected type
// aa{sv} and the keys docs/DBUS.md lists, with the values of its tuple.
func TestRecordProperties(t *testing.T) {
	since := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	s := snapshot([]apitype.Device{device("rxe0", "eth0", "ACTIVE")},
		apitype.Target{Kind: "mtu", Object: "eth0", Desired: "9000", Actual: "1500", State: apitype.Drifted, Error: "bad \xff"})
	s.QoS = qosFixture()
	s.Peers.Peers = []apitype.Peer{{Name: "node2", Address: "192.0.2.17", Group: "tor1", NodeID: "6b1d", State: apitype.PeerDegraded,
		Reason: "loss 3% over 1%", Since: since, WireVersion: 2, Authenticated: true,
		ClockOffset: -418 * time.Millisecond, ClockOffsetError: 150 * time.Microsecond, ClockSamples: 8,
		Paths: []apitype.PeerPath{
			{Local: "rxe0/1", RemoteGID: "::ffff:192.0.2.17", RemoteQPN: 17, State: apitype.PeerDegraded, Since: since,
				RTTP50: 10 * time.Microsecond, RTTP99: 90 * time.Microsecond, HostDelayP99: time.Microsecond, LastRTT: 12 * time.Microsecond,
				LossPct: 3, Samples: 100, Sent: 500, Lost: 15, Authenticated: true},
			{Local: "rxe0/2", RemoteGID: "::ffff:192.0.2.18", RemoteQPN: 18, State: apitype.PeerUp, Since: since,
				RTTP50: 20 * time.Microsecond, RTTP99: 30 * time.Microsecond, LastRTT: 21 * time.Microsecond, Samples: 100, Sent: 500},
		}}}
	v := newView(s)
	agent, dev := v.objects[Path].props[Interface], v.objects[DevicePath("rxe0")].props[DeviceInterface]
	for _, name := range []string{"PeerRecords", "PeerFigures"} {
		if _, built := agent[name]; built {
			t.Errorf("%s is built with the view; it should be built on its first read", name)
		}
		all, _ := v.objects[Path].all(Interface)
		one, _ := v.objects[Path].prop(Interface, name)
		if diff := cmp.Diff(plain(one), plain(all[name])); diff != "" {
			t.Errorf("%s differs between Get and GetAll: -Get +GetAll\n%s", name, diff)
		}
		agent[name] = one
	}
	for name, val := range map[string]dbus.Variant{"PeerRecords": agent["PeerRecords"], "PeerFigures": agent["PeerFigures"],
		"PolicyTargetRecords": agent["PolicyTargetRecords"], "QoSRecords": agent["QoSRecords"],
		"Device.PolicyTargetRecords": dev["PolicyTargetRecords"]} {
		if sig := val.Signature().String(); sig != "aa{sv}" {
			t.Errorf("%s has D-Bus type %s, want aa{sv} as introspected", name, sig)
		}
	}
	us := since.UnixMicro()
	wantPeers := []any{map[string]any{"name": "node2", "address": "192.0.2.17", "group": "tor1", "node_id": "6b1d",
		"state": apitype.PeerDegraded, "reason": "loss 3% over 1%", "since": us, "wire_version": uint32(2), "authenticated": true,
		"paths": []any{
			map[string]any{"local": "rxe0/1", "remote_gid": "::ffff:192.0.2.17", "remote_qpn": uint32(17), "state": apitype.PeerDegraded,
				"since": us, "authenticated": true},
			map[string]any{"local": "rxe0/2", "remote_gid": "::ffff:192.0.2.18", "remote_qpn": uint32(18), "state": apitype.PeerUp,
				"since": us, "authenticated": false},
		}}}
	if diff := cmp.Diff(wantPeers, plain(agent["PeerRecords"])); diff != "" {
		t.Errorf("PeerRecords: -want +got\n%s", diff)
	}
	wantFigures := []any{map[string]any{"name": "node2", "rtt_p50_ns": uint64(20000), "rtt_p99_ns": uint64(90000),
		"last_rtt_ns": uint64(21000), "loss_percent": 3.0,
		"clock_offset_ns": int64(-418000000), "clock_offset_error_ns": uint64(150000), "clock_samples": uint32(8),
		"paths": []any{
			map[string]any{"local": "rxe0/1", "remote_gid": "::ffff:192.0.2.17", "rtt_p50_ns": uint64(10000), "rtt_p99_ns": uint64(90000),
				"host_delay_p99_ns": uint64(1000), "last_rtt_ns": uint64(12000), "loss_percent": 3.0, "samples": uint32(100),
				"sent": uint64(500), "lost": uint64(15), "lossy_flows": uint32(0)},
			map[string]any{"local": "rxe0/2", "remote_gid": "::ffff:192.0.2.18", "rtt_p50_ns": uint64(20000), "rtt_p99_ns": uint64(30000),
				"host_delay_p99_ns": uint64(0), "last_rtt_ns": uint64(21000), "loss_percent": 0.0, "samples": uint32(100),
				"sent": uint64(500), "lost": uint64(0), "lossy_flows": uint32(0)},
		}}}
	if diff := cmp.Diff(wantFigures, plain(agent["PeerFigures"])); diff != "" {
		t.Errorf("PeerFigures: -want +got\n%s", diff)
	}
	wantTargets := []any{map[string]any{"policy": "roce", "kind": "mtu", "object": "eth0", "desired": "9000", "actual": "1500",
		"state": apitype.Drifted, "error": "bad \uFFFD"}}
	if diff := cmp.Diff(wantTargets, plain(agent["PolicyTargetRecords"])); diff != "" {
		t.Errorf("PolicyTargetRecords: -want +got\n%s", diff)
	}
	if diff := cmp.Diff(wantTargets, plain(dev["PolicyTargetRecords"])); diff != "" {
		t.Errorf("the device's PolicyTargetRecords: -want +got\n%s", diff)
	}
	wantQoS := []any{
		map[string]any{"netdev": "ens1f0np0", "device": "mlx5_0", "supported": true, "error": "", "trust": "dscp",
			"pfc":     []uint32{3},
			"dscp":    []any{map[string]any{"dscp": uint32(26), "priority": uint32(3)}, map[string]any{"dscp": uint32(48), "priority": uint32(6)}},
			"prio_tc": []uint32{0, 0, 0, 1, 0, 0, 0, 0},
			"tcs": []any{map[string]any{"tc": uint32(0), "bandwidth": uint32(60), "tsa": "ets"},
				map[string]any{"tc": uint32(1), "bandwidth": uint32(40), "tsa": "ets"}}},
		map[string]any{"netdev": "eth0", "device": "rxe0", "supported": false, "error": "no DCB: the driver of eth0 has no dcbnl support",
			"trust": "", "pfc": []uint32{}, "dscp": []any{}, "prio_tc": []uint32{}, "tcs": []any{}},
	}
	if diff := cmp.Diff(wantQoS, plain(agent["QoSRecords"])); diff != "" {
		t.Errorf("QoSRecords: -want +got\n%s", diff)
	}
}

// TestPeerRecordsSignalled: PeerRecords is invalidated by PropertiesChanged when a
// path's state changes (the peer's may stay: one of two paths degrades
// while the other was already) and when a peer joins the selection, never
// when only the figures move.
func TestPeerRecordsSignalled(t *testing.T) {
	peer := func(st1, st2 string, rtt time.Duration) apitype.Peer {
		return apitype.Peer{Name: "node2", State: apitype.PeerDegraded, Paths: []apitype.PeerPath{
			{Local: "rxe0/1", State: st1, RTTP50: rtt, LossPct: float64(rtt) / 1e4}, {Local: "rxe0/2", State: st2, RTTP50: rtt}}}
	}
	withPeers := func(ps ...apitype.Peer) *apitype.Snapshot {
		s := snapshot(nil)
		s.Peers.Peers = ps
		return s
	}
	signalled := func(old, cur *apitype.Snapshot) []string {
		var out []string
		for _, sg := range summarise(changes(newView(old), newView(cur))) {
			if sg.Name == PropertiesInterface+".PropertiesChanged" {
				out = append(out, sg.Body[1].([]string)...)
				if len(sg.Body) > 2 {
					for _, name := range sg.Body[2].([]string) {
						out = append(out, "invalidated "+name)
					}
				}
			}
		}
		return out
	}
	base := withPeers(peer(apitype.PeerDegraded, apitype.PeerUp, 10*time.Microsecond))
	if got := signalled(base, withPeers(peer(apitype.PeerDegraded, apitype.PeerUp, 30*time.Microsecond))); len(got) != 0 {
		t.Errorf("figures moved: signalled %v, want nothing (Peers and PeerFigures are quiet)", got)
	}
	if got := signalled(base, withPeers(peer(apitype.PeerDegraded, apitype.PeerDegraded, 10*time.Microsecond))); !slices.Equal(got, []string{"invalidated PeerRecords"}) {
		t.Errorf("a path degraded: signalled %v, want PeerRecords invalidated", got)
	}
	more := withPeers(peer(apitype.PeerDegraded, apitype.PeerUp, 10*time.Microsecond), apitype.Peer{Name: "node3", State: apitype.PeerUnknown})
	if got := signalled(base, more); !slices.Equal(got, []string{"invalidated PeerRecords"}) {
		t.Errorf("a peer joined: signalled %v, want PeerRecords invalidated", got)
	}
}

// TestSamePeerRecords: a change of any field that PeerRecords shows makes
// samePeerRecords false (else the change would not be signalled); the
// figures do not.
func TestSamePeerRecords(t *testing.T) {
	since := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	base := func() *apitype.Snapshot {
		s := snapshot(nil)
		s.Peers.Peers = []apitype.Peer{{Name: "node2", Address: "192.0.2.17", Group: "tor1", NodeID: "6b1d", State: apitype.PeerUp,
			Since: since, WireVersion: 2, Paths: []apitype.PeerPath{{Local: "rxe0/1", RemoteGID: "::1", RemoteQPN: 17,
				State: apitype.PeerUp, Since: since, RTTP50: time.Microsecond}}}}
		return s
	}
	mutations := map[string]func(p *apitype.Peer){
		"name": func(p *apitype.Peer) { p.Name = "node3" }, "address": func(p *apitype.Peer) { p.Address = "" },
		"group": func(p *apitype.Peer) { p.Group = "tor2" }, "node_id": func(p *apitype.Peer) { p.NodeID = "7c" },
		"state": func(p *apitype.Peer) { p.State = apitype.PeerDown }, "reason": func(p *apitype.Peer) { p.Reason = "lost" },
		"since": func(p *apitype.Peer) { p.Since = since.Add(time.Second) }, "wire_version": func(p *apitype.Peer) { p.WireVersion = 1 },
		"authenticated":      func(p *apitype.Peer) { p.Authenticated = true },
		"path added":         func(p *apitype.Peer) { p.Paths = append(p.Paths, apitype.PeerPath{Local: "rxe0/2"}) },
		"path local":         func(p *apitype.Peer) { p.Paths[0].Local = "rxe1/1" },
		"path gid":           func(p *apitype.Peer) { p.Paths[0].RemoteGID = "::2" },
		"path qpn":           func(p *apitype.Peer) { p.Paths[0].RemoteQPN = 18 },
		"path state":         func(p *apitype.Peer) { p.Paths[0].State = apitype.PeerDegraded },
		"path since":         func(p *apitype.Peer) { p.Paths[0].Since = since.Add(time.Second) },
		"path authenticated": func(p *apitype.Peer) { p.Paths[0].Authenticated = true },
	}
	for name, mutate := range mutations {
		cur := base()
		mutate(&cur.Peers.Peers[0])
		if samePeerRecords(base(), cur) {
			t.Errorf("%s changed: samePeerRecords says the records are the same", name)
		}
		if diff := cmp.Diff(plain(peerRecords(base())), plain(peerRecords(cur))); diff == "" {
			t.Errorf("%s changed: PeerRecords does not show it (the mutation tests nothing)", name)
		}
	}
	figures := base()
	figures.Peers.Peers[0].Paths[0].RTTP50, figures.Peers.Peers[0].Paths[0].Sent = 5*time.Microsecond, 9
	if !samePeerRecords(base(), figures) {
		t.Error("only figures changed: samePeerRecords says the records differ")
	}
}

// BenchmarkPeerRecordsSignal measures the PropertiesChanged that announces
// a change of PeerRecords at n peers, the price of signalling it
// (docs/DBUS.md, "Records"): its size on the wire (bytes/signal) and the
// CPU time to build and encode it (cpu-ms/signal). These figures are why
// PeerRecords is only invalidated (its name in PropertiesChanged, a few
// dozen bytes) rather than sent at each change of a peer's state; the
// view's own cost is BenchmarkPeersPublish*.
//
//	go test -run '^$' -bench 'PeerRecordsSignal' ./daemon/bus
func BenchmarkPeerRecordsSignal100(b *testing.B)   { benchRecordsSignal(b, 100) }
func BenchmarkPeerRecordsSignal1000(b *testing.B)  { benchRecordsSignal(b, 1000) }
func BenchmarkPeerRecordsSignal10000(b *testing.B) { benchRecordsSignal(b, 10000) }

func benchRecordsSignal(b *testing.B, n int) {
	s := peersnap.Snapshot(n, 1)
	msg := &dbus.Message{Type: dbus.TypeSignal, Headers: map[dbus.HeaderField]dbus.Variant{
		dbus.FieldPath:      dbus.MakeVariant(Path),
		dbus.FieldInterface: dbus.MakeVariant(PropertiesInterface),
		dbus.FieldMember:    dbus.MakeVariant("PropertiesChanged"),
	}}
	var buf bytes.Buffer
	b.ReportAllocs()
	cpu0 := rusage.CPU()
	for b.Loop() {
		buf.Reset()
		changed := map[string]dbus.Variant{"PeerRecords": dbus.MakeVariant(peerRecords(s))}
		msg.Body = []any{Interface, changed, []string{}}
		msg.Headers[dbus.FieldSignature] = dbus.MakeVariant(dbus.SignatureOf(msg.Body...))
		if err := msg.EncodeTo(&buf, binary.LittleEndian); err != nil {
			b.Fatalf("encode PropertiesChanged of PeerRecords at %d peers: %v", n, err)
		}
	}
	b.ReportMetric(float64(buf.Len()), "bytes/signal")
	b.ReportMetric(1000*(rusage.CPU()-cpu0).Seconds()/float64(b.N), "cpu-ms/signal")
}
