package mtu

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	mdnetlink "github.com/mdlayher/netlink"
	"github.com/mdlayher/netlink/nlenc"
	"github.com/mdlayher/netlink/nltest"
	"github.com/rdmad/rdmad/test/netnstest"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// testNetNS creates a private network namespace with the veth pair
// mtu0/mtu1 and returns it with a netlink handle bound to it.
func testNetNS(t *testing.T) (netns.NsHandle, *netlink.Handle) {
	t.Helper()
	ns, h := netnstest.New(t)
	netnstest.Veth(t, h, "mtu0", "mtu1")
	return ns, h
}

func openClient(t *testing.T, ns netns.NsHandle) *Client {
	t.Helper()
	c, err := Open(Options{NetNS: &ns})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestIntegrationSetObserve(t *testing.T) {
	ns, h := testNetNS(t)
	c := openClient(t, ns)

	if got, err := c.Observe("mtu0"); err != nil || got != 1500 {
		t.Fatalf("Observe(mtu0) = %d, %v; want the veth default 1500", got, err)
	}
	for _, want := range []int{9000, 1280, 65535, 68} {
		if err := c.Set("mtu0", want); err != nil {
			t.Fatalf("Set(mtu0, %d): %v", want, err)
		}
		got, err := c.Observe("mtu0")
		if err != nil || got != want {
			t.Errorf("Observe after Set(%d) = %d, %v", want, got, err)
		}
		// Cross-check with an independent reader.
		l, err := h.LinkByName("mtu0")
		if err != nil || l.Attrs().MTU != want {
			t.Errorf("kernel reports MTU %v (err %v), want %d", l.Attrs().MTU, err, want)
		}
	}
	lo, hi, err := c.Range("mtu0")
	if err != nil || lo != 68 || hi != 65535 {
		t.Errorf("Range(mtu0) = %d, %d, %v; want veth's 68, 65535", lo, hi, err)
	}
}

func TestIntegrationSetUnchangedSendsNothing(t *testing.T) {
	ns, _ := testNetNS(t)
	c := openClient(t, ns)
	if err := c.Set("mtu0", 4000); err != nil {
		t.Fatalf("Set: %v", err)
	}
	updates := make(chan netlink.LinkUpdate, 16)
	done := make(chan struct{})
	if err := netlink.LinkSubscribeWithOptions(updates, done, netlink.LinkSubscribeOptions{Namespace: &ns}); err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	defer func() {
		close(done)
		for range updates {
		}
	}()
	notified := func() bool {
		select {
		case <-updates:
			return true
		case <-time.After(200 * time.Millisecond):
			return false
		}
	}
	if err := c.Set("mtu0", 4000); err != nil {
		t.Fatalf("Set (same value): %v", err)
	}
	if notified() {
		t.Errorf("Set with the current MTU caused a link notification; reapplying must be silent")
	}
	if err := c.Set("mtu0", 4001); err != nil {
		t.Fatalf("Set (new value): %v", err)
	}
	if !notified() {
		t.Errorf("Set with a new MTU caused no link notification")
	}
}

func TestIntegrationSetErrors(t *testing.T) {
	ns, _ := testNetNS(t)
	c := openClient(t, ns)
	tests := []struct {
		name   string
		ifname string
		mtu    int
		errno  error
		want   string
	}{
		{"above max", "mtu0", 70000, unix.EINVAL, "mtu: set MTU 70000 on mtu0: out of range for this device (min 68, max 65535): invalid argument"},
		{"below min", "mtu0", 60, unix.EINVAL, "mtu: set MTU 60 on mtu0: out of range for this device (min 68, max 65535): invalid argument"},
		{"zero", "mtu0", 0, unix.EINVAL, "mtu: set MTU 0 on mtu0: MTU must be a positive 32-bit number: invalid argument"},
		{"no device", "nosuch0", 1500, unix.ENODEV, `mtu: set MTU 1500: no network interface "nosuch0": no such device`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := c.Set(tt.ifname, tt.mtu)
			if !errors.Is(err, tt.errno) {
				t.Fatalf("Set(%s, %d) = %v, want an error matching %v", tt.ifname, tt.mtu, err, tt.errno)
			}
			// The kernel may append an extended ack message; the part we
			// build must be exact.
			if !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("Set(%s, %d) error:\n got %q\nwant %q", tt.ifname, tt.mtu, err, tt.want)
			}
		})
	}
	if _, err := c.Observe("nosuch0"); !errors.Is(err, unix.ENODEV) {
		t.Errorf("Observe(nosuch0) = %v, want ENODEV", err)
	}
}

