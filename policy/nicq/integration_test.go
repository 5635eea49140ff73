package nicq

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/rdmad/rdmad/internal/testenv"
	"github.com/rdmad/rdmad/test/netnstest"
)

// queueVeth creates, in a private namespace, a veth pair with 4 RX and 4
// TX queues each: veth implements channels (its maximums are the queues
// it was created with) but neither rings nor coalescing.
func queueVeth(t *testing.T) (netns.NsHandle, *Conn) {
	t.Helper()
	ns, h := netnstest.New(t)
	la := netlink.LinkAttrs{Name: "nq0", NumTxQueues: 4, NumRxQueues: 4}
	if err := h.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: "nq1", PeerNumTxQueues: 4, PeerNumRxQueues: 4}); err != nil {
		t.Fatalf("add veth nq0/nq1 with 4 queues: %v", err)
	}
	c, err := Dial(int(ns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return ns, c
}

// ethtoolIn runs the ethtool command in ns, as an administrator would.
func ethtoolIn(t *testing.T, ns netns.NsHandle, args ...string) string {
	t.Helper()
	tool := testenv.Tool(t, "ethtool", "apt-get install ethtool (scripts/deps test installs it)")
	nsenter := testenv.Tool(t, "nsenter", "apt-get install util-linux")
	cmd := exec.Command(nsenter, append([]string{"--net=/proc/self/fd/3", tool}, args...)...)
	cmd.ExtraFiles = []*os.File{netnstest.File(t, ns)}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("ethtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestIntegrationChannelsVeth sets veth's channel counts, sees an outside
// `ethtool -L` as drift, and sets them back: the whole reconcile round
// against the real kernel.
func TestIntegrationChannelsVeth(t *testing.T) {
	ns, c := queueVeth(t)

	st, err := c.Get(Channels, "nq0")
	if err != nil {
		t.Fatalf("Get channels: %v", err)
	}
	// No combined channels: the kernel leaves out a parameter whose
	// maximum is 0 (ethtool's "n/a").
	if diff := cmp.Diff(State{Values: Values{"rx": 4, "tx": 4}, Max: Values{"rx": 4, "tx": 4}}, st); diff != "" {
		t.Fatalf("channels of a 4-queue veth (-want +got):\n%s", diff)
	}

	want := Values{"rx": 2, "tx": 3}
	round := func() Values {
		t.Helper()
		st, err := c.Get(Channels, "nq0")
		if err != nil {
			t.Fatal(err)
		}
		d, err := Plan(Channels, "nq0", want, st)
		if err != nil {
			t.Fatalf("Plan: %v", err)
		}
		if d != nil {
			if err := c.Set(Channels, "nq0", d); err != nil {
				t.Fatalf("Set %v: %v", d, err)
			}
		}
		return d
	}
	if d := round(); !cmp.Equal(d, Values{"rx": 2, "tx": 3}) {
		t.Errorf("first round set %v, want rx=2 tx=3", d)
	}
	if d := round(); d != nil {
		t.Errorf("second round set %v, want nothing", d)
	}
	out := ethtoolIn(t, ns, "-l", "nq0")
	if !strings.Contains(out, "Current hardware settings:\nRX:\t\t2\nTX:\t\t3") {
		t.Errorf("ethtool -l after the set does not show RX 2, TX 3:\n%s", out)
	}

	// An administrator changes them behind rdmad's back.
	ethtoolIn(t, ns, "-L", "nq0", "rx", "1", "tx", "4")
	if d := round(); !cmp.Equal(d, Values{"rx": 2, "tx": 3}) {
		t.Errorf("after ethtool -L the round set %v, want rx=2 tx=3 (both reverted)", d)
	}
	if st, _ := c.Get(Channels, "nq0"); st.Values["rx"] != 2 || st.Values["tx"] != 3 {
		t.Errorf("after revert: %v", st.Values)
	}
}

func TestIntegrationLimitsVeth(t *testing.T) {
	_, c := queueVeth(t)
	st, err := c.Get(Channels, "nq0")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Plan(Channels, "nq0", Values{"rx": 8}, st)
	if err == nil || !strings.Contains(err.Error(), "8 is beyond the driver's maximum 4") {
		t.Errorf("Plan rx=8 on a 4-queue veth = %v, want the limit named", err)
	}
	_, err = Plan(Channels, "nq0", Values{"combined": 2}, st)
	if !IsUnsupported(err) || !strings.Contains(err.Error(), "ethtool -l nq0 shows n/a") {
		t.Errorf("Plan combined=2 on veth = %v, want unsupported (veth has no combined channels)", err)
	}
	// Past rdmad's own check, the kernel's refusal carries its reason.
	err = c.Set(Channels, "nq0", Values{"rx": 8})
	if err == nil || !strings.Contains(err.Error(), "kernel: requested channel count exceeds maximum") {
		t.Errorf("Set rx=8 = %v, want the kernel's extended ack", err)
	}
}

func TestIntegrationUnsupportedVeth(t *testing.T) {
	_, c := queueVeth(t)
	for _, g := range []*Group{Rings, Coalesce} {
		_, err := c.Get(g, "nq0")
		if !IsUnsupported(err) {
			t.Errorf("Get %s of veth = %v, want unsupported", g.Kind, err)
			continue
		}
		if want := "nicq: get " + g.What + " of nq0: "; !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "not supported") {
			t.Errorf("Get %s error %q, want it to start %q and say not supported", g.Kind, err, want)
		}
	}
	if _, err := c.Get(Channels, "nq9"); err == nil || IsUnsupported(err) {
		t.Errorf("Get channels of a missing netdev = %v, want an error that is not unsupported", err)
	}
}
