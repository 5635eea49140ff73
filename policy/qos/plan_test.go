package qos

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rdmad/rdmad/policy/dcb"
)

func dscpApp(dscp, prio int) dcb.App {
	return dcb.App{Selector: dcb.SelectorDSCP, Protocol: uint16(dscp), Priority: uint8(prio)}
}

// observed builds an Actual the way Observe does, from a dcbnl reply.
func observed(ieee dcb.IEEE) Actual { return actualFrom("ens1f0", &ieee) }

func pfcOn(prios ...int) *dcb.PFC {
	p := &dcb.PFC{Cap: 8, Delay: 32}
	for _, prio := range prios {
		p.Enabled |= 1 << prio
	}
	return p
}

func TestActualFrom(t *testing.T) {
	a := observed(dcb.IEEE{
		PFC: pfcOn(3, 5),
		Apps: []dcb.App{
			dscpApp(26, 3),
			{Selector: dcb.SelectorEthertype, Protocol: 0x8915, Priority: 4},
			dscpApp(26, 5), // a second entry for 26: the map keeps the first
			dscpApp(46, 5),
		},
	})
	want := Actual{
		Ifname: "ens1f0", Supported: true, Trust: TrustDSCP, PFC: []int{3, 5},
		DSCPToPrio: map[int]int{26: 3, 46: 5},
		DSCPApps:   []dcb.App{dscpApp(26, 3), dscpApp(26, 5), dscpApp(46, 5)},
	}
	if diff := cmp.Diff(want, a, cmp.AllowUnexported(Actual{}), cmpIgnorePFCObject); diff != "" {
		t.Errorf("actualFrom (-want +got):\n%s", diff)
	}
	if a.pfc == nil || a.pfc.Delay != 32 {
		t.Errorf("raw PFC object not kept: %+v", a.pfc)
	}
	if a.IEEE == nil || a.IEEE.PFC == nil || len(a.IEEE.Apps) != 4 {
		t.Errorf("the dcbnl reply is not kept as IEEE: %+v", a.IEEE)
	}

	if got := observed(dcb.IEEE{}).Trust; got != TrustPCP {
		t.Errorf("no DSCP entries, no trust table: Trust = %q, want pcp", got)
	}
	if got := observed(dcb.IEEE{TrustTable: true, Trust: []uint8{dcb.SelectorDSCP, dcb.SelectorPCP}}).Trust; got != "dscp pcp" {
		t.Errorf("trust table [dscp pcp]: Trust = %q", got)
	}
	if got := observed(dcb.IEEE{}).PFC; got != nil {
		t.Errorf("driver without PFC: PFC = %v, want nil", got)
	}
}

var cmpIgnorePFCObject = cmp.FilterPath(func(p cmp.Path) bool {
	return p.Last().String() == ".pfc" || p.Last().String() == ".IEEE"
}, cmp.Ignore())

