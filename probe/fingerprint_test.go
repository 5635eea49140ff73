package probe

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/internal/syncbuf"
	"github.com/rdmad/rdmad/probe/ud"
	"github.com/rdmad/rdmad/probe/wire"
)

// fpSource is a node's fingerprint whose MTU and firmware a test changes.
type fpSource struct {
	mtu atomic.Uint32
	fw  atomic.Pointer[string]
}

func newFPSource(mtu uint32, fw string) *fpSource {
	s := &fpSource{}
	s.mtu.Store(mtu)
	s.fw.Store(&fw)
	return s
}

func (s *fpSource) build(ports []ud.LocalPort) wire.Fingerprint {
	f := wire.Fingerprint{Version: "test", Kernel: "6.1.0"}
	for i, lp := range ports {
		f.Ports = append(f.Ports, wire.FingerprintPort{Index: uint8(i), Key: lp.Key, NetdevMTU: s.mtu.Load(), ActiveMTU: 1024,
			LinkLayer: "Ethernet", FWVer: *s.fw.Load(), HasToS: true, ToS: 106, Trust: "dscp", PFC: "3"})
	}
	return f
}

// startNodeFP starts a node whose fingerprint comes from src.
func startNodeFP(t *testing.T, f *fabric, addr, other string, port int, id byte, src *fpSource) *node {
	t.Helper()
	var fp func([]ud.LocalPort) wire.Fingerprint
	if src != nil {
		fp = src.build
	}
	return startNodeFPFunc(t, f, addr, other, port, id, fp)
}

// startNodeFPFunc starts a node whose fingerprint comes from fp (nil: none).
func startNodeFPFunc(t *testing.T, f *fabric, addr, other string, port int, id byte, fp func([]ud.LocalPort) wire.Fingerprint) *node {
	t.Helper()
	n := &node{pr: f.newTransport(id), done: make(chan error, 1)}
	s := Settings{Peers: []Spec{{Name: other}}, Port: port, Interval: 100 * time.Millisecond, Timeout: 50 * time.Millisecond,
		Window: 20, MaxPeers: 8, Rotate: time.Hour, Resolve: time.Minute,
		Threshold: Thresholds{DownAfter: 3, UpAfter: 3, LossPct: 5, MinLosses: 2}}
	opts := Options{Transport: n.pr, NodeID: uint64(id), ListenHost: addr, Fingerprint: fp,
		OnState: func(ps apitype.Peers) { n.mu.Lock(); n.last = ps; n.mu.Unlock() }}
	m, err := New(opts, s)
	if err != nil {
		t.Fatal(err)
	}
	n.m = m
	n.pr.onReply = m.OnReply
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	go func() { n.done <- m.Run(ctx) }()
	return n
}