func TestParseLink(t *testing.T) {
	enc := func(attrs map[uint16]uint32) []byte {
		ae := mdnetlink.NewAttributeEncoder()
		ae.String(unix.IFLA_IFNAME, "x0")
		ae.Uint32(unix.IFLA_MTU, 9000)
		for typ, v := range attrs {
			ae.Uint32(typ, v)
		}
		b, err := ae.Encode()
		if err != nil {
			t.Fatalf("encode: %v", err)
		}
		return b
	}
	tests := []struct {
		name   string
		in     []byte
		lo, hi int
		err    bool
	}{
		{"both", enc(map[uint16]uint32{unix.IFLA_MIN_MTU: 68, unix.IFLA_MAX_MTU: 9216}), 68, 9216, false},
		{"no max", enc(map[uint16]uint32{unix.IFLA_MIN_MTU: 0, unix.IFLA_MAX_MTU: 0}), 0, 0, false},
		{"old kernel", enc(nil), 0, 0, false},
		{"truncated", []byte{8, 0, 50}, 0, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := parseLink(tt.in)
			wantMTU := 9000
			if tt.err {
				wantMTU = 0
			}
			if (err != nil) != tt.err || l.min != tt.lo || l.max != tt.hi || l.mtu != wantMTU {
				t.Errorf("parseLink = %+v, %v; want MTU %d, range %d, %d, error %v", l, err, wantMTU, tt.lo, tt.hi, tt.err)
			}
		})
	}
	if got := rangeText(0, 0); got != "min 0, no maximum" {
		t.Errorf("rangeText(0, 0) = %q", got)
	}
}

