package bus

import (
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/google/go-cmp/cmp"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon/access"
	"github.com/rdmad/rdmad/daemon/service"
	"github.com/rdmad/rdmad/daemon/service/servicetest"
)

// validBandwidthTestArgs is the oracle of BandwidthTest's arguments
// (target, options), written from docs/DBUS.md rather than from the
// handler: the options are loopback (b), op (s), size, duration_ms and
// qps (u), each optional, none of them empty or 0 when given, qps at most
// 16; the target is a peer's name, or with loopback "" or DEVICE[:PORT]
// (DEVICE/PORT too), the rest as servicetest.BandwidthOK.
func validBandwidthTestArgs(body []any) bool {
	target, opts := body[0].(string), body[1].(map[string]dbus.Variant)
	loopback, op, size, ms := false, "", 0, 0
	for k, v := range opts {
		switch x := v.Value().(type) {
		case bool:
			if k != "loopback" {
				return false
			}
			loopback = x
		case string:
			if k != "op" || x == "" {
				return false
			}
			op = x
		case uint32:
			switch {
			case x == 0:
				return false
			case k == "size":
				size = int(x)
			case k == "duration_ms":
				ms = int(x)
			case k == "qps":
				if x > 16 {
					return false
				}
			default:
				return false
			}
		default:
			return false
		}
	}
	d := time.Duration(ms) * time.Millisecond
	if !loopback {
		return servicetest.BandwidthOK(target, op, size, d)
	}
	if !servicetest.BandwidthOK("loopback", op, size, d) {
		return false
	}
	if target == "" {
		return true
	}
	dev, port, hasPort := strings.Cut(target, ":")
	if !hasPort {
		dev, port, hasPort = strings.Cut(target, "/")
	}
	if len(dev) < 1 || len(dev) > 64 || strings.Trim(dev, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-") != "" {
		return false
	}
	if hasPort {
		n, err := strconv.Atoi(port)
		return err == nil && n >= 1 && n <= 255
	}
	return true
}

func u32(n uint32) dbus.Variant { return dbus.MakeVariant(n) }

// TestBandwidthTestRequest: BandwidthTest's options become the request
// the socket's POST /v1/bw would make of the same parameters (loopback
// with a device and port, several QPs, the defaults for what is left out),
// and every bad target, unknown key, wrong type or value out of range is
// refused with a message naming it. The oracle agrees on every case.
func TestBandwidthTestRequest(t *testing.T) {
	def := service.DefaultBandwidthDuration
	ok := []struct {
		target string
		opts   map[string]dbus.Variant
		want   service.BandwidthRequest
	}{
		{"", map[string]dbus.Variant{"loopback": dbus.MakeVariant(true)},
			service.BandwidthRequest{Loopback: true, Op: "write", Size: 65536, Duration: def}},
		{"rxe0:1", map[string]dbus.Variant{"loopback": dbus.MakeVariant(true), "qps": u32(4), "op": dbus.MakeVariant("read"),
			"size": u32(4096), "duration_ms": u32(2000)},
			service.BandwidthRequest{Loopback: true, Device: "rxe0", Port: 1, Op: "read", Size: 4096, Duration: 2 * time.Second, QPs: 4}},
		{"mlx5_0/2", map[string]dbus.Variant{"loopback": dbus.MakeVariant(true), "qps": u32(16)},
			service.BandwidthRequest{Loopback: true, Device: "mlx5_0", Port: 2, Op: "write", Size: 65536, Duration: def, QPs: 16}},
		{"192.0.2.17", map[string]dbus.Variant{}, service.BandwidthRequest{Peer: "192.0.2.17", Op: "write", Size: 65536, Duration: def}},
		{"192.0.2.17", map[string]dbus.Variant{"loopback": dbus.MakeVariant(false), "qps": u32(8), "op": dbus.MakeVariant("send")},
			service.BandwidthRequest{Peer: "192.0.2.17", Op: "send", Size: 65536, Duration: def, QPs: 8}},
	}
	for _, tc := range ok {
		got, err := bandwidthTestRequest(tc.target, tc.opts)
		if err != nil {
			t.Errorf("BandwidthTest(%q, %v): %v", tc.target, tc.opts, err)
			continue
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("BandwidthTest(%q, %v): -want +got\n%s", tc.target, tc.opts, diff)
		}
		if !validBandwidthTestArgs([]any{tc.target, tc.opts}) {
			t.Errorf("BandwidthTest(%q, %v): accepted, but the oracle refuses it", tc.target, tc.opts)
		}
	}
	lb := dbus.MakeVariant(true)
	bad := []struct {
		target string
		opts   map[string]dbus.Variant
		want   string
	}{
		{"192.0.2.17", map[string]dbus.Variant{"qsp": u32(4)}, `unknown option "qsp"`},
		{"192.0.2.17", map[string]dbus.Variant{"size": dbus.MakeVariant(int32(4096))}, "option size is of type i; give it as u"},
		{"", map[string]dbus.Variant{"loopback": dbus.MakeVariant("true")}, "option loopback is of type s; give it as b"},
		{"", map[string]dbus.Variant{"loopback": dbus.MakeVariant(dbus.MakeVariant(true))}, "option loopback is of type v"},
		{"192.0.2.17", map[string]dbus.Variant{"qps": u32(17)}, "qps 17 is out of range"},
		{"192.0.2.17", map[string]dbus.Variant{"qps": u32(0)}, "option qps 0 is out of range"},
		{"192.0.2.17", map[string]dbus.Variant{"size": u32(0)}, "option size 0 is out of range"},
		{"192.0.2.17", map[string]dbus.Variant{"size": u32(2 << 20)}, "size 2097152 is out of range"},
		{"192.0.2.17", map[string]dbus.Variant{"duration_ms": u32(50)}, "duration 50ms is out of range"},
		{"192.0.2.17", map[string]dbus.Variant{"duration_ms": u32(3600000)}, "duration 1h0m0s is out of range"},
		{"192.0.2.17", map[string]dbus.Variant{"op": dbus.MakeVariant("fill")}, `op "fill": use write, read or send`},
		{"192.0.2.17", map[string]dbus.Variant{"op": dbus.MakeVariant("")}, `op "": use write, read or send`},
		{"", map[string]dbus.Variant{}, "say which peer"},
		{"-x", map[string]dbus.Variant{}, `peer "-x" is not an IP address`},
		{"rxe0:0", map[string]dbus.Variant{"loopback": lb}, `port "0" of rxe0 is not a port number`},
		{"bad name", map[string]dbus.Variant{"loopback": lb}, `device "bad name" is not an RDMA device name`},
		{"rxe0", map[string]dbus.Variant{"loopback": lb, "qps": u32(99)}, "qps 99 is out of range"},
	}
	for _, tc := range bad {
		_, err := bandwidthTestRequest(tc.target, tc.opts)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("BandwidthTest(%q, %v) = %v; want an error containing %q", tc.target, tc.opts, err, tc.want)
		}
		if validBandwidthTestArgs([]any{tc.target, tc.opts}) {
			t.Errorf("BandwidthTest(%q, %v): refused, but the oracle accepts it", tc.target, tc.opts)
		}
	}
}