// waitPeer polls until ok(peer) holds.
func waitPeer(t *testing.T, n *node, name, what string, limit time.Duration, ok func(apitype.Peer) bool) apitype.Peer {
	t.Helper()
	start := time.Now()
	for time.Since(start) < limit {
		if p := n.peer(name); ok(p) {
			return p
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("peer %s after %v: %+v; want %s", name, limit, n.peer(name), what)
	return apitype.Peer{}
}

func hasMismatch(p apitype.Peer, field, local, remote, sev string) bool {
	for _, x := range p.Mismatches {
		if x.Field == field && x.Local == local && x.Peer == remote && x.Severity == sev && x.LocalPort == "fake0/1" && x.PeerPort == "fake0/1" {
			return true
		}
	}
	return false
}

// TestFingerprintMismatch runs two managers on loopback whose MTUs and
// firmware differ: each reports the other's values as mismatches, both
// stay up, and the mismatch clears when the MTU is aligned (the changed
// fingerprint reaches the peer in a query within a few intervals).
func TestFingerprintMismatch(t *testing.T) {
	port := freePort(t)
	f := &fabric{byQPN: map[uint32]*fakeTransport{}}
	srcA, srcB := newFPSource(1500, "22.39.1002"), newFPSource(4200, "22.36.1010")
	a := startNodeFP(t, f, "127.0.0.2", "127.0.0.3", port, 1, srcA)
	defer a.stop(t)
	b := startNodeFP(t, f, "127.0.0.3", "127.0.0.2", port, 2, srcB)
	defer b.stop(t)
	waitState(t, a, "127.0.0.3", apitype.PeerUp, 5*time.Second)
	p := waitPeer(t, a, "127.0.0.3", "an MTU mismatch", 5*time.Second, func(p apitype.Peer) bool { return len(p.Mismatches) > 0 })
	if !hasMismatch(p, FieldMTU, "1500", "4200", apitype.SeverityMust) || !hasMismatch(p, FieldFirmware, "22.39.1002", "22.36.1010", apitype.SeverityInfo) || len(p.Mismatches) != 2 {
		t.Errorf("a's mismatches with b = %+v; want mtu 1500/4200 (must) and firmware (info) only", p.Mismatches)
	}
	if p.FingerprintUnknown || p.Fingerprint == nil || len(p.Fingerprint.Ports) != 1 || p.Fingerprint.Ports[0].MTU != 4200 || p.Fingerprint.Kernel != "6.1.0" {
		t.Errorf("a's view of b's fingerprint = %+v unknown %v", p.Fingerprint, p.FingerprintUnknown)
	}
	q := waitPeer(t, b, "127.0.0.2", "an MTU mismatch", 5*time.Second, func(p apitype.Peer) bool { return hasMismatch(p, FieldMTU, "4200", "1500", apitype.SeverityMust) })
	if q.State != apitype.PeerUp && q.State != apitype.PeerUnknown {
		t.Errorf("b's view of a: %s; a mismatch must not change the peer's state", q.State)
	}
	a.mu.Lock()
	own := a.last.Fingerprint
	a.mu.Unlock()
	if own == nil || len(own.Ports) != 1 || own.Ports[0].MTU != 1500 {
		t.Errorf("a's own fingerprint in status = %+v", own)
	}

	// Align b's MTU: a learns it from b's next query or answer.
	srcB.mtu.Store(1500)
	start := time.Now()
	p = waitPeer(t, a, "127.0.0.3", "no MTU mismatch", 3*fingerprintEvery, func(p apitype.Peer) bool {
		return !hasMismatch(p, FieldMTU, "1500", "4200", apitype.SeverityMust) && len(p.Mismatches) == 1
	})
	t.Logf("MTU aligned -> mismatch cleared after %v", time.Since(start))
	if !hasMismatch(p, FieldFirmware, "22.39.1002", "22.36.1010", apitype.SeverityInfo) {
		t.Errorf("after aligning the MTU: %+v; want the firmware mismatch only", p.Mismatches)
	}
}

// TestFingerprintOldPeers: a version-1 peer and a version-2 peer without a
// fingerprint are still probed and come up, with the fingerprint unknown
// and no mismatch.
func TestFingerprintOldPeers(t *testing.T) {
	t.Run("version 1", func(t *testing.T) {
		port := freePort(t)
		f := &fabric{byQPN: map[uint32]*fakeTransport{}}
		a := startNodeFP(t, f, "127.0.0.2", "127.0.0.3", port, 1, newFPSource(1500, "x"))
		defer a.stop(t)
		old := f.newTransport(3)
		v1Node(t, f, old, "127.0.0.3", port)
		waitState(t, a, "127.0.0.3", apitype.PeerUp, 5*time.Second)
		p := a.peer("127.0.0.3")
		if p.WireVersion != 1 || !p.FingerprintUnknown || p.Fingerprint != nil || len(p.Mismatches) != 0 {
			t.Errorf("version-1 peer = %+v; want wire v1, fingerprint unknown, no mismatch", p)
		}
	})
	t.Run("version 2 without a fingerprint", func(t *testing.T) {
		port := freePort(t)
		f := &fabric{byQPN: map[uint32]*fakeTransport{}}
		a := startNodeFP(t, f, "127.0.0.2", "127.0.0.3", port, 1, newFPSource(1500, "x"))
		defer a.stop(t)
		b := startNodeFP(t, f, "127.0.0.3", "127.0.0.2", port, 2, nil) // an rdmad before fingerprints
		defer b.stop(t)
		waitState(t, a, "127.0.0.3", apitype.PeerUp, 5*time.Second)
		waitState(t, b, "127.0.0.2", apitype.PeerUp, 5*time.Second)
		time.Sleep(300 * time.Millisecond)
		p := a.peer("127.0.0.3")
		if p.WireVersion != 2 || !p.FingerprintUnknown || len(p.Mismatches) != 0 {
			t.Errorf("v2 peer without a fingerprint = %+v; want unknown, no mismatch", p)
		}
		// The old node skipped a's fingerprint and still answered.
		if q := b.peer("127.0.0.2"); q.State != apitype.PeerUp || len(q.Mismatches) != 0 {
			t.Errorf("old node's view = %+v", q)
		}
	})
}

// TestControlFingerprintSize: an answer carries the fingerprint only when
// it is no larger than the query plus a tag, so a bare 64-byte query gets
// a bare answer (no amplification), and a padded query gets it.
func TestControlFingerprintSize(t *testing.T) {
	port := freePort(t)
	fp := (&wire.Fingerprint{Version: "v", Ports: []wire.FingerprintPort{{Key: "fake0/1", NetdevMTU: 9000, FWVer: "1.2.3", Driver: "mlx5_core 24.01-0.3.3"}}, Kernel: "6.1.0-18-amd64"}).Marshal()
	if wire.Size+4+len(fp) <= wire.Size+wire.TagSize {
		t.Fatalf("a fingerprint of %d bytes would fit a bare answer; the test needs a larger one", len(fp))
	}
	ctl, err := ListenControl(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), uint16(port)).String(), ControlOptions{
		NodeID: 7,
		Ports: func() []ud.LocalPort {
			return []ud.LocalPort{{Key: "fake0/1", Endpoint: ud.Endpoint{QPN: 0x21, QKey: 5}}}
		},
		Admit: func(string, ud.Endpoint, netip.Addr, bool, time.Time) error { return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	ctl.SetAllow([]netip.Addr{netip.MustParseAddr("127.0.0.3")}, nil)
	ctl.SetFingerprint(fp)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go ctl.Serve(ctx)
	c := udpFrom(t, "127.0.0.3", 0)
	to := ctl.Addr()
	for _, tc := range []struct {
		name   string
		ext    []wire.Ext
		wantFP bool
	}{
		{"bare query", nil, false},
		{"padded query", wire.WithFingerprint(nil), true},
	} {
		q := wire.Message{Version: 2, Type: wire.TypeQuery, Nonce: 9, Count: 1, QPN: 0x31, QKey: 6, Ext: tc.ext}
		qb, _ := q.Append(nil, nil)
		c.WriteToUDPAddrPort(qb, to)
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		buf := make([]byte, wire.MaxSize+1)
		n, _, err := c.ReadFromUDPAddrPort(buf)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if n > len(qb)+wire.TagSize {
			t.Errorf("%s: answer of %d bytes to a query of %d", tc.name, n, len(qb))
		}
		a, err := wire.Decode(buf[:n], nil)
		if err != nil {
			t.Fatal(err)
		}
		got, ok, err := a.Fingerprint()
		if ok != tc.wantFP || err != nil || (ok && got.Ports[0].NetdevMTU != 9000) {
			t.Errorf("%s: fingerprint %+v ok %v err %v; want ok %v", tc.name, got, ok, err, tc.wantFP)
		}
	}
}

// TestLocalFingerprint builds a fingerprint from a snapshot and a fake
// sysfs: MTU from the netdev, firmware and link layer from the inventory,
// driver from the bus device's driver link, RoCE and QoS from the policy
// targets' observed values.
func TestLocalFingerprint(t *testing.T) {
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "sys/class/net/ens1f0"), 0o755))
	must(os.WriteFile(filepath.Join(root, "sys/class/net/ens1f0/mtu"), []byte("4200\n"), 0o644))
	dev := filepath.Join(root, "sys/devices/pci0000:00/0000:3b:00.0")
	must(os.MkdirAll(filepath.Join(root, "sys/bus/pci/drivers/mlx5_core"), 0o755))
	must(os.MkdirAll(filepath.Join(root, "sys/module/mlx5_core"), 0o755))
	must(os.WriteFile(filepath.Join(root, "sys/module/mlx5_core/version"), []byte("24.01-0.3.3\n"), 0o644))
	must(os.Symlink(filepath.Join(root, "sys/module/mlx5_core"), filepath.Join(root, "sys/bus/pci/drivers/mlx5_core/module")))
	must(os.MkdirAll(dev, 0o755))
	must(os.Symlink(filepath.Join(root, "sys/bus/pci/drivers/mlx5_core"), filepath.Join(dev, "driver")))
	must(os.MkdirAll(filepath.Join(root, "sys/class/infiniband/mlx5_0"), 0o755))
	must(os.Symlink(dev, filepath.Join(root, "sys/class/infiniband/mlx5_0/device")))

	snap := &apitype.Snapshot{Version: "1.2.3",
		Devices: []apitype.Device{{Name: "mlx5_0", FWVer: "22.39.1002", Ports: []apitype.Port{{Port: 1, LinkLayer: "Ethernet", Netdev: "ens1f0", RateGbps: 2.5}}}},
		Policy: apitype.PolicyState{Policies: []apitype.PolicyStatus{{Name: "roce", Targets: []apitype.Target{
			{Kind: "roce", Object: "mlx5_0/1", Actual: "tos=106 mode=v2", State: apitype.InSync},
			{Kind: "qos", Object: "ens1f0", Actual: "trust=dscp pfc=3,4", State: apitype.Drifted},
		}}}}}
	ports := []ud.LocalPort{{Key: "mlx5_0/1", Device: "mlx5_0", Port: 1, LinkLayer: "Ethernet"}, {Key: "rxe0/1", Device: "rxe0", Port: 1}}
	var asked []int
	f := LocalFingerprint(snap, ports, root, "6.1.0-18", func(dev string, port, netdevMTU int) int {
		asked = append(asked, netdevMTU)
		if dev == "mlx5_0" {
			return 4096
		}
		return 0
	})
	want := wire.FingerprintPort{Index: 0, Key: "mlx5_0/1", Netdev: "ens1f0", NetdevMTU: 4200, ActiveMTU: 4096, LinkLayer: "Ethernet",
		FWVer: "22.39.1002", Driver: "mlx5_core 24.01-0.3.3", HasToS: true, ToS: 106, RoCEMode: "v2", Trust: "dscp", PFC: "3,4", RateMbps: 2500}
	if f.Version != "1.2.3" || f.Kernel != "6.1.0-18" || len(f.Ports) != 2 || f.Ports[0] != want {
		t.Fatalf("fingerprint = %+v\nwant port 0 %+v", f, want)
	}
	if p := f.Ports[1]; p.Index != 1 || p.Key != "rxe0/1" || p.NetdevMTU != 0 || p.Driver != "" || p.HasToS {
		t.Errorf("port without inventory = %+v; want unknowns", p)
	}
	if len(asked) != 2 || asked[0] != 4200 {
		t.Errorf("active MTU asked with netdev MTUs %v", asked)
	}
	// Without the port's rate in the inventory, the netdev's speed (RoCE).
	snap.Devices[0].Ports[0].RateGbps = 0
	must(os.WriteFile(filepath.Join(root, "sys/class/net/ens1f0/speed"), []byte("100000\n"), 0o644))
	if f := LocalFingerprint(snap, ports, root, "6.1.0-18", nil); f.Ports[0].RateMbps != 100000 {
		t.Errorf("rate from the netdev speed = %d Mb/s; want 100000", f.Ports[0].RateMbps)
	}
	must(os.WriteFile(filepath.Join(root, "sys/class/net/ens1f0/speed"), []byte("-1\n"), 0o644))
	if f := LocalFingerprint(snap, ports, root, "6.1.0-18", nil); f.Ports[0].RateMbps != 0 {
		t.Errorf("a netdev without a speed: rate %d; want unknown", f.Ports[0].RateMbps)
	}
}

