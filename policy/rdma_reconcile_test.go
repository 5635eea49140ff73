package policy

import (
	"bytes"
	"encoding/binary"
	"log/slog"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mdlayher/netlink"
	"github.com/mdlayher/netlink/nltest"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/policy/rdmanl"
)

func rattr(typ uint16, data []byte) []byte {
	b := binary.NativeEndian.AppendUint16(nil, uint16(4+len(data)))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, data...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func ru32(v uint32) []byte { return binary.NativeEndian.AppendUint32(nil, v) }

// statDev is one RDMA device of statKernel: its counters (name: nil for
// an always-on one, else whether the optional counter is on) and its
// port 1's QP counter mode.
type statDev struct {
	index    uint32
	counters []string
	on       map[string]*bool
	mode     uint32 // RDMA_COUNTER_MODE_*
	qpRefuse bool   // STAT_SET of the mode answers EOPNOTSUPP, as a port without hardware counters does
	statuses int    // STAT_GET_STATUS requests
	sets     int    // STAT_SET requests
}

// statKernel answers RDMA_NLDEV_CMD_GET dumps and the statistics commands
// for its devices, port 1.
type statKernel struct{ devs map[string]*statDev }

func (k *statKernel) handle(reqs []netlink.Message) ([]netlink.Message, error) {
	req := reqs[0]
	reply := func(b []byte) ([]netlink.Message, error) {
		return []netlink.Message{{Header: req.Header, Data: b}}, nil
	}
	if req.Header.Type == 5<<10+1 { // RDMA_NLDEV_CMD_GET dump
		var ms []netlink.Message
		for name, d := range k.devs {
			ms = append(ms, netlink.Message{Header: req.Header, Data: bytes.Join([][]byte{rattr(1, ru32(d.index)), rattr(2, []byte(name+"\x00"))}, nil)})
		}
		return nltest.Multipart(append(ms, netlink.Message{Header: req.Header, Data: make([]byte, 4)}))
	}
	var d *statDev
	var name string
	ad, err := netlink.NewAttributeDecoder(req.Data)
	if err != nil {
		return nil, err
	}
	var mask uint32
	var hw []uint32
	hasHW, hasMode := false, false
	for ad.Next() {
		switch ad.Type() {
		case 1:
			for n, dd := range k.devs {
				if dd.index == ad.Uint32() {
					d, name = dd, n
				}
			}
		case 74:
			hasMode = true
		case 76:
			mask = ad.Uint32()
		case 80:
			hasHW = true
			ad.Nested(func(nad *netlink.AttributeDecoder) error {
				for nad.Next() {
					hw = append(hw, nad.Uint32())
				}
				return nil
			})
		}
	}
	if d == nil {
		return nltest.Error(int(syscall.EINVAL), reqs)
	}
	handle := bytes.Join([][]byte{rattr(1, ru32(d.index)), rattr(2, []byte(name+"\x00")), rattr(3, ru32(1))}, nil)
	switch req.Header.Type {
	case 5<<10 + 24: // STAT_GET_STATUS
		d.statuses++
		var entries [][]byte
		for i, c := range d.counters {
			e := [][]byte{rattr(82, []byte(c+"\x00")), rattr(94, ru32(uint32(i)))}
			if on := d.on[c]; on != nil {
				v := byte(0)
				if *on {
					v = 1
				}
				e = append(e, rattr(95, []byte{v}))
			}
			entries = append(entries, rattr(81|0x8000, bytes.Join(e, nil)))
		}
		return reply(append(handle, rattr(80|0x8000, bytes.Join(entries, nil))...))
	case 5<<10 + 17: // STAT_GET, QP mode
		b := append(handle, rattr(74, ru32(d.mode))...)
		if d.mode == 1 {
			b = append(b, rattr(76, ru32(1))...)
		}
		return reply(b)
	case 5<<10 + 16: // STAT_SET
		d.sets++
		if hasMode {
			if d.qpRefuse {
				return nltest.Error(int(syscall.EOPNOTSUPP), reqs)
			}
			d.mode = 0
			if mask != 0 {
				d.mode = 1
			}
		}
		if hasHW {
			for _, on := range d.on {
				if on != nil {
					*on = false
				}
			}
			for _, i := range hw {
				*d.on[d.counters[i]] = true
			}
		}
		return reply(handle)
	}
	return nltest.Error(int(syscall.EOPNOTSUPP), reqs)
}

func boolp(b bool) *bool { return &b }

func TestRDMACountersReconcile(t *testing.T) {
	mlx := &statDev{index: 3, counters: []string{"rx_write_requests", "cc_rx_ce_pkts", "cc_rx_cnp_pkts"},
		on: map[string]*bool{"cc_rx_ce_pkts": boolp(false), "cc_rx_cnp_pkts": boolp(true)}}
	rxe := &statDev{index: 7, counters: []string{"sent_pkts", "rcvd_pkts"}, qpRefuse: true}
	k := &statKernel{devs: map[string]*statDev{"mlx5_0": mlx, "rxe0": rxe}}
	c := rdmanl.NewConn(nltest.Dial(k.handle))
	defer c.Close()
	var logs bytes.Buffer
	r := &Reconciler{log: slog.New(slog.NewTextHandler(&logs, nil)), now: time.Now,
		targets: map[string]entry{}, unsupported: map[string]int{}, nicUnsupported: map[string]int{}, rdma: c}
	ports := []Port{{"mlx5_0", 1, ""}, {"rxe0", 1, ""}}
	decl := Declared{Rules: []Rule{{Name: "ctr", Devices: []string{"mlx5_*", "rxe*"}, OptionalCounters: &[]string{"cc_rx_ce_pkts"}, QPCounters: "auto"}}}

	// The plan: what enforcement would change, nothing recorded or set.
	cs, _ := r.Pass(decl, ports, nil, false)
	got := map[string]string{}
	for _, ch := range cs {
		got[ch.Kind+" "+ch.Object] = ch.From + " -> " + ch.To
	}
	want := map[string]string{
		"optional_counters mlx5_0/1": "optional_counters=cc_rx_cnp_pkts -> optional_counters=cc_rx_ce_pkts",
		"qp_counters mlx5_0/1":       "qp_counters=off -> qp_counters=auto",
		"qp_counters rxe0/1":         "qp_counters=off -> qp_counters=auto", // refused only when tried
	}
	if len(got) != len(want) {
		t.Errorf("diff = %v, want %v", got, want)
	}
	for key, w := range want {
		if got[key] != w {
			t.Errorf("diff %s = %q, want %q", key, got[key], w)
		}
	}
	if mlx.sets+rxe.sets != 0 || len(r.targets) != 0 {
		t.Fatalf("a diff set %d, recorded %d targets", mlx.sets+rxe.sets, len(r.targets))
	}

	_, ps := r.Pass(decl, ports, nil, true)
	if tg := findTarget(t, ps, "optional_counters", "mlx5_0/1"); tg.State != apitype.Applied || !*mlx.on["cc_rx_ce_pkts"] || *mlx.on["cc_rx_cnp_pkts"] {
		t.Errorf("mlx5_0/1 counters: %+v, kernel %v", tg, mlx.on)
	}
	if tg := findTarget(t, ps, "qp_counters", "mlx5_0/1"); tg.State != apitype.Applied || mlx.mode != 1 {
		t.Errorf("mlx5_0/1 QP counters: %+v, kernel mode %d", tg, mlx.mode)
	}
	tg := findTarget(t, ps, "optional_counters", "rxe0/1")
	if tg.State != apitype.Unsupported || !strings.Contains(tg.Error, "no optional counters") || !strings.Contains(tg.Error, "rxe0/1") {
		t.Errorf("rxe0/1 counters: %+v, want unsupported: no optional counters", tg)
	}
	if tg := findTarget(t, ps, "qp_counters", "rxe0/1"); tg.State != apitype.Unsupported || !strings.Contains(tg.Error, "not supported") {
		t.Errorf("rxe0/1 QP counters: %+v, want unsupported with the kernel's EOPNOTSUPP", tg)
	}

	// Steady: in sync, the refusals not asked again nor logged again.
	statuses, sets := rxe.statuses, rxe.sets
	for i := 0; i < 3; i++ {
		_, ps = r.Pass(decl, ports, nil, true)
	}
	for _, kind := range []string{"optional_counters", "qp_counters"} {
		if tg := findTarget(t, ps, kind, "mlx5_0/1"); tg.State != apitype.InSync {
			t.Errorf("%s mlx5_0/1 later: %+v, want in-sync", kind, tg)
		}
		if tg := findTarget(t, ps, kind, "rxe0/1"); tg.State != apitype.Unsupported {
			t.Errorf("%s rxe0/1 later: %+v, want unsupported", kind, tg)
		}
	}
	if rxe.statuses != statuses || rxe.sets != sets {
		t.Errorf("rxe0 asked again: %d status, %d set requests after the refusal", rxe.statuses-statuses, rxe.sets-sets)
	}
	if n := strings.Count(logs.String(), "policy setting unsupported here"); n != 2 {
		t.Errorf("%d unsupported log lines, want 2 (one per target):\n%s", n, logs.String())
	}

	// Drift: someone enables another optional counter; it is set back.
	*mlx.on["cc_rx_cnp_pkts"] = true
	_, ps = r.Pass(decl, ports, nil, true)
	if tg := findTarget(t, ps, "optional_counters", "mlx5_0/1"); tg.State != apitype.Applied || tg.Drifts != 2 || *mlx.on["cc_rx_cnp_pkts"] {
		t.Errorf("after an outside change: %+v, kernel %v; want applied again, 2 drifts", tg, mlx.on)
	}

	// rxe0 comes back (a new device index): asked afresh.
	rxe.index = 8
	r.Pass(decl, ports, nil, true)
	if rxe.statuses == statuses {
		t.Error("the new rxe0 was not asked for its counters")
	}

	// Observe: drifted, never set. "off" is satisfied by manual binding.
	mlx.mode = 2
	obs := Declared{Rules: []Rule{{Name: "ctr", Devices: []string{"mlx5_*"}, Observe: true, OptionalCounters: &[]string{}, QPCounters: "off"}}}
	sets = mlx.sets
	_, ps = r.Pass(obs, ports[:1], nil, true)
	if tg := findTarget(t, ps, "optional_counters", "mlx5_0/1"); tg.State != apitype.Drifted || tg.Desired != "optional_counters=none" {
		t.Errorf("observe: %+v, want drifted to none", tg)
	}
	if tg := findTarget(t, ps, "qp_counters", "mlx5_0/1"); tg.State != apitype.InSync || tg.Actual != "qp_counters=manual" {
		t.Errorf("observe off with manual binding: %+v, want in-sync", tg)
	}
	if mlx.sets != sets {
		t.Error("an observing policy set something")
	}
}

func TestResolveRDMAPortSettings(t *testing.T) {
	ports := []Port{{"mlx5_0", 1, "ens1f0"}, {"mlx5_0", 2, "ens1f1"}}
	d := Resolve([]Rule{
		{Name: "ctr", Devices: []string{"mlx5_*"}, OptionalCounters: &[]string{"cc_rx_ce_pkts"}, QPCounters: "auto"},
		{Name: "late", Netdevs: []string{"ens1f1"}, QPCounters: "off"},
	}, []string{"ens1f0", "ens1f1"}, ports)
	w0, w1 := d.Ports[ports[0]], d.Ports[ports[1]]
	if w0.RoCE || w0.QPCounters != "auto" || w0.Counters == nil || (*w0.Counters)[0] != "cc_rx_ce_pkts" {
		t.Errorf("mlx5_0/1: %+v", w0)
	}
	if w1.QPCounters != "off" || w1.QPSrc.Policy != "late" || w1.Counters == nil || w1.CountersSrc.Policy != "ctr" {
		t.Errorf("mlx5_0/2: %+v; want qp_counters from late, optional_counters from ctr", w1)
	}
	if len(d.Overridden) != 1 || d.Overridden[0] != (apitype.Override{Policy: "ctr", Kind: "qp_counters", Object: "mlx5_0/2", By: "late"}) {
		t.Errorf("overridden = %+v", d.Overridden)
	}
}
