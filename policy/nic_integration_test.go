package policy

import (
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/internal/testenv"
	"github.com/rdmad/rdmad/policy/nicq"
	"github.com/rdmad/rdmad/test/netnstest"
)

// TestIntegrationChannelsReconcile runs whole reconciler passes against
// the real kernel, inside a private namespace with a 4-queue veth: the
// channel counts a policy declares are set, an administrator's `ethtool
// -L` is drift that the next pass reverts, and rings and coalescing
// (which veth lacks) are unsupported, asked once.
func TestIntegrationChannelsReconcile(t *testing.T) {
	tool := testenv.Tool(t, "ethtool", "apt-get install ethtool (scripts/deps test installs it)")
	nsenter := testenv.Tool(t, "nsenter", "apt-get install util-linux")
	ns, h := netnstest.New(t)
	la := netlink.LinkAttrs{Name: "rq0", NumTxQueues: 4, NumRxQueues: 4}
	if err := h.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: "rq1", PeerNumTxQueues: 4, PeerNumRxQueues: 4}); err != nil {
		t.Fatalf("add veth rq0/rq1 with 4 queues: %v", err)
	}
	c, err := nicq.Dial(int(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := &Reconciler{log: slog.New(slog.NewTextHandler(io.Discard, nil)), now: time.Now,
		targets: map[string]entry{}, unsupported: map[string]int{}, nicUnsupported: map[string]int{}, nicq: c}
	decl := Declared{Rules: []Rule{{Name: "queues", Netdevs: []string{"rq0"}, NIC: map[string]nicq.Values{
		"channels": {"rx": 2, "tx": 3},
		"rings":    {"rx": 1024},
	}}}}

	// The reconciler lists the netdevs of its thread's namespace: run
	// each pass on a thread that is in the test's.
	pass := func() []apitype.PolicyStatus {
		t.Helper()
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		orig, err := netns.Get()
		if err != nil {
			t.Fatal(err)
		}
		defer orig.Close()
		if err := netns.Set(ns); err != nil {
			t.Fatal(err)
		}
		_, ps := r.Pass(decl, nil, nil, true)
		if err := netns.Set(orig); err != nil {
			runtime.LockOSThread() // keep the thread out of the pool: it is in the wrong namespace
			t.Fatalf("return to the original namespace: %v", err)
		}
		return ps
	}
	ethtool := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(nsenter, append([]string{"--net=/proc/self/fd/3", tool}, args...)...)
		cmd.ExtraFiles = []*os.File{netnstest.File(t, ns)}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("ethtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}

	ps := pass()
	if tg := findTarget(t, ps, "channels", "rq0"); tg.State != apitype.Applied || tg.Desired != "rx=2 tx=3" {
		t.Fatalf("first pass: channels %+v, want applied rx=2 tx=3", tg)
	}
	if rings := findTarget(t, ps, "rings", "rq0"); rings.State != apitype.Unsupported || !strings.Contains(rings.Error, "operation not supported") {
		t.Errorf("rings on veth: %+v, want unsupported with the kernel's answer", rings)
	}
	if out := ethtool("-l", "rq0"); !strings.Contains(out, "Current hardware settings:\nRX:\t\t2\nTX:\t\t3") {
		t.Errorf("ethtool -l after the pass:\n%s", out)
	}
	if tg := findTarget(t, pass(), "channels", "rq0"); tg.State != apitype.InSync {
		t.Errorf("second pass: %+v, want in-sync", tg)
	}

	ethtool("-L", "rq0", "rx", "4", "tx", "1")
	ps = pass()
	if tg := findTarget(t, ps, "channels", "rq0"); tg.State != apitype.Applied || tg.Drifts != 2 {
		t.Errorf("after ethtool -L: %+v, want applied again with 2 drifts", tg)
	}
	if out := ethtool("-l", "rq0"); !strings.Contains(out, "Current hardware settings:\nRX:\t\t2\nTX:\t\t3") {
		t.Errorf("ethtool -l after the revert:\n%s", out)
	}
	// Remembered for this link (TestNICEnforce counts that it is not
	// asked again).
	l, err := h.LinkByName("rq0")
	if err != nil {
		t.Fatal(err)
	}
	if idx, ok := r.nicUnsupported[targetKey("rings", "rq0")]; !ok || idx != l.Attrs().Index {
		t.Errorf("rings of rq0 remembered as unsupported at ifindex %d (%v), want %d", idx, ok, l.Attrs().Index)
	}
}