// TestCompareRate (#25 item 4): the link rate is compared as a warn, shown
// in Gb/s; a peer that predates the field (no rate) compares nothing.
func TestCompareRate(t *testing.T) {
	l := wire.FingerprintPort{Key: "a/1", LinkLayer: "Ethernet", RateMbps: 100000}
	r := wire.FingerprintPort{Key: "b/1", LinkLayer: "Ethernet", RateMbps: 25000}
	got := compareFingerprint(&l, &r)
	if len(got) != 1 || got[0].Field != FieldRate || got[0].Severity != apitype.SeverityWarn || got[0].Local != "100 Gb/s" || got[0].Peer != "25 Gb/s" {
		t.Errorf("compare = %+v; want rate 100 Gb/s vs 25 Gb/s, severity warn", got)
	}
	r.RateMbps = 2500
	if got := compareFingerprint(&l, &r); len(got) != 1 || got[0].Peer != "2.5 Gb/s" {
		t.Errorf("compare = %+v; want 2.5 Gb/s", got)
	}
	old := r
	old.RateMbps = 0
	if got := compareFingerprint(&l, &old); len(got) != 0 {
		t.Errorf("an old peer without a rate: %+v; want nothing compared", got)
	}
	if !slices.Contains(apitype.MismatchFields, FieldRate) {
		t.Errorf("MismatchFields %v lacks %q", apitype.MismatchFields, FieldRate)
	}
	// The state shows it in Gb/s.
	st := fingerprintState(&wire.Fingerprint{Ports: []wire.FingerprintPort{r}})
	if st.Ports[0].RateGbps != 2.5 {
		t.Errorf("state rate %v; want 2.5", st.Ports[0].RateGbps)
	}
}