// TestBandwidthRecordMirrorsJSON: BandwidthTest's result has a key for
// every field of POST /v1/bw's JSON answer, by the same name and with
// the same value, and no other key; a field added to
// apitype.BandwidthResult fails here until the record has it.
func TestBandwidthRecordMirrorsJSON(t *testing.T) {
	end := time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)
	res := apitype.BandwidthResult{Peer: "192.0.2.17", Address: "192.0.2.17", Loopback: true, QPs: 4, Op: "read", Size: 4096,
		Duration: 2 * time.Second, Elapsed: 2001 * time.Millisecond, Messages: 1000, Bytes: 4096000, Gbps: 16.4, MsgRate: 499.75,
		Local: "rxe0/1", Polling: "busy", Time: end, MinGbps: 20, Low: true}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var wire map[string]any
	if err := json.Unmarshal(b, &wire); err != nil {
		t.Fatal(err)
	}
	rec := bandwidthRecord(res)
	if diff := cmp.Diff(slices.Sorted(maps.Keys(wire)), slices.Sorted(maps.Keys(rec))); diff != "" {
		t.Fatalf("result keys: -JSON +record\n%s", diff)
	}
	for k, v := range rec {
		var got any
		switch x := v.Value().(type) {
		case uint32:
			got = float64(x)
		case uint64:
			got = float64(x)
		case int64:
			got = float64(x)
		default:
			got = x
		}
		want := wire[k]
		if k == "time" {
			want = float64(end.UnixMicro())
		}
		if !cmp.Equal(want, got) {
			t.Errorf("result key %s = %v (%s), JSON %v", k, v.Value(), v.Signature(), want)
		}
	}
	if sig := dbus.SignatureOf(rec).String(); sig != "a{sv}" {
		t.Errorf("result has type %s, want a{sv} as introspected", sig)
	}
}

