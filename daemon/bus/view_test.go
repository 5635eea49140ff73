package bus

import (
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/google/go-cmp/cmp"
	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon/state"
)

func TestEscapePathElement(t *testing.T) {
	tests := []struct{ in, want string }{
		{"rxe0", "rxe0"},
		{"mlx5_0", "mlx5_5f0"},
		{"", "_"},
		{"0dev", "_30dev"},
		{"ibp0s1.8001", "ibp0s1_2e8001"},
		{"siw-eth0", "siw_2deth0"},
		{"a/b", "a_2fb"},
		{"é", "_c3_a9"},
	}
	valid := regexp.MustCompile(`^[A-Za-z0-9_]+$`)
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got := EscapePathElement(tt.in)
			if got != tt.want {
				t.Errorf("EscapePathElement(%q) = %q, want %q", tt.in, got, tt.want)
			}
			if !valid.MatchString(got) {
				t.Errorf("EscapePathElement(%q) = %q is not a valid path element", tt.in, got)
			}
			if !DevicePath(tt.in).IsValid() {
				t.Errorf("DevicePath(%q) = %q is not a valid object path", tt.in, DevicePath(tt.in))
			}
			back, err := UnescapePathElement(got)
			if err != nil || back != tt.in {
				t.Errorf("UnescapePathElement(%q) = %q, %v; want %q", got, back, err, tt.in)
			}
		})
	}
}

func TestUnescapePathElementErrors(t *testing.T) {
	for _, in := range []string{"a_2", "a_zz", "a-b", "x_"} {
		t.Run(in, func(t *testing.T) {
			if got, err := UnescapePathElement(in); err == nil {
				t.Errorf("UnescapePathElement(%q) = %q, want an error", in, got)
			}
		})
	}
}

// snapshot returns a snapshot with the given devices and policy targets.
func snapshot(devs []apitype.Device, targets ...apitype.Target) *apitype.Snapshot {
	return &apitype.Snapshot{
		Version: "1.0", State: apitype.Running, Summary: "running",
		Config:  apitype.Config{Generation: 3, Path: "/etc/rdmad/rdmad.toml"},
		Devices: devs,
		Policy:  apitype.PolicyState{Policies: []apitype.PolicyStatus{{Name: "roce", Mode: "enforce", Targets: targets}}},
		Components: map[string]apitype.Component{
			"config": {State: apitype.OK},
		},
	}
}

func device(name, netdev string, portStates ...string) apitype.Device {
	d := apitype.Device{Name: name, NodeType: "CA", NodeGUID: "0000:0000:0000:0001"}
	for i, st := range portStates {
		d.Ports = append(d.Ports, apitype.Port{Port: i + 1, State: st, PhysState: "LinkUp", LinkLayer: "Ethernet", Netdev: netdev})
	}
	return d
}