// TestFingerprintObservedQoS: without a QoS policy, the trust and PFC a
// netdev runs (status qos[], read over dcbnl) are in the fingerprint,
// written as a policy target writes them, so two nodes compare whether or
// not a policy manages them; a netdev without dcbnl stays unknown, and a
// policy's observed values come first.
func TestFingerprintObservedQoS(t *testing.T) {
	snap := &apitype.Snapshot{
		Devices: []apitype.Device{
			{Name: "mlx5_0", Ports: []apitype.Port{{Port: 1, LinkLayer: "Ethernet", Netdev: "ens1f0"}}},
			{Name: "mlx5_1", Ports: []apitype.Port{{Port: 1, LinkLayer: "Ethernet", Netdev: "ens1f1"}}},
			{Name: "rxe0", Ports: []apitype.Port{{Port: 1, LinkLayer: "Ethernet", Netdev: "eth0"}}},
		},
		QoS: []apitype.NetdevQoS{
			{Netdev: "ens1f0", Supported: true, Trust: "dscp", HasPFC: true, PFCEnabled: []int{3, 4}},
			{Netdev: "ens1f1", Supported: true, Trust: "pcp", HasPFC: true},
			{Netdev: "eth0", Supported: false, Error: "no dcbnl"},
		},
	}
	ports := []ud.LocalPort{{Key: "mlx5_0/1", Device: "mlx5_0", Port: 1}, {Key: "mlx5_1/1", Device: "mlx5_1", Port: 1}, {Key: "rxe0/1", Device: "rxe0", Port: 1}}
	f := LocalFingerprint(snap, ports, t.TempDir(), "6.1", nil)
	for i, want := range []struct{ trust, pfc string }{{"dscp", "3,4"}, {"pcp", "none"}, {"", ""}} {
		if p := f.Ports[i]; p.Trust != want.trust || p.PFC != want.pfc {
			t.Errorf("%s: trust %q pfc %q, want %q %q", p.Key, p.Trust, p.PFC, want.trust, want.pfc)
		}
	}

	snap.Policy = apitype.PolicyState{Policies: []apitype.PolicyStatus{{Name: "q", Targets: []apitype.Target{
		{Kind: "qos", Object: "ens1f0", Actual: "trust=pcp pfc=3", State: apitype.InSync}}}}}
	if p := LocalFingerprint(snap, ports, t.TempDir(), "6.1", nil).Ports[0]; p.Trust != "pcp" || p.PFC != "3" {
		t.Errorf("with a policy: trust %q pfc %q, want the target's pcp 3", p.Trust, p.PFC)
	}
}