func TestPlan(t *testing.T) {
	base := dcb.IEEE{
		PFC: pfcOn(3),
		Apps: []dcb.App{
			{Selector: dcb.SelectorEthertype, Protocol: 0x8915, Priority: 4},
			dscpApp(26, 3),
			dscpApp(48, 6),
		},
	}
	withTable := base
	withTable.TrustTable = true
	withTable.Trust = []uint8{dcb.SelectorPCP}

	tests := []struct {
		name    string
		desired Desired
		actual  dcb.IEEE
		want    []string
		wantErr string // substring; "" means no error
	}{
		{name: "nothing managed", desired: Desired{}, actual: base},
		{name: "in sync", actual: base, desired: Desired{
			Trust: TrustDSCP, PFC: []int{3}, DSCPToPrio: map[int]int{26: 3, 48: 6},
		}},
		{name: "pfc on and off", actual: base, desired: Desired{PFC: []int{4, 5}},
			want: []string{"pfc: prio 3 on -> off", "pfc: prio 4 off -> on", "pfc: prio 5 off -> on"}},
		{name: "pfc all off", actual: base, desired: Desired{PFC: []int{}},
			want: []string{"pfc: prio 3 on -> off"}},
		{name: "pfc unreported", actual: dcb.IEEE{}, desired: Desired{PFC: []int{3}},
			wantErr: "does not report PFC"},
		{name: "dscp add change remove", actual: base,
			desired: Desired{DSCPToPrio: map[int]int{10: 1, 26: 5}},
			want:    []string{"dscp 10: unmapped -> prio 1", "dscp 26: prio 3 -> prio 5", "dscp 48: prio 6 -> unmapped"}},
		{name: "dscp duplicate entries collapse", actual: dcb.IEEE{Apps: []dcb.App{dscpApp(26, 3), dscpApp(26, 5)}},
			desired: Desired{DSCPToPrio: map[int]int{26: 5}},
			want:    []string{"dscp 26: prio 3,5 -> prio 5"}},
		{name: "dscp empty map removes all", actual: base, desired: Desired{DSCPToPrio: map[int]int{}},
			want: []string{"dscp 26: prio 3 -> unmapped", "dscp 48: prio 6 -> unmapped"}},
		{name: "trust dscp implied by new map", actual: dcb.IEEE{PFC: pfcOn()},
			desired: Desired{Trust: TrustDSCP, DSCPToPrio: map[int]int{26: 3}},
			want:    []string{"dscp 26: unmapped -> prio 3", "trust: pcp -> dscp (by DSCP APP entries)"}},
		{name: "trust dscp already implied", actual: base, desired: Desired{Trust: TrustDSCP}},
		{name: "trust dscp without map or entries", actual: dcb.IEEE{}, desired: Desired{Trust: TrustDSCP},
			wantErr: "give it a DSCP to priority map"},
		{name: "trust dscp with empty map", actual: base, desired: Desired{Trust: TrustDSCP, DSCPToPrio: map[int]int{}},
			wantErr: "no APP trust table"},
		{name: "trust pcp removes unmanaged entries", actual: base, desired: Desired{Trust: TrustPCP},
			want: []string{"trust: dscp -> pcp (by DSCP APP entries)"}},
		{name: "trust pcp with empty map", actual: base, desired: Desired{Trust: TrustPCP, DSCPToPrio: map[int]int{}},
			want: []string{"dscp 26: prio 3 -> unmapped", "dscp 48: prio 6 -> unmapped", "trust: dscp -> pcp (by DSCP APP entries)"}},
		{name: "trust pcp conflicts with map", actual: base, desired: Desired{Trust: TrustPCP, DSCPToPrio: map[int]int{26: 3}},
			wantErr: "conflicts with its DSCP map"},
		{name: "trust table pcp -> dscp", actual: withTable, desired: Desired{Trust: TrustDSCP},
			want: []string{"trust: pcp -> dscp"}},
		{name: "trust table pcp with map is fine", actual: withTable, desired: Desired{Trust: TrustPCP, DSCPToPrio: map[int]int{26: 3, 48: 6}}},
		{name: "trust table from dscp pcp", actual: dcb.IEEE{TrustTable: true, Trust: []uint8{dcb.SelectorDSCP, dcb.SelectorPCP}},
			desired: Desired{Trust: TrustDSCP}, want: []string{"trust: dscp pcp -> dscp"}},
		{name: "invalid trust", actual: base, desired: Desired{Trust: "vlan"}, wantErr: `trust "vlan"`},
		{name: "invalid pfc prio", actual: base, desired: Desired{PFC: []int{8}}, wantErr: "pfc priority 8"},
		{name: "invalid dscp", actual: base, desired: Desired{DSCPToPrio: map[int]int{64: 1}}, wantErr: "dscp 64"},
		{name: "invalid dscp prio", actual: base, desired: Desired{DSCPToPrio: map[int]int{10: -1}}, wantErr: "priority -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			changes, err := Plan(tt.desired, observed(tt.actual))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Plan error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Plan: %v", err)
			}
			var got []string
			for _, c := range changes {
				got = append(got, c.String())
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Plan (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPlanPayload checks what Apply will send for the plans whose String
// alone does not show it, in particular that only DSCP entries are ever
// deleted and that a remap adds the new entry and deletes the old one.
func TestPlanPayload(t *testing.T) {
	actual := observed(dcb.IEEE{
		PFC: pfcOn(3),
		Apps: []dcb.App{
			{Selector: dcb.SelectorEthertype, Protocol: 0x8915, Priority: 4},
			{Selector: dcb.SelectorDgram, Protocol: 4791, Priority: 3},
			dscpApp(26, 3),
			dscpApp(48, 6),
		},
	})
	collect := func(changes []Change) (add, del []dcb.App) {
		for _, c := range changes {
			add = append(add, c.add...)
			del = append(del, c.del...)
		}
		return add, del
	}

	changes, err := Plan(Desired{DSCPToPrio: map[int]int{26: 5}}, actual)
	if err != nil {
		t.Fatal(err)
	}
	add, del := collect(changes)
	if diff := cmp.Diff([]dcb.App{dscpApp(26, 5)}, add); diff != "" {
		t.Errorf("add (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]dcb.App{dscpApp(26, 3), dscpApp(48, 6)}, del); diff != "" {
		t.Errorf("del (-want +got):\n%s", diff)
	}

	changes, err = Plan(Desired{Trust: TrustPCP}, actual)
	if err != nil {
		t.Fatal(err)
	}
	add, del = collect(changes)
	if len(add) != 0 {
		t.Errorf("trust pcp adds %v", add)
	}
	if diff := cmp.Diff([]dcb.App{dscpApp(26, 3), dscpApp(48, 6)}, del); diff != "" {
		t.Errorf("trust pcp deletes (-want +got):\n%s", diff)
	}

	changes, err = Plan(Desired{Trust: TrustDSCP}, observed(dcb.IEEE{TrustTable: true, Trust: []uint8{dcb.SelectorPCP}}))
	if err != nil {
		t.Fatal(err)
	}
	if len(changes) != 1 || !cmp.Equal(changes[0].trust, []uint8{dcb.SelectorDSCP}) {
		t.Errorf("trust table dscp: changes %+v, want one setting [dscp]", changes)
	}
}

func TestPlanUnsupported(t *testing.T) {
	a := Actual{Ifname: "veth0"}
	if _, err := Plan(Desired{PFC: []int{3}}, a); !IsUnsupported(err) {
		t.Errorf("Plan on unsupported device = %v, want IsUnsupported", err)
	}
	if c, err := Plan(Desired{}, a); err != nil || c != nil {
		t.Errorf("Plan managing nothing on unsupported device = %v, %v; want nil, nil", c, err)
	}
}