func TestNewViewProperties(t *testing.T) {
	s := snapshot([]apitype.Device{device("mlx5_0", "ens1f0", "ACTIVE", "DOWN"), device("rxe0", "eth0", "ACTIVE")},
		apitype.Target{Kind: "mtu", Object: "ens1f0", Desired: "9000", Actual: "1500", State: apitype.Drifted},
		apitype.Target{Kind: "roce", Object: "mlx5_0/1", Desired: "106", Actual: "106", State: apitype.InSync},
		apitype.Target{Kind: "memlock", Object: "rdmad", Desired: "unlimited", Actual: "unlimited", State: apitype.InSync},
	)
	v := newView(s)

	root := v.objects[Path].props[Interface]
	if got, want := root["Devices"].Value(), []dbus.ObjectPath{"/org/rdmad/Agent1/device/mlx5_5f0", "/org/rdmad/Agent1/device/rxe0"}; !cmp.Equal(got, want) {
		t.Errorf("Devices: -want +got\n%s", cmp.Diff(want, got))
	}
	if got := root["PortsTotal"].Value(); got != uint32(3) {
		t.Errorf("PortsTotal = %v, want 3", got)
	}
	if got := root["PortsActive"].Value(); got != uint32(2) {
		t.Errorf("PortsActive = %v, want 2", got)
	}
	if got := root["Healthy"].Value(); got != false {
		t.Errorf("Healthy = %v with a drifted target, want false", got)
	}
	if got := root["ConfigGeneration"].Value(); got != uint64(3) {
		t.Errorf("ConfigGeneration = %v (%T), want uint64 3", got, got)
	}

	mlx := v.objects[DevicePath("mlx5_0")].props[DeviceInterface]
	wantTargets := []Target{
		{Policy: "roce", Kind: "mtu", Object: "ens1f0", Desired: "9000", Actual: "1500", State: apitype.Drifted},
		{Policy: "roce", Kind: "roce", Object: "mlx5_0/1", Desired: "106", Actual: "106", State: apitype.InSync},
	}
	if diff := cmp.Diff(wantTargets, mlx["PolicyTargets"].Value()); diff != "" {
		t.Errorf("mlx5_0 PolicyTargets: -want +got\n%s", diff)
	}
	if got := mlx["PolicyState"].Value(); got != apitype.Drifted {
		t.Errorf("mlx5_0 PolicyState = %v, want drifted", got)
	}
	wantPorts := []Port{
		{Port: 1, State: "ACTIVE", PhysState: "LinkUp", LinkLayer: "Ethernet", Netdev: "ens1f0"},
		{Port: 2, State: "DOWN", PhysState: "LinkUp", LinkLayer: "Ethernet", Netdev: "ens1f0"},
	}
	if diff := cmp.Diff(wantPorts, mlx["Ports"].Value()); diff != "" {
		t.Errorf("mlx5_0 Ports: -want +got\n%s", diff)
	}
	rxe := v.objects[DevicePath("rxe0")].props[DeviceInterface]
	if got := rxe["PolicyState"].Value(); got != "none" {
		t.Errorf("rxe0 PolicyState = %v, want none", got)
	}
	if got := rxe["PolicyTargets"].Value().([]Target); len(got) != 0 {
		t.Errorf("rxe0 PolicyTargets = %v, want none", got)
	}

	// Every property's type must match what the introspection declares,
	// or busctl and gdbus would show one thing and receive another.
	for p, o := range v.objects {
		for ifc := range o.props {
			ps, _ := o.all(ifc)
			decl := map[string]string{}
			src := agentIntrospection
			if ifc == DeviceInterface {
				src = deviceIntrospection
			}
			for _, pr := range src.Properties {
				decl[pr.Name] = pr.Type
			}
			for name, val := range ps {
				if got := val.Signature().String(); got != decl[name] {
					t.Errorf("%s %s.%s has type %q, introspection says %q", p, ifc, name, got, decl[name])
				}
			}
			if len(ps) != len(decl) {
				t.Errorf("%s %s has %d properties, introspection declares %d", p, ifc, len(ps), len(decl))
			}
		}
	}

	wantNodes := map[dbus.ObjectPath][]string{
		"/":                        {"org"},
		"/org":                     {"rdmad"},
		"/org/rdmad":               {"Agent1"},
		"/org/rdmad/Agent1":        {"device"},
		"/org/rdmad/Agent1/device": {"mlx5_5f0", "rxe0"},
	}
	if diff := cmp.Diff(wantNodes, v.nodes); diff != "" {
		t.Errorf("nodes: -want +got\n%s", diff)
	}
}

func TestWorstState(t *testing.T) {
	tests := []struct {
		name   string
		states []string
		want   string
	}{
		{"none", nil, "none"},
		{"in sync", []string{apitype.InSync, apitype.InSync}, apitype.InSync},
		{"error wins", []string{apitype.InSync, apitype.Drifted, apitype.TargetError}, apitype.TargetError},
		{"drift over applied", []string{apitype.Applied, apitype.Drifted}, apitype.Drifted},
		{"applied over unsupported", []string{apitype.Unsupported, apitype.Applied}, apitype.Applied},
		{"unknown state shown", []string{"weird"}, "weird"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ts []Target
			for _, s := range tt.states {
				ts = append(ts, Target{State: s})
			}
			if got := worstState(ts); got != tt.want {
				t.Errorf("worstState(%v) = %q, want %q", tt.states, got, tt.want)
			}
		})
	}
}