// TestCompareNode: the kernel release and rdmad's version are compared once
// per peer, informational, on the ports "node"; an unknown is not a
// mismatch.
func TestCompareNode(t *testing.T) {
	l := &wire.Fingerprint{Kernel: "6.1.0-18", Version: "0.2.0"}
	got := compareNode(l, &wire.Fingerprint{Kernel: "6.12.4", Version: "0.2.0"})
	want := []apitype.Mismatch{{Field: FieldKernel, Local: "6.1.0-18", Peer: "6.12.4", Severity: apitype.SeverityInfo, LocalPort: "node", PeerPort: "node"}}
	if !slices.Equal(got, want) {
		t.Errorf("kernel differs: %+v, want %+v", got, want)
	}
	if got := compareNode(l, &wire.Fingerprint{Kernel: "6.1.0-18", Version: "0.3.0"}); len(got) != 1 || got[0].Field != FieldVersion || got[0].Peer != "0.3.0" {
		t.Errorf("version differs: %+v", got)
	}
	if got := compareNode(l, &wire.Fingerprint{}); len(got) != 0 {
		t.Errorf("unknowns compared: %+v", got)
	}
	for _, f := range []string{FieldKernel, FieldVersion} {
		if !slices.Contains(apitype.MismatchFields, f) {
			t.Errorf("%s is not in apitype.MismatchFields (the metric's label values)", f)
		}
	}
}