// TestIntegrationBandwidthTest calls BandwidthTest as root on the private
// bus: a loopback test of a port with 4 QPs and a peer test with 8 reach
// the backend as exactly those requests and answer the result record;
// bad options are InvalidArgs naming the option and run nothing; a
// backend without bandwidth tests is NotSupported.
func TestIntegrationBandwidthTest(t *testing.T) {
	requireRoot(t)
	startBus(t, "")
	store := newStore()
	fb := &servicetest.Backend{Store: store}
	startRun(t, store, fb).waitFor(t, 0, apitype.OK, "")
	obj := rootConn(t).Object(Name, Path)
	call := func(target string, opts map[string]dbus.Variant) (map[string]dbus.Variant, error) {
		var res map[string]dbus.Variant
		err := obj.Call(Interface+".BandwidthTest", 0, target, opts).Store(&res)
		return res, err
	}

	res, err := call("rxe0:1", map[string]dbus.Variant{"loopback": dbus.MakeVariant(true), "qps": u32(4),
		"duration_ms": u32(2000), "op": dbus.MakeVariant("read")})
	if err != nil {
		t.Fatalf("BandwidthTest loopback: %v", err)
	}
	if g, l := res["gbps"].Value(), res["local"].Value(); g != 1.5 || l != "mlx5_0/1" {
		t.Errorf("BandwidthTest loopback: gbps %v, local %v; want the backend's 1.5 and mlx5_0/1 (result %v)", g, l, res)
	}
	if _, err := call("192.0.2.17", map[string]dbus.Variant{"qps": u32(8)}); err != nil {
		t.Fatalf("BandwidthTest to a peer with 8 QPs: %v", err)
	}
	want := []service.BandwidthRequest{
		{Loopback: true, Device: "rxe0", Port: 1, Op: "read", Size: 65536, Duration: 2 * time.Second, QPs: 4},
		{Peer: "192.0.2.17", Op: "write", Size: 65536, Duration: service.DefaultBandwidthDuration, QPs: 8},
	}
	if diff := cmp.Diff(want, fb.Requests()); diff != "" {
		t.Errorf("requests that reached the backend: -want +got\n%s", diff)
	}

	for _, tc := range []struct {
		opts map[string]dbus.Variant
		want string
	}{
		{map[string]dbus.Variant{"qsp": u32(4)}, `unknown option "qsp"`},
		{map[string]dbus.Variant{"qps": dbus.MakeVariant(int32(4))}, "option qps is of type i; give it as u"},
		{map[string]dbus.Variant{"loopback": dbus.MakeVariant(true), "qps": u32(64)}, "qps 64 is out of range"},
	} {
		_, err := call("rxe0", tc.opts)
		if !isDBusError(err, ErrInvalidArgs) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "e.g. BandwidthTest sa{sv}") {
			t.Errorf("BandwidthTest(rxe0, %v): %v; want %s saying %q with an example call", tc.opts, err, ErrInvalidArgs, tc.want)
		}
	}
	if err := obj.Call(Interface+".BandwidthTest", 0, "rxe0", "loopback").Err; !isDBusError(err, ErrInvalidArgs) {
		t.Errorf("BandwidthTest with a string for the options: %v; want %s", err, ErrInvalidArgs)
	}
	if n := fb.Count("Bandwidth"); n != 2 {
		t.Errorf("the backend ran %d tests; want the 2 good ones, none of the refused", n)
	}

	fb.SetErr("Bandwidth", errors.ErrUnsupported)
	if _, err := call("", map[string]dbus.Variant{"loopback": dbus.MakeVariant(true)}); !isDBusError(err, ErrNotSupported) {
		t.Errorf("BandwidthTest on a backend without tests: %v; want %s", err, ErrNotSupported)
	}
}

// TestIntegrationBandwidthTestAccess: BandwidthTest is admin level like
// Bandwidth (the same operation of daemon/access): nobody and a member
// of the socket group get AccessDenied and run nothing, an admin-group
// member runs the test, through the shipped bus policy.
func TestIntegrationBandwidthTestAccess(t *testing.T) {
	requireRoot(t)
	b := startBus(t, "")
	store := newStore()
	fb := &servicetest.Backend{Store: store}
	startWithRoles(t, store, fb, access.Roles{SelfUID: 0, ReadGID: access.GID(socketGroup), AdminGID: access.GID(adminGroup)})

	for _, who := range []struct {
		name string
		res  helperResult
	}{
		{"nobody", b.asNobody("bandwidthtest", "rxe0:1")},
		{"socket group", b.asUser(readerUID, readerGID, []int{socketGroup}, "bandwidthtest", "rxe0:1")},
	} {
		// rdmad's refusal, from its access table: the bus's own
		// ("Rejected send message") would mean the policy file does not
		// let the method through to rdmad, whatever the caller's groups.
		if who.res.ErrName != ErrAccessDenied || !strings.HasPrefix(who.res.ErrMsg, "Access denied: ") ||
			!strings.Contains(who.res.ErrMsg, "BandwidthTest") {
			t.Errorf("BandwidthTest as %s: %+v; want rdmad's %s naming the method", who.name, who.res, ErrAccessDenied)
		}
	}
	if n := fb.Count("Bandwidth"); n != 0 {
		t.Fatalf("refused callers ran %d tests", n)
	}
	if res := b.asUser(adminUID, adminGID, []int{adminGroup}, "bandwidthtest", "rxe0:1"); res.ErrName != "" {
		t.Errorf("BandwidthTest as an admin-group member: %+v; want the result", res)
	}
	want := []service.BandwidthRequest{{Loopback: true, Device: "rxe0", Port: 1, Op: "write", Size: 65536, Duration: service.DefaultBandwidthDuration}}
	if diff := cmp.Diff(want, fb.Requests()); diff != "" {
		t.Errorf("the admin's request: -want +got\n%s", diff)
	}
}
