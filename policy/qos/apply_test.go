package qos

import (
	"errors"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rdmad/rdmad/policy/dcb"
)

var roceApps = []dcb.App{
	{Selector: dcb.SelectorEthertype, Protocol: 0x8915, Priority: 4}, // RoCE v1
	{Selector: dcb.SelectorDgram, Protocol: 4791, Priority: 3},       // RoCE v2 UDP port
}

func newFake() *fakeDCB {
	return &fakeDCB{
		ifname: "ens1f0",
		pfc:    &dcb.PFC{Cap: 8, Enabled: 1 << 3, Delay: 32},
		apps:   append([]dcb.App{dscpApp(26, 3), dscpApp(48, 6)}, roceApps...),
	}
}

// reconcile runs one Observe, Plan, Apply round like the reconciler does.
func reconcile(t *testing.T, c *dcb.Conn, ifname string, d Desired) []Change {
	t.Helper()
	a, err := Observe(c, ifname)
	if err != nil {
		t.Fatalf("Observe: %v", err)
	}
	changes, err := Plan(d, a)
	if err != nil {
		t.Fatalf("Plan: %v", err)
	}
	if err := Apply(c, ifname, changes); err != nil {
		t.Fatalf("Apply %v: %v", changes, err)
	}
	return changes
}

func nonDSCP(apps []dcb.App) []dcb.App {
	var out []dcb.App
	for _, a := range apps {
		if a.Selector != dcb.SelectorDSCP {
			out = append(out, a)
		}
	}
	return out
}

func TestApplyConverges(t *testing.T) {
	f := newFake()
	c := f.conn(t)
	d := Desired{Trust: TrustDSCP, PFC: []int{3, 4}, DSCPToPrio: map[int]int{26: 5, 46: 5}}

	if changes := reconcile(t, c, f.ifname, d); len(changes) == 0 {
		t.Fatal("first round planned nothing")
	}
	a, err := Observe(c, f.ifname)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[int]int{26: 5, 46: 5}, a.DSCPToPrio); diff != "" {
		t.Errorf("DSCP map after apply (-want +got):\n%s", diff)
	}
	if len(a.DSCPApps) != 2 {
		t.Errorf("DSCP entries after apply = %v, want exactly 26 and 46", a.DSCPApps)
	}
	if diff := cmp.Diff([]int{3, 4}, a.PFC); diff != "" {
		t.Errorf("PFC after apply (-want +got):\n%s", diff)
	}
	if f.pfc.Delay != 32 || f.pfc.Cap != 8 {
		t.Errorf("PFC object lost its delay/cap: %+v", *f.pfc)
	}
	if a.Trust != TrustDSCP {
		t.Errorf("Trust after apply = %q, want dscp", a.Trust)
	}
	if diff := cmp.Diff(roceApps, nonDSCP(f.apps)); diff != "" {
		t.Errorf("non-DSCP APP entries were touched (-want +got):\n%s", diff)
	}

	// Level-triggered: the next round finds nothing to do and sends
	// nothing but the observation.
	before := f.requests
	if changes := reconcile(t, c, f.ifname, d); len(changes) != 0 {
		t.Errorf("second round planned %v, want nothing", changes)
	}
	if n := f.requests - before; n != 1 {
		t.Errorf("second round sent %d requests, want 1 (the IEEE get)", n)
	}
}

// TestApplyTwice applies the same plan twice, as happens when two events
// race: the second time every entry already exists or is already gone.
func TestApplyTwice(t *testing.T) {
	f := newFake()
	c := f.conn(t)
	a, err := Observe(c, f.ifname)
	if err != nil {
		t.Fatal(err)
	}
	// 10 is new and 26 moves; 46 is new and sorts after 26, so the
	// second add batch fails at its first entry and must fall back to
	// one entry at a time.
	changes, err := Plan(Desired{PFC: []int{5}, DSCPToPrio: map[int]int{10: 1, 26: 5, 46: 2}}, a)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := Apply(c, f.ifname, changes); err != nil {
			t.Fatalf("Apply #%d: %v", i+1, err)
		}
	}
	got, err := Observe(c, f.ifname)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[int]int{10: 1, 26: 5, 46: 2}, got.DSCPToPrio); diff != "" {
		t.Errorf("DSCP map (-want +got):\n%s", diff)
	}
	if len(got.DSCPApps) != 3 {
		t.Errorf("DSCP entries = %v, want 3 (no duplicates)", got.DSCPApps)
	}
	if diff := cmp.Diff([]int{5}, got.PFC); diff != "" {
		t.Errorf("PFC (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(roceApps, nonDSCP(f.apps)); diff != "" {
		t.Errorf("non-DSCP APP entries were touched (-want +got):\n%s", diff)
	}
}

func TestApplyTrustPCPRemovesOnlyDSCP(t *testing.T) {
	f := newFake()
	c := f.conn(t)
	reconcile(t, c, f.ifname, Desired{Trust: TrustPCP})
	if diff := cmp.Diff(roceApps, f.apps); diff != "" {
		t.Errorf("APP table after trust pcp (-want +got):\n%s", diff)
	}
	a, err := Observe(c, f.ifname)
	if err != nil {
		t.Fatal(err)
	}
	if a.Trust != TrustPCP {
		t.Errorf("Trust = %q, want pcp", a.Trust)
	}
}

func TestApplyTrustTable(t *testing.T) {
	f := newFake()
	f.trust = []uint8{dcb.SelectorPCP}
	c := f.conn(t)
	reconcile(t, c, f.ifname, Desired{Trust: TrustDSCP})
	if diff := cmp.Diff([]uint8{dcb.SelectorDSCP}, f.trust); diff != "" {
		t.Errorf("trust table (-want +got):\n%s", diff)
	}
	// With a trust table, trust is not expressed through the APP table.
	if diff := cmp.Diff(append([]dcb.App{dscpApp(26, 3), dscpApp(48, 6)}, roceApps...), f.apps); diff != "" {
		t.Errorf("APP table changed (-want +got):\n%s", diff)
	}
}

// TestApplyDriverRefuses covers a driver whose ieee_setapp answers
// EOPNOTSUPP (mlx5 does for non-DSCP selectors): dcbnl reports that in
// the reply's status attribute, not as a netlink error.
func TestApplyDriverRefuses(t *testing.T) {
	f := newFake()
	f.setappErr = syscall.EOPNOTSUPP
	c := f.conn(t)
	a, err := Observe(c, f.ifname)
	if err != nil {
		t.Fatal(err)
	}
	changes, err := Plan(Desired{DSCPToPrio: map[int]int{10: 1}}, a)
	if err != nil {
		t.Fatal(err)
	}
	err = Apply(c, f.ifname, changes)
	if !IsUnsupported(err) || !errors.Is(err, syscall.EOPNOTSUPP) {
		t.Fatalf("Apply = %v, want an unsupported error", err)
	}
	want := "dcb: add APP entries on ens1f0: operation not supported"
	if got := err.Error(); !cmp.Equal(want, got) {
		t.Errorf("error text = %q, want %q", got, want)
	}
}

func TestObserveMissingDevice(t *testing.T) {
	f := newFake()
	c := f.conn(t)
	a, err := Observe(c, "gone0")
	if !errors.Is(err, syscall.ENODEV) || IsUnsupported(err) {
		t.Fatalf("Observe(gone0) = %v; want ENODEV and not unsupported", err)
	}
	if a.Supported {
		t.Error("missing device reported as supported")
	}
}