func TestCompareFingerprint(t *testing.T) {
	l := wire.FingerprintPort{Key: "a/1", NetdevMTU: 1500, ActiveMTU: 1024, LinkLayer: "Ethernet", HasToS: true, ToS: 106, Trust: "dscp", PFC: "3", Driver: "mlx5_core"}
	r := wire.FingerprintPort{Key: "b/1", NetdevMTU: 1500, ActiveMTU: 1024, LinkLayer: "Ethernet", HasToS: true, ToS: 0, Trust: "pcp", FWVer: "1.0"}
	got := compareFingerprint(&l, &r)
	if len(got) != 2 || got[0].Field != FieldRoCEToS || got[0].Local != "106" || got[0].Peer != "0" || got[1].Field != FieldTrust {
		t.Errorf("compare = %+v; want roce_tos 106/0 and trust (PFC, firmware and driver unknown on one side)", got)
	}
	if got := compareFingerprint(&l, &l); len(got) != 0 {
		t.Errorf("a port compared with itself: %+v", got)
	}
	// MTUs that differ are told, numbers formatted; agreeing ports (nearly
	// every answer) are compared without allocating.
	r2 := l
	r2.Key, r2.NetdevMTU, r2.ActiveMTU = "b/1", 4200, 4096
	if got := compareFingerprint(&l, &r2); len(got) != 2 || got[0].Field != FieldMTU || got[0].Local != "1500" || got[0].Peer != "4200" ||
		got[1].Field != FieldActiveMTU || got[1].Local != "1024" || got[1].Peer != "4096" {
		t.Errorf("compare = %+v; want mtu 1500/4200 and active_mtu 1024/4096", got)
	}
	r2.NetdevMTU, r2.ActiveMTU = 1500, 1024
	if a := testing.AllocsPerRun(100, func() { compareFingerprint(&l, &r2) }); a != 0 {
		t.Errorf("comparing agreeing ports allocates %v times", a)
	}
}

