package policy

import (
	"bytes"
	"encoding/binary"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mdlayher/genetlink"
	"github.com/mdlayher/genetlink/genltest"
	"github.com/mdlayher/netlink"
	"github.com/mdlayher/netlink/nltest"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/inventory/rdmares"
	"github.com/rdmad/rdmad/policy/nicq"
	"github.com/rdmad/rdmad/policy/rdmanl"
)

// ethtoolLo is an ethtool netlink whose netdev lo has channels (rx, tx
// up to 8) and neither rings nor coalescing (EOPNOTSUPP), as veth; it
// keeps what CHANNELS_SET writes and counts the requests per command.
type ethtoolLo struct {
	rx, tx uint32
	calls  map[uint8]int
}

func nlattr(typ uint16, v uint32) []byte {
	b := binary.NativeEndian.AppendUint16(nil, 8)
	b = binary.NativeEndian.AppendUint16(b, typ)
	return binary.NativeEndian.AppendUint32(b, v)
}

func (k *ethtoolLo) conn(t *testing.T) *nicq.Conn {
	t.Helper()
	fam := genetlink.Family{ID: 30, Version: 1, Name: "ethtool"}
	gc := genltest.Dial(genltest.ServeFamily(fam, func(greq genetlink.Message, nreq netlink.Message) ([]genetlink.Message, error) {
		if nreq.Header.Type == 0 {
			return nil, nil
		}
		k.calls[greq.Header.Command]++
		switch greq.Header.Command {
		case 17: // ETHTOOL_MSG_CHANNELS_GET
			data := bytes.Join([][]byte{nlattr(2, 8), nlattr(3, 8), nlattr(6, k.rx), nlattr(7, k.tx)}, nil)
			return []genetlink.Message{{Header: genetlink.Header{Command: 18, Version: 1}, Data: data}}, nil
		case 18: // ETHTOOL_MSG_CHANNELS_SET
			ad, err := netlink.NewAttributeDecoder(greq.Data)
			if err != nil {
				return nil, err
			}
			for ad.Next() {
				switch ad.Type() {
				case 6:
					k.rx = ad.Uint32()
				case 7:
					k.tx = ad.Uint32()
				}
			}
			return nil, ad.Err()
		}
		return nil, genltest.Error(int(syscall.EOPNOTSUPP))
	}))
	c, err := nicq.NewConn(gc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func nicReconciler(t *testing.T, k *ethtoolLo) *Reconciler {
	return &Reconciler{log: slog.New(slog.NewTextHandler(io.Discard, nil)), now: time.Now,
		targets: map[string]entry{}, unsupported: map[string]int{}, nicUnsupported: map[string]int{}, nicq: k.conn(t)}
}

func TestNICEnforce(t *testing.T) {
	k := &ethtoolLo{rx: 8, tx: 8, calls: map[uint8]int{}}
	r := nicReconciler(t, k)
	decl := Declared{Rules: []Rule{{Name: "queues", Netdevs: []string{"lo"}, NIC: map[string]nicq.Values{
		"channels": {"rx": 4, "tx": 2},
		"rings":    {"rx": 4096},
		"coalesce": {"adaptive_rx": 1},
	}}}}

	cs, _ := r.Pass(decl, nil, nil, false)
	if len(cs) != 1 || cs[0].Kind != "channels" || cs[0].From != "rx=8 tx=8" || cs[0].To != "rx=4 tx=2" || cs[0].Action != "apply" {
		t.Fatalf("diff = %+v, want one channels change rx=8 tx=8 -> rx=4 tx=2", cs)
	}
	if k.rx != 8 {
		t.Fatal("the diff changed the device")
	}

	_, ps := r.Pass(decl, nil, nil, true)
	if tg := findTarget(t, ps, "channels", "lo"); tg.State != apitype.Applied || tg.Actual != "rx=4 tx=2" {
		t.Errorf("channels target = %+v, want applied", tg)
	}
	if k.rx != 4 || k.tx != 2 {
		t.Errorf("device has rx=%d tx=%d, want 4 and 2", k.rx, k.tx)
	}
	for _, kind := range []string{"rings", "coalesce"} {
		tg := findTarget(t, ps, kind, "lo")
		if tg.State != apitype.Unsupported || !strings.Contains(tg.Error, "operation not supported") || !strings.Contains(tg.Error, "cannot be managed on lo") {
			t.Errorf("%s target = %+v, want unsupported with the kernel's answer", kind, tg)
		}
	}

	// An outside ethtool -L: drift, set back. Rings and coalescing are
	// not asked again.
	k.rx = 1
	rings, coal := k.calls[15], k.calls[19]
	_, ps = r.Pass(decl, nil, nil, true)
	if tg := findTarget(t, ps, "channels", "lo"); tg.State != apitype.Applied || tg.Drifts != 2 || k.rx != 4 {
		t.Errorf("after drift: target %+v, device rx=%d; want applied again, 2 drifts, rx=4", tg, k.rx)
	}
	if k.calls[15] != rings || k.calls[19] != coal {
		t.Errorf("unsupported groups were asked again: rings %d -> %d, coalesce %d -> %d", rings, k.calls[15], coal, k.calls[19])
	}
	_, ps = r.Pass(decl, nil, nil, true)
	if tg := findTarget(t, ps, "channels", "lo"); tg.State != apitype.InSync {
		t.Errorf("third pass: %+v, want in-sync", tg)
	}

	// Beyond the driver's maximum: an error naming it, nothing sent.
	decl.Rules[0].NIC = map[string]nicq.Values{"channels": {"rx": 16}}
	sets := k.calls[18]
	_, ps = r.Pass(decl, nil, nil, true)
	if tg := findTarget(t, ps, "channels", "lo"); tg.State != apitype.TargetError || !strings.Contains(tg.Error, "16 is beyond the driver's maximum 8") {
		t.Errorf("rx=16: %+v, want an error naming the maximum", tg)
	}
	if k.calls[18] != sets {
		t.Error("a value beyond the maximum was sent")
	}
}

func TestFirmware(t *testing.T) {
	root := t.TempDir()
	for dev, v := range map[string]string{"mlx5_0": "22.39.1002\n", "mlx5_1": "22.38.1900\n"} {
		dir := filepath.Join(root, "sys", "class", "infiniband", dev)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "fw_ver"), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := &Reconciler{log: slog.New(slog.NewTextHandler(io.Discard, nil)), now: time.Now,
		targets: map[string]entry{}, unsupported: map[string]int{}, sysRoot: root}
	ports := []Port{{"mlx5_0", 1, ""}, {"mlx5_1", 1, ""}}
	decl := Declared{Rules: []Rule{{Name: "fw", Devices: []string{"mlx5_*"}, Firmware: ">=22.39.1002"}}}

	cs, _ := r.Pass(decl, ports, nil, false)
	if len(cs) != 1 || cs[0].Object != "mlx5_1" || cs[0].Action != "report" || cs[0].From != "22.38.1900" {
		t.Fatalf("diff = %+v, want one report for mlx5_1", cs)
	}
	_, ps := r.Pass(decl, ports, nil, true) // an enforcing policy: still only reported
	if tg := findTarget(t, ps, "firmware", "mlx5_0"); tg.State != apitype.InSync || tg.Actual != "22.39.1002" {
		t.Errorf("mlx5_0: %+v, want in-sync", tg)
	}
	tg := findTarget(t, ps, "firmware", "mlx5_1")
	if tg.State != apitype.Drifted || tg.Actual != "22.38.1900" || tg.Desired != ">=22.39.1002" || !strings.Contains(tg.Error, "rdmad does not flash firmware") {
		t.Errorf("mlx5_1: %+v, want drifted, saying rdmad does not flash", tg)
	}
	if tg.Applies != 0 {
		t.Errorf("firmware counted as applied: %+v", tg)
	}
}

// nldevFake answers RDMA_NLDEV_CMD_GET dumps with mlx5_0 (DIM as dim)
// and applies RDMA_NLDEV_CMD_SET's DEV_DIM, counting the dumps.
type nldevFake struct {
	dim    bool
	dumps  int
	shared bool
}

func (f *nldevFake) handle(reqs []netlink.Message) ([]netlink.Message, error) {
	req := reqs[0]
	attr := func(typ uint16, data []byte) []byte {
		b := binary.NativeEndian.AppendUint16(nil, uint16(4+len(data)))
		b = binary.NativeEndian.AppendUint16(b, typ)
		b = append(b, data...)
		for len(b)%4 != 0 {
			b = append(b, 0)
		}
		return b
	}
	switch req.Header.Type {
	case 5<<10 + 1: // RDMA_NLDEV_CMD_GET
		f.dumps++
		dim := byte(0)
		if f.dim {
			dim = 1
		}
		return nltest.Multipart([]netlink.Message{
			{Header: req.Header, Data: bytes.Join([][]byte{nlattr(1, 0), attr(2, []byte("mlx5_0\x00")), attr(84, []byte{dim})}, nil)},
			{Header: req.Header, Data: make([]byte, 4)},
		})
	case 5<<10 + 6: // RDMA_NLDEV_CMD_SYS_GET
		v := byte(0)
		if f.shared {
			v = 1
		}
		return []netlink.Message{{Header: req.Header, Data: attr(66, []byte{v})}}, nil
	case 5<<10 + 7: // RDMA_NLDEV_CMD_SYS_SET
		f.shared = bytes.Equal(req.Data, attr(66, []byte{1}))
		return []netlink.Message{{Header: netlink.Header{Type: netlink.Error, Sequence: req.Header.Sequence, PID: req.Header.PID}, Data: make([]byte, 4)}}, nil
	case 5<<10 + 2: // RDMA_NLDEV_CMD_SET
		f.dim = bytes.Contains(req.Data, attr(84, []byte{1}))
		return []netlink.Message{{Header: netlink.Header{Type: netlink.Error, Sequence: req.Header.Sequence, PID: req.Header.PID}, Data: make([]byte, 4)}}, nil
	}
	return nltest.Error(int(syscall.EOPNOTSUPP), reqs)
}

func TestDIMEnforce(t *testing.T) {
	f := &nldevFake{}
	c := rdmanl.NewConn(nltest.Dial(f.handle))
	defer c.Close()
	r := &Reconciler{log: slog.New(slog.NewTextHandler(io.Discard, nil)), now: time.Now,
		targets: map[string]entry{}, unsupported: map[string]int{}, rdma: c}
	on := true
	ports := []Port{{"mlx5_0", 1, ""}, {"mlx5_0", 2, ""}}
	decl := Declared{Rules: []Rule{{Name: "dim", Devices: []string{"mlx5_*"}, AdaptiveModeration: &on}}}

	cs, _ := r.Pass(decl, ports, nil, false)
	if len(cs) != 1 || cs[0].Kind != "rdma" || cs[0].From != "adaptive_moderation=off" || cs[0].To != "adaptive_moderation=on" {
		t.Fatalf("diff = %+v", cs)
	}
	_, ps := r.Pass(decl, ports, nil, true)
	if tg := findTarget(t, ps, "rdma", "mlx5_0"); tg.State != apitype.Applied || !f.dim {
		t.Errorf("target %+v, device DIM %v; want applied and on", tg, f.dim)
	}
	dumps := f.dumps
	_, ps = r.Pass(decl, ports, nil, true)
	if tg := findTarget(t, ps, "rdma", "mlx5_0"); tg.State != apitype.InSync {
		t.Errorf("second pass %+v, want in-sync", tg)
	}
	if f.dumps-dumps != 1 {
		t.Errorf("a pass dumped the devices %d times, want once", f.dumps-dumps)
	}

	// No RDMA core (this machine's kernel): unsupported, not an error.
	r2 := &Reconciler{log: r.log, now: time.Now, targets: map[string]entry{}, unsupported: map[string]int{}, rdmaErr: rdmares.ErrNoRDMA}
	_, ps = r2.Pass(decl, ports, nil, true)
	if tg := findTarget(t, ps, "rdma", "mlx5_0"); tg.State != apitype.Unsupported {
		t.Errorf("without RDMA netlink: %+v, want unsupported", tg)
	}
}

func TestNetnsModeEnforce(t *testing.T) {
	f := &nldevFake{shared: true}
	c := rdmanl.NewConn(nltest.Dial(f.handle))
	defer c.Close()
	r := &Reconciler{log: slog.New(slog.NewTextHandler(io.Discard, nil)), now: time.Now,
		targets: map[string]entry{}, unsupported: map[string]int{}, rdma: c}
	decl := Declared{RDMA: RDMASystem{NetnsMode: "exclusive"}}

	cs, _ := r.Pass(decl, nil, nil, false)
	if len(cs) != 1 || cs[0].Policy != "[rdma]" || cs[0].From != "shared" || cs[0].To != "exclusive" {
		t.Fatalf("diff = %+v", cs)
	}
	_, ps := r.Pass(decl, nil, nil, true)
	if tg := findTarget(t, ps, "rdma", "netns_mode"); tg.State != apitype.Applied || f.shared {
		t.Errorf("target %+v, kernel shared=%v; want applied, exclusive", tg, f.shared)
	}
	// A scoped pass keeps the node-wide target.
	_, ps = r.Pass(decl, nil, &Scope{Netdevs: map[string]bool{"lo": true}}, true)
	if tg := findTarget(t, ps, "rdma", "netns_mode"); tg.State != apitype.Applied {
		t.Errorf("after a scoped pass: %+v", tg)
	}
	// [rdma] removed: the target goes at the next full pass.
	_, ps = r.Pass(Declared{}, nil, nil, true)
	for _, p := range ps {
		if p.Name == "[rdma]" {
			t.Errorf("[rdma] still in status without netns_mode: %+v", p)
		}
	}
}
