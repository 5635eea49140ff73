package qos

import (
	"errors"
	"strings"
	"syscall"
	"testing"

	"github.com/mdlayher/netlink"

	"github.com/rdmad/rdmad/policy/dcb"
	"github.com/rdmad/rdmad/test/netnstest"
)

// TestIntegrationVethUnsupported talks to the real kernel: a veth pair in a
// private namespace has no dcbnl_ops, so every request answers EOPNOTSUPP,
// which must come out as the "unsupported" state and not a generic error.
func TestIntegrationVethUnsupported(t *testing.T) {
	ns, h := netnstest.New(t)
	netnstest.Veth(t, h, "qv0", "qv1")
	c, err := dcb.Dial(&netlink.Config{NetNS: int(ns)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	t.Run("Observe", func(t *testing.T) {
		a, err := Observe(c, "qv0")
		if !IsUnsupported(err) || !errors.Is(err, syscall.EOPNOTSUPP) || !errors.Is(err, ErrUnsupported) {
			t.Fatalf("Observe(qv0) = %v; want an unsupported error wrapping EOPNOTSUPP", err)
		}
		if a.Supported || a.Ifname != "qv0" {
			t.Errorf("Observe(qv0) Actual = %+v, want {Ifname: qv0, Supported: false}", a)
		}
		for _, part := range []string{"dcb: get IEEE on qv0: operation not supported", "leave it out of the QoS policy"} {
			if !strings.Contains(err.Error(), part) {
				t.Errorf("error %q lacks %q", err, part)
			}
		}
		if _, err := Plan(Desired{PFC: []int{3}}, a); !IsUnsupported(err) {
			t.Errorf("Plan on the unsupported Actual = %v, want unsupported", err)
		}
	})

	t.Run("Observe missing device", func(t *testing.T) {
		_, err := Observe(c, "qv9")
		if !errors.Is(err, syscall.ENODEV) || IsUnsupported(err) {
			t.Fatalf("Observe(qv9) = %v; want ENODEV, not unsupported", err)
		}
	})

	// Apply a plan made for a DCB-capable port to the veth: every step
	// reaches the kernel and fails, and the joined error still reads as
	// unsupported, naming each operation.
	t.Run("Apply", func(t *testing.T) {
		capable := actualFrom("qv0", &dcb.IEEE{
			PFC:        &dcb.PFC{Cap: 8},
			ETS:        &dcb.ETS{Cap: 8},
			Apps:       []dcb.App{{Selector: dcb.SelectorDSCP, Protocol: 26, Priority: 3}},
			TrustTable: true, Trust: []uint8{dcb.SelectorPCP},
		})
		ets := ETS{TSA: [8]string{"ets", "ets", "strict", "strict", "strict", "strict", "strict", "strict"}, BW: [8]int{50, 50}}
		changes, err := Plan(Desired{Trust: TrustDSCP, PFC: []int{3}, DSCPToPrio: map[int]int{46: 5}, ETS: &ets}, capable)
		if err != nil {
			t.Fatal(err)
		}
		err = Apply(c, "qv0", changes)
		if !IsUnsupported(err) {
			t.Fatalf("Apply on veth = %v, want unsupported", err)
		}
		for _, op := range []string{"add APP entries", "delete APP entries", "set ETS", "set PFC", "set APP trust"} {
			if !strings.Contains(err.Error(), "dcb: "+op+" on qv0: operation not supported") {
				t.Errorf("Apply error %q does not report %q", err, op)
			}
		}
	})
}