// TestFingerprintBeforeFirstAnswer: a node answers nobody until its
// fingerprint exists. A peer that got an answer without one would take it
// for an rdmad that predates fingerprints (FINGERPRINT UNKNOWN) until it
// asked again, minutes later; under load the first answers after a start
// used to go out before the first pass had computed it.
func TestFingerprintBeforeFirstAnswer(t *testing.T) {
	port := freePort(t)
	f := &fabric{byQPN: map[uint32]*fakeTransport{}}
	src := newFPSource(1500, "22.39.1002")
	release := make(chan struct{})
	var first sync.Once
	n := startNodeFPFunc(t, f, "127.0.0.3", "127.0.0.2", port, 3, func(ports []ud.LocalPort) wire.Fingerprint {
		first.Do(func() { <-release }) // the first look at the ports takes a while
		return src.build(ports)
	})
	defer n.stop(t)
	releaseOnce := sync.OnceFunc(func() { close(release) })
	defer releaseOnce() // before stop: a failure must not leave Run waiting

	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP("127.0.0.2")})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	to := &net.UDPAddr{IP: net.ParseIP("127.0.0.3"), Port: port}
	ask := func(nonce uint64, wait time.Duration) (wire.Message, bool) {
		t.Helper()
		// Padded as rdmad pads its queries: an answer is never larger
		// than its query, so only a padded one can carry a fingerprint.
		q := wire.Message{Version: 2, Type: wire.TypeQuery, Nonce: nonce, Count: 1, QPN: 0x22, QKey: 0x55, GID: [16]byte{15: 2}, NodeID: 2,
			Ext: []wire.Ext{{Type: wire.ExtPadding, Value: make([]byte, wire.MaxFingerprint)}}}
		b, err := q.Append(nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.WriteToUDP(b, to); err != nil {
			t.Fatal(err)
		}
		conn.SetReadDeadline(time.Now().Add(wait))
		buf := make([]byte, wire.MaxSize+1)
		k, _, err := conn.ReadFromUDP(buf)
		if err != nil {
			return wire.Message{}, false
		}
		a, err := wire.Decode(buf[:k], nil)
		if err != nil {
			t.Fatalf("answer does not decode: %v", err)
		}
		return a, true
	}
	// While the fingerprint is being computed: no answer, or one with it.
	for i := range 8 {
		if a, ok := ask(uint64(i+1), 50*time.Millisecond); ok && !hasExt(a, wire.ExtFingerprint) {
			t.Fatalf("answered query %d without its fingerprint while computing it: %+v", i+1, a)
		}
	}
	releaseOnce()
	deadline := time.Now().Add(10 * time.Second)
	for nonce := uint64(100); ; nonce++ {
		a, ok := ask(nonce, 200*time.Millisecond)
		if ok {
			if !hasExt(a, wire.ExtFingerprint) {
				t.Fatalf("first answer without a fingerprint: %+v", a)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no answer within 10s of the fingerprint being ready")
		}
	}
}

// TestFingerprintNotPrintableDropped performs #24's attack on a running
// node: its allowed peer's address sends queries whose fingerprint
// strings carry a bidi override, a C1 control and invalid UTF-8. Each
// query is counted as malformed, gets no answer, and nothing of it is
// stored: the peer's fingerprint stays unknown.
func TestFingerprintNotPrintableDropped(t *testing.T) {
	port := freePort(t)
	f := &fabric{byQPN: map[uint32]*fakeTransport{}}
	a := startNodeFP(t, f, "127.0.0.2", "127.0.0.3", port, 1, newFPSource(1500, "x"))
	defer a.stop(t)
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 3)})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	dst := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), uint16(port))
	bad := []string{"fw\u202e2001.22", "fw\u0085x", "fw\xc3("}
	send := func(fw string, nonce uint64) {
		key := "fake0/1"
		fp := append([]byte{0x10, byte(1 + len(key)), 0}, key...)
		fp = append(append(fp, 0x15, byte(len(fw))), fw...)
		q := wire.Message{Version: 2, Type: wire.TypeQuery, Nonce: nonce, Count: 1, QPN: 0x4242, QKey: 0x11, Ext: wire.WithFingerprint(fp)}
		b, err := q.Append(nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.WriteToUDPAddrPort(b, dst); err != nil {
			t.Fatal(err)
		}
	}
	good := func(fw string, nonce uint64) {
		t.Helper()
		// Sent again until taken: the endpoint may not be up yet.
		waitPeer(t, a, "127.0.0.3", "the good query's fingerprint", 5*time.Second, func(p apitype.Peer) bool {
			if p.Fingerprint != nil && len(p.Fingerprint.Ports) == 1 && p.Fingerprint.Ports[0].Firmware == fw {
				return true
			}
			nonce++
			send(fw, nonce)
			time.Sleep(50 * time.Millisecond)
			return false
		})
	}
	// A good query first: the endpoint is up and answers.
	good("fw-1", 1)
	for i, s := range bad {
		send(s, uint64(1000+i))
	}
	// Answers to the good queries may still come; none to a hostile one.
	buf := make([]byte, wire.MaxSize)
	for {
		conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		n, _, err := conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			break
		}
		if m, err := wire.Decode(buf[:n], nil); err == nil && m.Nonce >= 1000 {
			t.Errorf("a hostile query (nonce %d) was answered", m.Nonce)
		}
	}
	// A good query last: its fingerprint replaces the first (nothing of
	// the hostile ones came between), and the state is published with
	// the counters.
	good("fw-2", 500)
	a.mu.Lock()
	malformed := a.last.Counters.ControlMalformed
	a.mu.Unlock()
	if malformed != uint64(len(bad)) {
		t.Errorf("control_malformed = %d after %d hostile queries; want each counted", malformed, len(bad))
	}
}