// sigSummary is a signal in a form cmp can compare.
type sigSummary struct {
	Path dbus.ObjectPath
	Name string
	Body []any
}

func summarise(sigs []signal) []sigSummary {
	var out []sigSummary
	for _, s := range sigs {
		body := s.body
		switch s.name {
		case ObjectManagerInterface + ".InterfacesAdded":
			// The properties are checked elsewhere; here only which
			// interfaces the object has.
			body = []any{s.body[0], slices.Sorted(maps.Keys(s.body[1].(props)))}
		case PropertiesInterface + ".PropertiesChanged":
			body = []any{s.body[0], slices.Sorted(maps.Keys(s.body[1].(map[string]dbus.Variant)))}
			if inv := s.body[2].([]string); len(inv) > 0 {
				body = append(body, inv)
			}
		}
		out = append(out, sigSummary{s.path, s.name, body})
	}
	return out
}

func TestChanges(t *testing.T) {
	base := snapshot([]apitype.Device{device("rxe0", "eth0", "ACTIVE")},
		apitype.Target{Kind: "mtu", Object: "eth0", Desired: "9000", Actual: "9000", State: apitype.InSync})
	withState := func(f func(s *apitype.Snapshot)) *apitype.Snapshot {
		s := *base
		f(&s)
		return &s
	}
	rxe := DevicePath("rxe0")
	tests := []struct {
		name string
		old  *apitype.Snapshot
		cur  *apitype.Snapshot
		want []sigSummary
	}{
		{name: "first view emits nothing", old: nil, cur: base},
		{name: "no change", old: base, cur: withState(func(s *apitype.Snapshot) { s.Seq++ })},
		{
			name: "state",
			old:  base,
			cur:  withState(func(s *apitype.Snapshot) { s.State = apitype.Reloading }),
			want: []sigSummary{{Path, PropertiesInterface + ".PropertiesChanged", []any{Interface, []string{"State"}}}},
		},
		{
			name: "device appears",
			old:  base,
			cur: withState(func(s *apitype.Snapshot) {
				s.Devices = []apitype.Device{device("mlx5_0", "ens1f0", "DOWN"), base.Devices[0]}
			}),
			want: []sigSummary{
				{Path, ObjectManagerInterface + ".InterfacesAdded", []any{DevicePath("mlx5_0"), []string{DeviceInterface}}},
				{Path, PropertiesInterface + ".PropertiesChanged", []any{Interface, []string{"Devices", "PortsTotal"}}},
				// A new device's ports are links that appeared.
				{Path, Interface + ".LinkChanged", []any{DevicePath("mlx5_0"), "mlx5_0", uint32(1), "", "DOWN", "ens1f0"}},
			},
		},
		{
			name: "device vanishes",
			old:  base,
			cur:  withState(func(s *apitype.Snapshot) { s.Devices = nil }),
			want: []sigSummary{
				{Path, PropertiesInterface + ".PropertiesChanged", []any{Interface, []string{"Devices", "PortsActive", "PortsTotal"}}},
				{Path, Interface + ".LinkChanged", []any{rxe, "rxe0", uint32(1), "ACTIVE", "", "eth0"}},
				{Path, ObjectManagerInterface + ".InterfacesRemoved", []any{rxe, []string{DeviceInterface}}},
			},
		},
		{
			name: "port goes down",
			old:  base,
			cur:  withState(func(s *apitype.Snapshot) { s.Devices = []apitype.Device{device("rxe0", "eth0", "DOWN")} }),
			want: []sigSummary{
				{Path, PropertiesInterface + ".PropertiesChanged", []any{Interface, []string{"PortsActive"}}},
				{rxe, PropertiesInterface + ".PropertiesChanged", []any{DeviceInterface, []string{"Ports"}}},
				{Path, Interface + ".LinkChanged", []any{rxe, "rxe0", uint32(1), "ACTIVE", "DOWN", "eth0"}},
			},
		},
		{
			// The physical state alone changes (the link trains while the
			// port stays DOWN): a LinkChanged all the same, the state
			// strings equal; the Ports property carries PhysState.
			name: "physical state changes",
			old:  withState(func(s *apitype.Snapshot) { s.Devices = []apitype.Device{device("rxe0", "eth0", "DOWN")} }),
			cur: withState(func(s *apitype.Snapshot) {
				d := device("rxe0", "eth0", "DOWN")
				d.Ports[0].PhysState = "Polling"
				s.Devices = []apitype.Device{d}
			}),
			want: []sigSummary{
				{rxe, PropertiesInterface + ".PropertiesChanged", []any{DeviceInterface, []string{"Ports"}}},
				{Path, Interface + ".LinkChanged", []any{rxe, "rxe0", uint32(1), "DOWN", "DOWN", "eth0"}},
			},
		},
		{
			name: "port added and removed",
			old:  withState(func(s *apitype.Snapshot) { s.Devices = []apitype.Device{device("rxe0", "eth0", "ACTIVE", "DOWN")} }),
			cur:  withState(func(s *apitype.Snapshot) { s.Devices = []apitype.Device{device("rxe0", "eth0", "ACTIVE")} }),
			want: []sigSummary{
				{Path, PropertiesInterface + ".PropertiesChanged", []any{Interface, []string{"PortsTotal"}}},
				{rxe, PropertiesInterface + ".PropertiesChanged", []any{DeviceInterface, []string{"Ports"}}},
				{Path, Interface + ".LinkChanged", []any{rxe, "rxe0", uint32(2), "DOWN", "", "eth0"}},
			},
		},
		{
			name: "policy drifts",
			old:  base,
			cur: withState(func(s *apitype.Snapshot) {
				s.Policy = apitype.PolicyState{Policies: []apitype.PolicyStatus{{Name: "roce", Targets: []apitype.Target{
					{Kind: "mtu", Object: "eth0", Desired: "9000", Actual: "1500", State: apitype.Drifted}}}}}
			}),
			want: []sigSummary{
				{Path, PropertiesInterface + ".PropertiesChanged", []any{Interface, []string{"Healthy", "PolicyTargetRecords", "PolicyTargets"}}},
				{rxe, PropertiesInterface + ".PropertiesChanged", []any{DeviceInterface, []string{"PolicyState", "PolicyTargetRecords", "PolicyTargets"}}},
				{Path, Interface + ".PolicyChanged", []any{"roce", "mtu", "eth0", apitype.InSync, apitype.Drifted, "9000", "1500", ""}},
			},
		},
		{
			name: "actual value changes without a state change",
			old:  base,
			cur: withState(func(s *apitype.Snapshot) {
				s.Policy = apitype.PolicyState{Policies: []apitype.PolicyStatus{{Name: "roce", Targets: []apitype.Target{
					{Kind: "mtu", Object: "eth0", Desired: "9000", Actual: "9000", State: apitype.InSync, Applies: 7}}}}}
			}),
		},
		{
			name: "peer goes down",
			old:  withState(func(s *apitype.Snapshot) { s.Peers.Peers = []apitype.Peer{{Name: "node2", State: apitype.PeerUp}} }),
			cur: withState(func(s *apitype.Snapshot) {
				s.Peers.Peers = []apitype.Peer{{Name: "node2", State: apitype.PeerDown, Reason: "3 probes in a row lost"}}
			}),
			want: []sigSummary{
				// PeerRecords, which carries the state, is
				// invalidated; Peers, with its figures, is quiet.
				{Path, PropertiesInterface + ".PropertiesChanged", []any{Interface, []string(nil), []string{"PeerRecords"}}},
				{Path, Interface + ".PeerStateChanged", []any{"node2", apitype.PeerUp, apitype.PeerDown, "3 probes in a row lost"}},
			},
		},
		{
			name: "policy removed",
			old:  base,
			cur:  withState(func(s *apitype.Snapshot) { s.Policy = apitype.PolicyState{} }),
			want: []sigSummary{
				{Path, PropertiesInterface + ".PropertiesChanged", []any{Interface, []string{"PolicyTargetRecords", "PolicyTargets"}}},
				{rxe, PropertiesInterface + ".PropertiesChanged", []any{DeviceInterface, []string{"PolicyState", "PolicyTargetRecords", "PolicyTargets"}}},
				{Path, Interface + ".PolicyChanged", []any{"roce", "mtu", "eth0", apitype.InSync, "", "9000", "9000", ""}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var old *view
			if tt.old != nil {
				old = newView(tt.old)
			}
			got := summarise(changes(old, newView(tt.cur)))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("changes: -want +got\n%s", diff)
			}
		})
	}
}

