package dcb_test

import (
	"errors"
	"strings"
	"syscall"
	"testing"

	"github.com/mdlayher/netlink"

	"github.com/rdmad/rdmad/policy/dcb"
	"github.com/rdmad/rdmad/test/netnstest"
)

// TestIntegrationErrors sends every request the package makes to the real
// kernel, in a private namespace holding a veth pair. veth has no
// dcbnl_ops, so dcb_doit answers EOPNOTSUPP; a name that does not exist is
// looked up first and answers ENODEV.
func TestIntegrationErrors(t *testing.T) {
	ns, h := netnstest.New(t)
	netnstest.Veth(t, h, "dcbv0", "dcbv1")
	c, err := dcb.Dial(&netlink.Config{NetNS: int(ns)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })

	ops := []struct {
		name string
		op   string
		call func(ifname string) error
	}{
		{"IEEE", "get IEEE", func(n string) error { _, err := c.IEEE(n); return err }},
		{"SetPFC", "set PFC", func(n string) error { return c.SetPFC(n, dcb.PFC{Cap: 8, Enabled: 1 << 3}) }},
		{"AddApps", "add APP entries", func(n string) error {
			return c.AddApps(n, []dcb.App{{Selector: dcb.SelectorDSCP, Protocol: 26, Priority: 3}})
		}},
		{"DelApps", "delete APP entries", func(n string) error {
			return c.DelApps(n, []dcb.App{{Selector: dcb.SelectorDSCP, Protocol: 26, Priority: 3}})
		}},
		{"SetTrust", "set APP trust", func(n string) error { return c.SetTrust(n, []uint8{dcb.SelectorDSCP}) }},
	}
	devs := []struct {
		ifname string
		want   syscall.Errno
	}{
		{"dcbv0", syscall.EOPNOTSUPP},
		{"nosuchdev0", syscall.ENODEV},
	}
	for _, o := range ops {
		for _, d := range devs {
			t.Run(o.name+"/"+d.ifname, func(t *testing.T) {
				err := o.call(d.ifname)
				if !errors.Is(err, d.want) {
					t.Fatalf("err = %v, want errors.Is %v", err, d.want)
				}
				var oe *dcb.OpError
				if !errors.As(err, &oe) {
					t.Fatalf("err = %T, want *dcb.OpError", err)
				}
				if oe.Op != o.op || oe.Ifname != d.ifname {
					t.Errorf("OpError{Op: %q, Ifname: %q}, want {%q, %q}", oe.Op, oe.Ifname, o.op, d.ifname)
				}
				wantMsg := "dcb: " + o.op + " on " + d.ifname + ": " + d.want.Error()
				if got := err.Error(); got != wantMsg {
					t.Errorf("Error() = %q, want %q", got, wantMsg)
				}
			})
		}
	}
}

// TestIntegrationNameTooLong checks that the kernel's own validation of
// DCB_ATTR_IFNAME (NLA_NUL_STRING of at most IFNAMSIZ-1 bytes) surfaces as
// an error naming the operation, not as a hang or a decode failure.
func TestIntegrationNameTooLong(t *testing.T) {
	ns, _ := netnstest.New(t)
	c, err := dcb.Dial(&netlink.Config{NetNS: int(ns)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	name := strings.Repeat("x", 40)
	_, err = c.IEEE(name)
	if !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ERANGE) {
		t.Fatalf("IEEE(%d-byte name) = %v, want EINVAL or ERANGE", len(name), err)
	}
}