// TestMismatchLogBounded performs #24 item 8's attack: without a fleet key,
// a spoofer of a peer's address sends queries whose fingerprint changes
// each time (here its kernel, 40 times in 0.4 s). The state follows every
// change, but the log has one line for the first change and then, when
// the interval is over, one for the state they led to, with the count of
// the changes it held back.
func TestMismatchLogBounded(t *testing.T) {
	port := freePort(t)
	f := &fabric{byQPN: map[uint32]*fakeTransport{}}
	var logs syncbuf.Buffer
	n := &node{pr: f.newTransport(1), done: make(chan error, 1)}
	s := Settings{Peers: []Spec{{Name: "127.0.0.3"}}, Port: port, Interval: 100 * time.Millisecond, Timeout: 50 * time.Millisecond,
		Window: 20, MaxPeers: 8, Rotate: time.Hour, Resolve: time.Minute,
		Threshold: Thresholds{DownAfter: 3, UpAfter: 3, LossPct: 5, MinLosses: 2}}
	m, err := New(Options{Transport: n.pr, NodeID: 1, ListenHost: "127.0.0.2", Fingerprint: newFPSource(1500, "x").build,
		Logger:  slog.New(slog.NewTextHandler(&logs, nil)),
		OnState: func(ps apitype.Peers) { n.mu.Lock(); n.last = ps; n.mu.Unlock() }}, s)
	if err != nil {
		t.Fatal(err)
	}
	const every = 800 * time.Millisecond
	m.fps.logEvery = every
	n.m = m
	n.pr.onReply = m.OnReply
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	go func() { n.done <- m.Run(ctx) }()
	defer n.stop(t)

	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 3)})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	dst := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), uint16(port))
	const changes = 40
	start := time.Now()
	for i := range changes {
		fp := wire.Fingerprint{Kernel: fmt.Sprintf("6.%d.0-spoofed", i)}
		q := wire.Message{Version: 2, Type: wire.TypeQuery, Nonce: uint64(i + 1), Count: 1, QPN: 0x4242, QKey: 0x11, Ext: wire.WithFingerprint(fp.Marshal())}
		b, _ := q.Append(nil, nil)
		conn.WriteToUDPAddrPort(b, dst)
		time.Sleep(10 * time.Millisecond)
	}
	last := fmt.Sprintf("6.%d.0-spoofed", changes-1)
	waitPeer(t, n, "127.0.0.3", "the last spoofed kernel in the state", 3*time.Second, func(p apitype.Peer) bool {
		return p.Fingerprint != nil && p.Fingerprint.Kernel == last
	})
	if time.Since(start) > every {
		t.Skipf("the burst took %v, longer than the interval: too slow a machine to tell", time.Since(start))
	}
	if got := strings.Count(logs.String(), "peer settings differ"); got != 1 {
		t.Errorf("%d 'peer settings differ' lines during a burst of %d changes; want 1:\n%s", got, changes, logs.String())
	}
	deadline := time.Now().Add(every + 2*time.Second)
	for strings.Count(logs.String(), "peer settings differ") < 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	out := logs.String()
	var final string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "peer settings differ") {
			final = l
		}
	}
	_, heldText, _ := strings.Cut(final, "mismatch_changes_unlogged=")
	held, _ := strconv.Atoi(strings.Fields(heldText + " x")[0])
	// The first change or two may come before the peer's first line
	// (the query that made it known): all but those are held.
	if strings.Count(out, "peer settings differ") != 2 || held < changes-3 || held > changes-1 || !strings.Contains(final, last) {
		t.Errorf("after the interval: want one more line with the last state (%s) and about %d changes unlogged:\n%s", last, changes-1, out)
	}
}
