package daemon

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/mdlayher/netlink"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon/state"
	"github.com/rdmad/rdmad/inventory"
	"github.com/rdmad/rdmad/policy/dcb"
	"github.com/rdmad/rdmad/policy/qos"
	"github.com/rdmad/rdmad/test/netnstest"
)

// syncBuffer is a log sink the test reads while the daemon writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestIntegrationRefreshQoSUnsupported drives the refresh against the real
// kernel's dcbnl: the fixture's RoCE netdevs (mlx5_0's ens1f0np0, rxe0's
// eth0) exist as a veth pair in a private namespace, and veth has no
// dcbnl ops, so both are reported supported:false with the kernel's
// answer, at every refresh, and logged once each. When the pair goes,
// the new reason (ENODEV) is logged once more.
func TestIntegrationRefreshQoSUnsupported(t *testing.T) {
	ns, h := netnstest.New(t)
	veth := netnstest.Veth(t, h, "ens1f0np0", "eth0")
	root := t.TempDir()
	copyTree(t, "../inventory/testdata/roce-ib", root)

	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	dials := 0
	d := &Daemon{inv: inventory.Reader{Root: root}, log: log,
		store: state.NewStore(apitype.Snapshot{State: apitype.Running})}
	d.qos = newQoSObserver(log, func() (*dcb.Conn, error) {
		dials++
		return dcb.Dial(&netlink.Config{NetNS: int(ns)})
	})
	defer d.qos.close()

	for range 3 {
		d.refresh("test")
	}
	got := d.store.Load().QoS
	want := []apitype.NetdevQoS{
		{Netdev: "ens1f0np0", Device: "mlx5_0", Error: "no DCB: the driver of ens1f0np0 has no dcbnl support (dcb: get IEEE on ens1f0np0: operation not supported), so its trust, PFC and DSCP map cannot be read or set"},
		{Netdev: "eth0", Device: "rxe0", Error: "no DCB: the driver of eth0 has no dcbnl support (dcb: get IEEE on eth0: operation not supported), so its trust, PFC and DSCP map cannot be read or set"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("snapshot QoS (-want +got):\n%s", diff)
	}
	out := logs.String()
	if n := strings.Count(out, "netdev has no DCB (dcbnl)"); n != 2 || !strings.Contains(out, "netdev=ens1f0np0") || !strings.Contains(out, "netdev=eth0") {
		t.Errorf("after 3 refreshes: %d \"no DCB\" log lines, want one per netdev (2), naming each\n%s", n, out)
	}
	if dials != 1 {
		t.Errorf("dcbnl dialled %d times over 3 refreshes, want once", dials)
	}

	// The pair goes (a driver unbind, a VF removed) while the inventory
	// still lists it: the read fails with ENODEV, a new reason, logged
	// once.
	if err := h.LinkDel(veth); err != nil {
		t.Fatal(err)
	}
	d.refresh("test")
	d.refresh("test")
	got = d.store.Load().QoS
	if len(got) != 2 || got[0].Supported || !strings.Contains(got[0].Error, "cannot read the DCB state: dcb: get IEEE on ens1f0np0: no such device") {
		t.Errorf("after the veth pair went: %+v; want supported:false with ENODEV", got)
	}
	if n := strings.Count(logs.String(), "DCB state of a RoCE netdev unreadable"); n != 2 {
		t.Errorf("%d \"unreadable\" log lines after two refreshes without the netdevs, want 2 (one per netdev)\n%s", n, logs.String())
	}
}

// TestRefreshQoSOff: a daemon on a fixture tree has no observer (the
// tree's netdevs are not this host's) and publishes [], not null.
func TestRefreshQoSOff(t *testing.T) {
	root := t.TempDir()
	copyTree(t, "../inventory/testdata/roce-ib", root)
	d := &Daemon{inv: inventory.Reader{Root: root}, log: slog.New(slog.DiscardHandler),
		store: state.NewStore(apitype.Snapshot{State: apitype.Running})}
	d.refresh("test")
	if got := d.store.Load().QoS; got == nil || len(got) != 0 {
		t.Errorf("QoS without an observer = %#v, want []", got)
	}
}

// TestQoSObserverDialError: when dcbnl cannot be opened, every RoCE netdev
// says so (logged once each), and the next refresh tries again.
func TestQoSObserverDialError(t *testing.T) {
	var logs syncBuffer
	dials := 0
	o := newQoSObserver(slog.New(slog.NewTextHandler(&logs, nil)), func() (*dcb.Conn, error) {
		dials++
		return nil, errors.New("dcb: open rtnetlink socket: permission denied")
	})
	devs := []apitype.Device{
		{Name: "mlx5_1", Ports: []apitype.Port{{Port: 1, LinkLayer: "Ethernet", Netdev: "ens2"}}},
		{Name: "mlx5_0", Ports: []apitype.Port{{Port: 1, LinkLayer: "Ethernet", Netdev: "ens1"}, {Port: 2, LinkLayer: "Ethernet", Netdev: "ens1"}}},
		{Name: "mlx4_0", Ports: []apitype.Port{{Port: 1, LinkLayer: "InfiniBand", Netdev: "ib0"}}},
	}
	o.read(devs)
	got := o.read(devs)
	if len(got) != 2 || got[0].Netdev != "ens1" || got[0].Device != "mlx5_0" || got[1].Netdev != "ens2" || got[0].Supported ||
		got[0].Error != "dcbnl unavailable, the DCB state cannot be read: dcb: open rtnetlink socket: permission denied" {
		t.Errorf("read = %+v; want ens1 (mlx5_0) and ens2, unsupported with the dial error, not ib0", got)
	}
	if dials != 2 {
		t.Errorf("dialled %d times over 2 reads, want 2 (retried)", dials)
	}
	if n := strings.Count(logs.String(), "unreadable"); n != 2 {
		t.Errorf("%d log lines, want 2 (one per netdev)\n%s", n, logs.String())
	}
	if got := o.read(nil); got == nil || len(got) != 0 || len(o.logged) != 0 {
		t.Errorf("no RoCE netdev: read = %#v, remembered %v; want [] and nothing", got, o.logged)
	}
}

// TestQoSOf: what qos.Observe read of an mlx5-like port (as the dcbnl
// reply decodes, see policy/dcb) becomes the status entry.
func TestQoSOf(t *testing.T) {
	ets := &dcb.ETS{Cap: 8}
	ets.PrioTC = [8]uint8{0, 0, 0, 3, 0, 0, 6, 0}
	for tc := range 8 {
		ets.TCTSA[tc] = dcb.TSAETS
	}
	ets.TCTSA[6] = dcb.TSAStrict
	ets.TCTxBW = [8]uint8{50, 0, 0, 50, 0, 0, 0, 0}
	ieee := &dcb.IEEE{Ifname: "ens1f0np0", ETS: ets, PFC: &dcb.PFC{Cap: 8, Enabled: 1 << 3, Delay: 7},
		Apps: []dcb.App{{Selector: dcb.SelectorDSCP, Protocol: 48, Priority: 6}, {Selector: dcb.SelectorDSCP, Protocol: 26, Priority: 3},
			{Selector: dcb.SelectorEthertype, Protocol: 0x8915, Priority: 4}},
		HasDCBX: true, DCBX: dcb.DCBXHost | dcb.DCBXVerIEEE}
	a := qos.Actual{Supported: true, Trust: "dscp", PFC: []int{3},
		DSCPApps: []dcb.App{ieee.Apps[0], ieee.Apps[1]}, IEEE: ieee}
	got := qosOf(apitype.NetdevQoS{Netdev: "ens1f0np0", Device: "mlx5_0"}, a)
	want := apitype.NetdevQoS{Netdev: "ens1f0np0", Device: "mlx5_0", Supported: true, Trust: "dscp", DCBX: []string{"host", "ieee"},
		PFCEnabled: []int{3}, HasPFC: true, PFCCap: 8, PFCDelay: 7,
		DSCP: []apitype.DSCPPriority{{DSCP: 26, Priority: 3}, {DSCP: 48, Priority: 6}},
		ETS: &apitype.ETS{Cap: 8, PrioTC: []int{0, 0, 0, 3, 0, 0, 6, 0}, TCs: []apitype.TrafficClass{
			{TC: 0, TSA: "ets", Bandwidth: 50}, {TC: 1, TSA: "ets", Bandwidth: 0}, {TC: 2, TSA: "ets", Bandwidth: 0}, {TC: 3, TSA: "ets", Bandwidth: 50}, {TC: 4, TSA: "ets", Bandwidth: 0}, {TC: 5, TSA: "ets", Bandwidth: 0}, {TC: 6, TSA: "strict", Bandwidth: 0}, {TC: 7, TSA: "ets", Bandwidth: 0}}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("qosOf (-want +got):\n%s", diff)
	}
	// A driver with only an APP table: no PFC, no ETS, lists [].
	got = qosOf(apitype.NetdevQoS{Netdev: "x"}, qos.Actual{Supported: true, Trust: "pcp", IEEE: &dcb.IEEE{}})
	if got.HasPFC || got.ETS != nil || got.PFCEnabled == nil || got.DSCP == nil || got.DCBX == nil {
		t.Errorf("minimal driver: %+v; want no PFC, no ETS, [] lists", got)
	}
}