// TestDocsMatchIntrospection keeps docs/DBUS.md's XML equal to what rdmad
// serves.
func TestDocsMatchIntrospection(t *testing.T) {
	b, err := os.ReadFile("../../docs/DBUS.md")
	if err != nil {
		t.Fatalf("read the interface reference: %v", err)
	}
	doc := string(b)
	start := strings.Index(doc, "```xml\n")
	if start < 0 {
		t.Fatal("docs/DBUS.md has no ```xml block with the introspection data")
	}
	rest := doc[start+len("```xml\n"):]
	end := strings.Index(rest, "```")
	if end < 0 {
		t.Fatal("docs/DBUS.md: the ```xml block does not end")
	}
	if diff := cmp.Diff(InterfaceXML(), strings.TrimSpace(rest[:end])); diff != "" {
		t.Errorf("docs/DBUS.md's XML differs from InterfaceXML() (update the doc with go test -run TestDocsMatchIntrospection -v output): -want +got\n%s", diff)
	}
}

func TestPeerEntries(t *testing.T) {
	us := time.Microsecond
	tests := []struct {
		name  string
		peers []apitype.Peer
		want  []PeerEntry
	}{
		{name: "no peers", want: []PeerEntry{}},
		{
			name:  "not probed yet",
			peers: []apitype.Peer{{Name: "node2", Group: "tor1", State: apitype.PeerUnknown}},
			want:  []PeerEntry{{Name: "node2", Group: "tor1", State: apitype.PeerUnknown}},
		},
		{
			name: "worst path of each figure",
			peers: []apitype.Peer{{Name: "192.0.2.17", Address: "192.0.2.17", State: apitype.PeerDegraded, Reason: "loss 3% over 1%",
				Paths: []apitype.PeerPath{
					{Local: "mlx5_0/1", RTTP50: 10 * us, RTTP99: 90 * us, LossPct: 3},
					{Local: "mlx5_0/2", RTTP50: 20 * us, RTTP99: 30 * us, LossPct: 0.5},
				}}},
			want: []PeerEntry{{Name: "192.0.2.17", Address: "192.0.2.17", State: apitype.PeerDegraded, Reason: "loss 3% over 1%",
				RTTP50: 20000, RTTP99: 90000, LossPct: 3}},
		},
		{
			name:  "order kept",
			peers: []apitype.Peer{{Name: "b", State: apitype.PeerUp}, {Name: "a", State: apitype.PeerDown, Reason: "3 probes lost"}},
			want:  []PeerEntry{{Name: "b", State: apitype.PeerUp}, {Name: "a", State: apitype.PeerDown, Reason: "3 probes lost"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := snapshot(nil)
			s.Peers = apitype.Peers{Peers: tt.peers}
			got := newView(s).objects[Path].props[Interface]["Peers"]
			if sig := got.Signature().String(); sig != "a(sssssttd)" {
				t.Errorf("Peers has D-Bus type %s, want a(sssssttd) as introspected", sig)
			}
			if diff := cmp.Diff(tt.want, got.Value()); diff != "" {
				t.Errorf("Peers: -want +got\n%s", diff)
			}
		})
	}
}

func TestPeerChanges(t *testing.T) {
	peer := func(name, st, reason string) apitype.Peer { return apitype.Peer{Name: name, State: st, Reason: reason} }
	sig := func(name, from, to, reason string) sigSummary {
		return sigSummary{Path, Interface + ".PeerStateChanged", []any{name, from, to, reason}}
	}
	tests := []struct {
		name     string
		old, cur []apitype.Peer
		want     []sigSummary
	}{
		{name: "none"},
		{name: "same state", old: []apitype.Peer{peer("a", apitype.PeerUp, "")}, cur: []apitype.Peer{peer("a", apitype.PeerUp, "")}},
		{name: "reason only", old: []apitype.Peer{peer("a", apitype.PeerDown, "x")}, cur: []apitype.Peer{peer("a", apitype.PeerDown, "y")}},
		{
			name: "up to down",
			old:  []apitype.Peer{peer("a", apitype.PeerUp, "")},
			cur:  []apitype.Peer{peer("a", apitype.PeerDown, "3 probes in a row lost")},
			want: []sigSummary{sig("a", apitype.PeerUp, apitype.PeerDown, "3 probes in a row lost")},
		},
		{
			name: "first answer",
			old:  []apitype.Peer{peer("a", apitype.PeerUnknown, "")},
			cur:  []apitype.Peer{peer("a", apitype.PeerUp, "")},
			want: []sigSummary{sig("a", apitype.PeerUnknown, apitype.PeerUp, "")},
		},
		{name: "added unknown is quiet", cur: []apitype.Peer{peer("a", apitype.PeerUnknown, "")}},
		{
			name: "added already down counts from unknown",
			cur:  []apitype.Peer{peer("a", apitype.PeerDown, "control endpoint does not answer")},
			want: []sigSummary{sig("a", apitype.PeerUnknown, apitype.PeerDown, "control endpoint does not answer")},
		},
		{name: "dropped is quiet", old: []apitype.Peer{peer("a", apitype.PeerDown, "x")}},
		{
			name: "several, in cur's order",
			old:  []apitype.Peer{peer("a", apitype.PeerUp, ""), peer("b", apitype.PeerUp, ""), peer("c", apitype.PeerUp, "")},
			cur:  []apitype.Peer{peer("c", apitype.PeerDegraded, "loss"), peer("b", apitype.PeerUp, ""), peer("a", apitype.PeerDown, "lost")},
			want: []sigSummary{sig("c", apitype.PeerUp, apitype.PeerDegraded, "loss"), sig("a", apitype.PeerUp, apitype.PeerDown, "lost")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old, cur := snapshot(nil), snapshot(nil)
			old.Peers.Peers, cur.Peers.Peers = tt.old, tt.cur
			if diff := cmp.Diff(tt.want, summarise(peerChanges(state.Compare(old, cur)))); diff != "" {
				t.Errorf("peerChanges: -want +got\n%s", diff)
			}
		})
	}
}

// TestQuietProperties checks that the properties the view leaves out of
// PropertiesChanged are exactly those the introspection marks
// EmitsChangedSignal=false: Peers and the devices' ProbeResults (each
// round's figures; ProbeState, ProbeFailed and ProbeRecovered carry the
// changes clients follow), PeerFigures (the figures of PeerRecords), and
// nothing else: PeerRecords is signalled.
func TestQuietProperties(t *testing.T) {
	want := map[string]bool{Interface + ".Peers": true, Interface + ".PeerFigures": true, DeviceInterface + ".ProbeResults": true}
	if diff := cmp.Diff(want, quietProps); diff != "" {
		t.Errorf("quiet properties -want +got:\n%s", diff)
	}
	if !unsignalled(Interface, "Peers") || unsignalled(Interface, "State") || unsignalled(DeviceInterface, "Peers") ||
		unsignalled(Interface, "PeerRecords") {
		t.Error("unsignalled disagrees with quietProps")
	}
	// PeerRecords' changes are signalled by name (it is too large to
	// broadcast), nothing else's.
	if diff := cmp.Diff(map[string]bool{Interface + ".PeerRecords": true}, invalidatingProps); diff != "" {
		t.Errorf("properties marked invalidates -want +got:\n%s", diff)
	}
	for name, p := range lazyAgentProps {
		if (p.same == nil) != unsignalled(Interface, name) {
			t.Errorf("lazy property %s: quiet in the view is %v, in the introspection %v", name, p.same == nil, unsignalled(Interface, name))
		}
	}
}

// TestFleetProperties: fingerprint mismatches and group faults reach D-Bus
// with their introspected types, and a mismatch that appears is signalled
// (unlike Peers, these change only when a fingerprint or a group does).
func TestFleetProperties(t *testing.T) {
	s := snapshot(nil)
	s.Peers = apitype.Peers{
		Peers: []apitype.Peer{
			{Name: "node2", State: apitype.PeerUp, Mismatches: []apitype.Mismatch{
				{Field: "mtu", Local: "1500", Peer: "4200", Severity: "must", LocalPort: "rxe0/1", PeerPort: "rxe0/1"},
				{Field: "firmware", Local: "1.0", Peer: "1.1", Severity: "info", LocalPort: "rxe0/1", PeerPort: "rxe0/1"},
			}},
			{Name: "node3", State: apitype.PeerUp},
		},
		GroupFaults: []apitype.GroupFault{{Group: "tor-a", Reason: "all 2 peers of tor-a are down"}},
	}
	p := newView(s).objects[Path].props[Interface]
	fm, gf := p["FleetMismatches"], p["PeerGroupFaults"]
	if sig := fm.Signature().String(); sig != "a(sssssss)" {
		t.Errorf("FleetMismatches has D-Bus type %s, want a(sssssss)", sig)
	}
	if sig := gf.Signature().String(); sig != "a(ss)" {
		t.Errorf("PeerGroupFaults has D-Bus type %s, want a(ss)", sig)
	}
	wantFM := []FleetMismatch{
		{Peer: "node2", Field: "mtu", Local: "1500", PeerValue: "4200", Severity: "must", LocalPort: "rxe0/1", PeerPort: "rxe0/1"},
		{Peer: "node2", Field: "firmware", Local: "1.0", PeerValue: "1.1", Severity: "info", LocalPort: "rxe0/1", PeerPort: "rxe0/1"},
	}
	if diff := cmp.Diff(wantFM, fm.Value()); diff != "" {
		t.Errorf("FleetMismatches: -want +got\n%s", diff)
	}
	if diff := cmp.Diff([]GroupFault{{Group: "tor-a", Reason: "all 2 peers of tor-a are down"}}, gf.Value()); diff != "" {
		t.Errorf("PeerGroupFaults: -want +got\n%s", diff)
	}

	old := snapshot(nil)
	old.Peers = apitype.Peers{Peers: []apitype.Peer{{Name: "node2", State: apitype.PeerUp}, {Name: "node3", State: apitype.PeerUp}}}
	var changed []string
	for _, sg := range summarise(changes(newView(old), newView(s))) {
		if sg.Name == PropertiesInterface+".PropertiesChanged" {
			changed = append(changed, sg.Body[1].([]string)...)
		}
	}
	if !slices.Contains(changed, "FleetMismatches") || !slices.Contains(changed, "PeerGroupFaults") {
		t.Errorf("properties signalled when a mismatch and a group fault appear: %v; want FleetMismatches and PeerGroupFaults", changed)
	}
}

// TestViewComponents: Components is (state, text): a component in error
// gives its error, a disabled or unavailable one its reason (the D-Bus
// signature a{s(ss)} has no third field; it carried the reason before
// apitype.Component had Reason).
func TestViewComponents(t *testing.T) {
	s := snapshot(nil)
	s.Components = map[string]apitype.Component{
		"api":   {State: apitype.Error, Error: "socket permissions not updated"},
		"peers": {State: apitype.Disabled, Reason: "[probe] peers = false"},
		"dbus":  {State: apitype.OK},
	}
	want := map[string]Component{
		"api":   {State: apitype.Error, Error: "socket permissions not updated"},
		"peers": {State: apitype.Disabled, Error: "[probe] peers = false"},
		"dbus":  {State: apitype.OK},
	}
	if diff := cmp.Diff(want, newView(s).objects[Path].props[Interface]["Components"].Value()); diff != "" {
		t.Errorf("Components: -want +got\n%s", diff)
	}
}
