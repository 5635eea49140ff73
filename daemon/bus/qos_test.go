package bus

import (
	"slices"
	"testing"

	"github.com/godbus/dbus/v5"
	"github.com/google/go-cmp/cmp"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon/service/servicetest"
)

func qosFixture() []apitype.NetdevQoS {
	return []apitype.NetdevQoS{
		{Netdev: "ens1f0np0", Device: "mlx5_0", Supported: true, Trust: "dscp", HasPFC: true, PFCEnabled: []int{3},
			DSCP: []apitype.DSCPPriority{{DSCP: 26, Priority: 3}, {DSCP: 48, Priority: 6}},
			ETS:  &apitype.ETS{PrioTC: []int{0, 0, 0, 1, 0, 0, 0, 0}, TCs: []apitype.TrafficClass{{TC: 0, TSA: "ets", Bandwidth: 60}, {TC: 1, TSA: "ets", Bandwidth: 40}}}},
		{Netdev: "eth0", Device: "rxe0", Error: "no DCB: the driver of eth0 has no dcbnl support"},
	}
}

// TestQoSProperty: the observed DCB state reaches the QoS property with
// its introspected type, and a change (PFC reset by a driver reload) is
// signalled.
func TestQoSProperty(t *testing.T) {
	s := snapshot(nil)
	s.QoS = qosFixture()
	v := newView(s).objects[Path].props[Interface]["QoS"]
	if sig := v.Signature().String(); sig != "a(ssbssaua(uu)aua(uus))" {
		t.Errorf("QoS has D-Bus type %s, want a(ssbssaua(uu)aua(uus))", sig)
	}
	want := []QoSEntry{
		{Netdev: "ens1f0np0", Device: "mlx5_0", Supported: true, Trust: "dscp", PFC: []uint32{3},
			DSCP: []DSCPMap{{26, 3}, {48, 6}}, PrioTC: []uint32{0, 0, 0, 1, 0, 0, 0, 0},
			TCs: []TrafficClass{{TC: 0, Bandwidth: 60, TSA: "ets"}, {TC: 1, Bandwidth: 40, TSA: "ets"}}},
		{Netdev: "eth0", Device: "rxe0", Error: "no DCB: the driver of eth0 has no dcbnl support",
			PFC: []uint32{}, DSCP: []DSCPMap{}, PrioTC: []uint32{}, TCs: []TrafficClass{}},
	}
	if diff := cmp.Diff(want, v.Value()); diff != "" {
		t.Errorf("QoS: -want +got\n%s", diff)
	}

	reset := snapshot(nil)
	reset.QoS = qosFixture()
	reset.QoS[0].PFCEnabled = []int{}
	var changed []string
	for _, sg := range summarise(changes(newView(s), newView(reset))) {
		if sg.Name == PropertiesInterface+".PropertiesChanged" {
			changed = append(changed, sg.Body[1].([]string)...)
		}
	}
	if !slices.Equal(changed, []string{"QoS", "QoSRecords"}) {
		t.Errorf("properties signalled when PFC goes off: %v, want [QoS QoSRecords]", changed)
	}
}

// TestIntegrationQoSProperty reads QoS over a private system bus as a
// client does.
func TestIntegrationQoSProperty(t *testing.T) {
	requireRoot(t)
	startBus(t, "")
	store := newStore()
	store.Update(func(s *apitype.Snapshot) { s.QoS = qosFixture() })
	r := startRun(t, store, servicetest.ReloadOnly(store))
	r.waitFor(t, 0, apitype.OK, "")

	var got []QoSEntry
	v, err := rootConn(t).Object(Name, Path).GetProperty(Interface + ".QoS")
	if err != nil {
		t.Fatal(err)
	}
	if err := dbus.Store([]any{v.Value()}, &got); err != nil {
		t.Fatalf("store QoS %v: %v", v, err)
	}
	if len(got) != 2 || got[0].Netdev != "ens1f0np0" || !got[0].Supported || !slices.Equal(got[0].PFC, []uint32{3}) ||
		got[1].Supported || got[1].Error == "" {
		t.Errorf("QoS over the bus = %+v", got)
	}
}