// TestOneConnection: Observe, Range and Set go over the one connection the
// Client keeps: RTM_GETLINK by name (index 0, IFLA_IFNAME) answers the MTU
// and the range, RTM_SETLINK (index, IFLA_MTU, acknowledged) sets it, and a
// refused MTU is explained with the range of the lookup and the kernel's
// extended acknowledgement, without asking again.
func TestOneConnection(t *testing.T) {
	var requests []string
	mtu := 1500
	conn := nltest.Dial(func(reqs []mdnetlink.Message) ([]mdnetlink.Message, error) {
		if len(reqs) != 1 {
			t.Fatalf("%d messages in one request", len(reqs))
		}
		req := reqs[0]
		if len(req.Data) < unix.SizeofIfInfomsg {
			t.Fatalf("request without its ifinfomsg: %+v", req)
		}
		index := int32(nlenc.NativeEndian().Uint32(req.Data[4:8]))
		ad, err := mdnetlink.NewAttributeDecoder(req.Data[unix.SizeofIfInfomsg:])
		if err != nil {
			t.Fatal(err)
		}
		var name string
		var setMTU uint32
		for ad.Next() {
			switch ad.Type() {
			case unix.IFLA_IFNAME:
				name = ad.String()
			case unix.IFLA_MTU:
				setMTU = ad.Uint32()
			default:
				t.Errorf("request attribute %d", ad.Type())
			}
		}
		switch {
		case req.Header.Type == unix.RTM_GETLINK && req.Header.Flags == mdnetlink.Request && index == 0:
			requests = append(requests, "get "+name)
			if name != "ens1f0np0" {
				return nltest.Error(int(unix.ENODEV), reqs)
			}
			ifi := make([]byte, unix.SizeofIfInfomsg)
			putIfIndex(ifi, 7)
			ae := mdnetlink.NewAttributeEncoder()
			ae.String(unix.IFLA_IFNAME, name)
			ae.Uint32(unix.IFLA_MTU, uint32(mtu))
			ae.Uint32(unix.IFLA_MIN_MTU, 68)
			ae.Uint32(unix.IFLA_MAX_MTU, 9978)
			attrs, err := ae.Encode()
			if err != nil {
				t.Fatal(err)
			}
			return []mdnetlink.Message{{
				Header: mdnetlink.Header{Type: unix.RTM_NEWLINK, Sequence: req.Header.Sequence, PID: req.Header.PID},
				Data:   append(ifi, attrs...),
			}}, nil
		case req.Header.Type == unix.RTM_SETLINK && req.Header.Flags == mdnetlink.Request|mdnetlink.Acknowledge && index == 7:
			requests = append(requests, fmt.Sprintf("set %d", setMTU))
			if setMTU > 9978 {
				// NLMSG_ERROR with NLM_F_ACK_TLVS: the errno, the
				// request's header (capped), NLMSGERR_ATTR_MSG.
				ae := mdnetlink.NewAttributeEncoder()
				ae.String(1, "mtu greater than device maximum")
				tlvs, err := ae.Encode()
				if err != nil {
					t.Fatal(err)
				}
				hdr := make([]byte, 16)
				nlenc.NativeEndian().PutUint32(hdr[0:4], 16)
				data := append(nlenc.Int32Bytes(-int32(unix.EINVAL)), hdr...)
				return []mdnetlink.Message{{
					Header: mdnetlink.Header{Type: mdnetlink.Error, Flags: mdnetlink.AcknowledgeTLVs | mdnetlink.Capped,
						Sequence: req.Header.Sequence, PID: req.Header.PID},
					Data: append(data, tlvs...),
				}}, nil
			}
			mtu = int(setMTU)
			return nltest.Error(0, reqs) // the acknowledgement
		}
		t.Errorf("unexpected request %+v", req)
		return nltest.Error(int(unix.EOPNOTSUPP), reqs)
	})
	c := newClient(conn)
	defer c.Close()

	if got, err := c.Observe("ens1f0np0"); err != nil || got != 1500 {
		t.Errorf("Observe = %d, %v; want 1500", got, err)
	}
	if lo, hi, err := c.Range("ens1f0np0"); err != nil || lo != 68 || hi != 9978 {
		t.Errorf("Range = %d, %d, %v; want 68, 9978", lo, hi, err)
	}
	if err := c.Set("ens1f0np0", 9000); err != nil || mtu != 9000 {
		t.Errorf("Set(9000): %v, MTU %d", err, mtu)
	}
	if err := c.Set("ens1f0np0", 9000); err != nil {
		t.Errorf("Set(9000) again: %v", err)
	}
	err := c.Set("ens1f0np0", 10000)
	const want = "mtu: set MTU 10000 on ens1f0np0: out of range for this device (min 68, max 9978): invalid argument: mtu greater than device maximum"
	if !errors.Is(err, unix.EINVAL) || err.Error() != want {
		t.Errorf("Set(10000):\n got %v\nwant %s", err, want)
	}
	if _, err := c.Observe("nosuch0"); !errors.Is(err, unix.ENODEV) || !strings.Contains(err.Error(), `no network interface "nosuch0"`) {
		t.Errorf("Observe(nosuch0) = %v, want ENODEV naming it", err)
	}
	wantReqs := []string{"get ens1f0np0", "get ens1f0np0", "get ens1f0np0", "set 9000", "get ens1f0np0", "get ens1f0np0", "set 10000", "get nosuch0"}
	if strings.Join(requests, ", ") != strings.Join(wantReqs, ", ") {
		t.Errorf("requests:\n got %q\nwant %q", requests, wantReqs)
	}
}
