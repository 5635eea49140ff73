package bus

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon/access"
	"github.com/rdmad/rdmad/daemon/service/servicetest"
)

// The D-Bus fuzz targets dispatch method calls the way godbus does
// (Conn.handleCall: LookupObject, LookupInterface, LookupMethod,
// DecodeArguments, Call) against the service's handler, in process: the
// connection the privileged methods ask for the caller's credentials
// (GetConnectionCredentials) is a dbus.Conn talking to fzBus, a fake bus
// on a net.Pipe that knows the senders of fzSenders. Whatever the call:
//   - no panic;
//   - every error is a D-Bus error with a known name and a non-empty message
//     (a plain Go error would reach the caller as a generic Failed);
//   - arguments of the wrong number or types are InvalidArgs, and reach
//     neither a property nor the backend;
//   - the methods of org.rdmad.Agent1 reach the backend only for a sender
//     at the level servicetest.Operations (the table the socket's fuzz
//     targets read too) gives them, and then exactly once; everyone else
//     gets AccessDenied;
//   - a Probe, Bandwidth or Doctor whose arguments are out of bounds is
//     InvalidArgs and reaches nothing;
//   - a successful call returns the method's declared out types, in a reply
//     that encodes and decodes as a valid D-Bus message.

// fzRoles is the access roles of the fuzz targets.
var fzRoles = access.Roles{SelfUID: 0, ReadGID: access.GID(500), AdminGID: access.GID(600)}

// fzSenders are the bus names the fake bus knows, with the credentials it
// reports and the level fzRoles gives them. A sender not in the table gets
// NameHasNoOwner from the bus.
var fzSenders = []struct {
	name  string
	creds map[string]dbus.Variant
	level access.Level
}{
	{":1.0", map[string]dbus.Variant{"UnixUserID": dbus.MakeVariant(uint32(0)), "UnixGroupIDs": dbus.MakeVariant([]uint32{0})}, access.Admin},
	{":1.1", map[string]dbus.Variant{"UnixUserID": dbus.MakeVariant(uint32(1002)), "UnixGroupIDs": dbus.MakeVariant([]uint32{1002, 600})}, access.Admin},
	{":1.2", map[string]dbus.Variant{"UnixUserID": dbus.MakeVariant(uint32(1001)), "UnixGroupIDs": dbus.MakeVariant([]uint32{1001, 500})}, access.Read},
	{":1.3", map[string]dbus.Variant{"UnixUserID": dbus.MakeVariant(uint32(1003)), "UnixGroupIDs": dbus.MakeVariant([]uint32{1003, 20})}, 0},
	// Root's group is not root.
	{":1.4", map[string]dbus.Variant{"UnixUserID": dbus.MakeVariant(uint32(1004)), "UnixGroupIDs": dbus.MakeVariant([]uint32{0})}, 0},
	// A bus without UnixGroupIDs: only the uid counts.
	{":1.5", map[string]dbus.Variant{"UnixUserID": dbus.MakeVariant(uint32(1005))}, 0},
	// No uid, or one of the wrong type: unknown, nothing allowed.
	{":1.6", map[string]dbus.Variant{"UnixGroupIDs": dbus.MakeVariant([]uint32{600})}, 0},
	{":1.7", map[string]dbus.Variant{"UnixUserID": dbus.MakeVariant(int32(0)), "UnixGroupIDs": dbus.MakeVariant([]uint32{600})}, 0},
	{"org.rdmad.Agent1", nil, 0}, // not a connection the bus knows
	{"", nil, 0},                 // no sender (a peer-to-peer connection)
}

func fzSenderLevel(sender string) access.Level {
	for _, s := range fzSenders {
		if s.name == sender {
			return s.level
		}
	}
	return 0
}

// fzBus answers GetConnectionCredentials on the server end of a pipe whose
// client end is a dbus.Conn, after a minimal SASL exchange.
func fzBus(srv net.Conn) {
	defer srv.Close()
	br := bufio.NewReader(srv)
	if b, err := br.ReadByte(); err != nil || b != 0 {
		return
	}
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return
		}
		line = strings.TrimSpace(line)
		switch {
		case line == "AUTH":
			io.WriteString(srv, "REJECTED ANONYMOUS\r\n")
		case strings.HasPrefix(line, "AUTH ANONYMOUS"):
			io.WriteString(srv, "OK 0123456789abcdef0123456789abcdef\r\n")
		case line == "BEGIN":
			goto messages
		default:
			io.WriteString(srv, "ERROR\r\n")
		}
	}
messages:
	var serial uint32 = 1
	for {
		msg, err := dbus.DecodeMessage(br)
		if err != nil {
			return
		}
		if msg.Type != dbus.TypeMethodCall {
			continue
		}
		serial++
		reply := &dbus.Message{Type: dbus.TypeMethodReply, Headers: map[dbus.HeaderField]dbus.Variant{
			dbus.FieldReplySerial: dbus.MakeVariant(msg.Serial()),
			dbus.FieldSender:      dbus.MakeVariant("org.freedesktop.DBus"),
		}}
		member, _ := msg.Headers[dbus.FieldMember].Value().(string)
		var creds map[string]dbus.Variant
		var who string
		if len(msg.Body) == 1 {
			who, _ = msg.Body[0].(string)
		}
		for _, s := range fzSenders {
			if s.name == who && s.creds != nil {
				creds = s.creds
			}
		}
		switch {
		case member == "GetConnectionCredentials" && creds != nil:
			reply.Headers[dbus.FieldSignature] = dbus.MakeVariant(dbus.SignatureOf(creds))
			reply.Body = []any{creds}
		default:
			reply.Type = dbus.TypeError
			reply.Headers[dbus.FieldErrorName] = dbus.MakeVariant("org.freedesktop.DBus.Error.NameHasNoOwner")
			reply.Headers[dbus.FieldSignature] = dbus.MakeVariant(dbus.SignatureOf(""))
			reply.Body = []any{fmt.Sprintf("Could not get credentials of %q: no such name", who)}
		}
		// The serial of a message must not be zero; EncodeTo takes the
		// one set by the connection, so build it through a round trip.
		if err := fzEncode(srv, reply, serial); err != nil {
			return
		}
	}
}

// fzEncode writes msg with the given serial.
func fzEncode(w io.Writer, msg *dbus.Message, serial uint32) error {
	var buf bytes.Buffer
	if err := msg.EncodeTo(&buf, binary.LittleEndian); err != nil {
		return err
	}
	b := buf.Bytes()
	binary.LittleEndian.PutUint32(b[8:12], serial)
	_, err := w.Write(b)
	return err
}

var (
	fzConnOnce sync.Once
	fzConn     *dbus.Conn
	fzConnErr  error
)

// fzBusConn returns the process's connection to fzBus.
func fzBusConn(t *testing.T) *dbus.Conn {
	fzConnOnce.Do(func() {
		cli, srv := net.Pipe()
		go fzBus(srv)
		c, err := dbus.NewConn(cli)
		if err != nil {
			fzConnErr = err
			return
		}
		if err := c.Auth([]dbus.Auth{dbus.AuthAnonymous()}); err != nil {
			fzConnErr = err
			return
		}
		fzConn = c
	})
	if fzConnErr != nil {
		t.Fatalf("fake bus: %v", fzConnErr)
	}
	return fzConn
}

// fzResources is what the fuzz targets' backend reads as the RDMA
// objects: a process and a device, so that Resources' reply has rows.
var fzResources = apitype.Resources{Processes: []apitype.ProcessResources{{PID: 42, Comm: "ib_write_bw", ResourceCounts: apitype.ResourceCounts{QPs: 1, MRs: 1, PinnedBytes: 65536}}},
	Devices: []apitype.DeviceResources{{Device: "mlx5_0", ResourceCounts: apitype.ResourceCounts{QPs: 1, MRs: 1, PinnedBytes: 65536}}}}

// fzView is the view the handler serves: the agent, two devices, a peer.
var fzView = sync.OnceValue(func() *view {
	dev := func(name, netdev string) apitype.Device {
		return apitype.Device{Name: name, NodeType: "CA", NodeGUID: "0000:0000:0000:0001",
			Ports: []apitype.Port{{Port: 1, State: "ACTIVE", PhysState: "LinkUp", LinkLayer: "Ethernet", Netdev: netdev}}}
	}
	return newView(&apitype.Snapshot{
		Version: "fuzz", State: apitype.Running, Summary: "running",
		Config:     apitype.Config{Generation: 3, Path: "/etc/rdmad/rdmad.toml"},
		Devices:    []apitype.Device{dev("mlx5_0", "ens1f0"), dev("rxe0", "eth0")},
		Components: map[string]apitype.Component{"config": {State: apitype.OK}},
		Peers:      apitype.Peers{Peers: []apitype.Peer{{Name: "192.0.2.17", State: apitype.PeerUp}}},
	})
})

// fzPaths and fzMethods are what the selectors of FuzzDBusCall pick from
// when the fuzz input names no path or method.
var fzPaths = []dbus.ObjectPath{Path, DevicePath("mlx5_0"), DevicePath("rxe0"), "/", "/org", "/org/rdmad", dbus.ObjectPath(DevicePrefix), "/org/rdmad/Agent1/nothing"}

var fzMethods = [][2]string{
	{PropertiesInterface, "Get"}, {PropertiesInterface, "GetAll"}, {PropertiesInterface, "Set"},
	{IntrospectableInterface, "Introspect"}, {ObjectManagerInterface, "GetManagedObjects"},
	{Interface, "Reload"}, {Interface, "Apply"}, {Interface, "Probe"},
	{"", "Probe"}, {"", "Reload"}, {"", "Get"}, {DeviceInterface, "Get"},
	{Interface, "Doctor"}, {Interface, "Resources"}, {Interface, "Bandwidth"}, {Interface, "BandwidthTest"},
}

// fzSignatures and fzOut are the in and out signatures of the methods,
// for the oracle: the standard interfaces' here, org.rdmad.Agent1's from
// servicetest.Operations, the table of the socket's fuzz targets too.
var fzSignatures, fzOut = func() (in, out map[string]string) {
	in = map[string]string{"Get": "ss", "GetAll": "s", "Set": "ssv", "Introspect": "", "GetManagedObjects": ""}
	out = map[string]string{"Get": "v", "GetAll": "a{sv}", "Set": "", "Introspect": "s", "GetManagedObjects": "a{oa{sa{sv}}}"}
	for _, o := range servicetest.Operations {
		if o.DBus != "" {
			in[o.DBus], out[o.DBus] = o.DBusIn, o.DBusOut
		}
		for _, m := range o.DBusMore {
			in[m.Name], out[m.Name] = m.In, m.Out
		}
	}
	return in, out
}()

// callLevel is the level each backend call needs: the lowest of the
// operations that make it (servicetest.Operations).
var callLevel = func() map[string]access.Level {
	m := map[string]access.Level{}
	for _, o := range servicetest.Operations {
		for _, c := range o.Calls {
			if l, ok := m[c]; !ok || o.Level < l {
				m[c] = o.Level
			}
		}
	}
	return m
}()

// validBandwidthArgs is the oracle of Bandwidth's arguments (peer, op,
// size, duration in ms), servicetest.BandwidthOK's with 0 the default.
func validBandwidthArgs(body []any) bool {
	peer, op := body[0].(string), body[1].(string)
	size, ms := body[2].(uint32), body[3].(uint32)
	return size <= 1<<20 && servicetest.BandwidthOK(peer, op, int(size), time.Duration(ms)*time.Millisecond)
}

// fzErrorNames are the errors a call may answer.
var fzErrorNames = map[string]bool{
	ErrInvalidArgs: true, ErrAccessDenied: true, ErrConfigRejected: true, ErrNotSupported: true,
	ErrBusy: true, ErrFailed: true, ErrTimeout: true,
	"org.freedesktop.DBus.Error.UnknownObject":    true,
	"org.freedesktop.DBus.Error.UnknownInterface": true,
	"org.freedesktop.DBus.Error.UnknownMethod":    true,
	"org.freedesktop.DBus.Error.UnknownProperty":  true,
	"org.freedesktop.DBus.Error.PropertyReadOnly": true,
	"org.freedesktop.DBus.Error.NoSuchObject":     true,
}

// fzOutcome is what godbus would answer: an error name, or the reply body.
type fzOutcome struct {
	errName string
	errMsg  string
	ret     []any
	calls   []string
	stage   string // where dispatch stopped
}

// fzDispatch is Conn.handleCall without the connection: it dispatches one
// method call to a fresh handler and checks the outcome's invariants.
func fzDispatch(t *testing.T, fail, reject bool, msg *dbus.Message) fzOutcome {
	t.Helper()
	conn := fzBusConn(t)
	b := &servicetest.Backend{Fail: fail, Res: fzResources}
	if reject {
		b.SetReject("rdmad.toml:1: fuzz")
	}
	h := newHandler(b, slog.New(slog.DiscardHandler))
	h.roles = func() access.Roles { return fzRoles }
	h.probeTimeout = 5 * time.Second
	h.cur.Store(fzView())

	path, _ := msg.Headers[dbus.FieldPath].Value().(dbus.ObjectPath)
	ifaceName, _ := msg.Headers[dbus.FieldInterface].Value().(string)
	member, _ := msg.Headers[dbus.FieldMember].Value().(string)
	sender, _ := msg.Headers[dbus.FieldSender].Value().(string)
	// The wire's signature, not SignatureOf(msg.Body...): godbus decodes
	// dicts keyed by booleans (a{bb} is valid D-Bus) into map[bool]bool,
	// which its SignatureOf refuses with a panic. The server never calls it
	// on a caller's body, and neither may the harness.
	sig, _ := msg.Headers[dbus.FieldSignature].Value().(dbus.Signature)
	desc := fmt.Sprintf("%s %s.%s(%s %.200v) from %q", path, ifaceName, member, sig, msg.Body, sender)

	var out fzOutcome
	setErr := func(stage string, err error) {
		out.stage = stage
		var e *dbus.Error
		switch x := err.(type) {
		case dbus.Error:
			e = &x
		case *dbus.Error:
			e = x
		case dbus.DBusError:
			n, body := x.DBusError()
			e = dbus.NewError(n, body)
		default:
			t.Fatalf("%s: %s answered a plain Go error %T %v (the caller gets a generic Failed)", desc, stage, err, err)
		}
		out.errName = e.Name
		if len(e.Body) > 0 {
			out.errMsg, _ = e.Body[0].(string)
		}
	}
	func() {
		obj, ok := h.LookupObject(path)
		if !ok {
			out.stage, out.errName = "object", "org.freedesktop.DBus.Error.NoSuchObject"
			return
		}
		iface, ok := obj.LookupInterface(ifaceName)
		if !ok {
			out.stage, out.errName = "interface", "org.freedesktop.DBus.Error.UnknownInterface"
			return
		}
		m, ok := iface.LookupMethod(member)
		if !ok {
			out.stage, out.errName = "method", "org.freedesktop.DBus.Error.UnknownMethod"
			return
		}
		dec, ok := m.(dbus.ArgumentDecoder)
		if !ok {
			t.Fatalf("%s: method %T does not decode its own arguments; godbus would convert them between kinds", desc, m)
		}
		args, err := dec.DecodeArguments(conn, sender, msg, msg.Body)
		if err != nil {
			setErr("decode", err)
			return
		}
		ret, err := m.Call(args...)
		if err != nil {
			setErr("call", err)
			return
		}
		out.stage, out.ret = "reply", ret
		if got, want := dbus.SignatureOf(ret...).String(), fzMethodOut(m); got != want {
			t.Fatalf("%s: returned %s, but the method declares %s", desc, got, want)
		}
	}()
	out.calls = b.Calls()

	if out.errName != "" && out.stage != "object" && out.stage != "interface" && out.stage != "method" {
		if !fzErrorNames[out.errName] {
			t.Fatalf("%s: error %s %q is not one rdmad documents", desc, out.errName, out.errMsg)
		}
		if strings.TrimSpace(out.errMsg) == "" {
			t.Fatalf("%s: error %s without a message", desc, out.errName)
		}
	}

	// Privileges.
	level := fzSenderLevel(sender)
	for _, c := range out.calls {
		if level < callLevel[c] {
			t.Fatalf("%s: a sender at level %v reached the backend's %s (outcome %+v)", desc, level, c, out)
		}
	}
	if len(out.calls) > 1 {
		t.Fatalf("%s: one call reached the backend %d times: %q", desc, len(out.calls), out.calls)
	}
	op, guarded := servicetest.ByDBus(member)
	need := op.Level
	isPriv := guarded && (ifaceName == Interface || ifaceName == "") && path == Path
	if len(out.calls) == 1 && (!isPriv || out.calls[0] != op.Calls[0]) {
		t.Fatalf("%s: reached the backend's %s", desc, out.calls[0])
	}

	// Argument types: the oracle for the methods rdmad serves.
	wantSig, known := fzSignatures[member]
	// Paths that are neither an object nor a node answer UnknownObject to
	// everything, whatever the arguments.
	_, isObj := fzView().objects[path]
	_, isNode := fzView().nodes[path]
	served := (isObj || isNode) && (out.stage == "decode" || out.stage == "call" || out.stage == "reply")
	if !isObj && !isNode && out.errName != "org.freedesktop.DBus.Error.UnknownObject" {
		t.Fatalf("%s: a path that is no object answered %+v, want UnknownObject", desc, out)
	}
	if served && known && sig.String() != wantSig {
		if out.errName != ErrInvalidArgs {
			t.Fatalf("%s: arguments %s for a method taking (%s) answered %+v, want InvalidArgs", desc, sig, wantSig, out)
		}
		if len(out.calls) != 0 {
			t.Fatalf("%s: wrong arguments reached the backend", desc)
		}
	}
	if served && isPriv && sig.String() == wantSig {
		switch {
		case level < need && out.errName != ErrAccessDenied:
			t.Fatalf("%s: call of %s (level %v) by a sender at level %v answered %+v, want AccessDenied", desc, member, need, level, out)
		case level >= need && member == "Doctor" && !servicetest.DoctorIntervalOK(time.Duration(msg.Body[0].(uint32))*time.Millisecond):
			if out.errName != ErrInvalidArgs || len(out.calls) != 0 {
				t.Fatalf("%s: Doctor over the interval bound answered %+v, want InvalidArgs and no run", desc, out)
			}
		case level >= need && member == "Probe" && !servicetest.PeerShaped(msg.Body[0].(string)):
			if out.errName != ErrInvalidArgs || len(out.calls) != 0 {
				t.Fatalf("%s: Probe of a blank or malformed peer name answered %+v, want InvalidArgs and no probe", desc, out)
			}
		case level >= need && member == "Bandwidth" && !validBandwidthArgs(msg.Body):
			if out.errName != ErrInvalidArgs || len(out.calls) != 0 {
				t.Fatalf("%s: Bandwidth with arguments out of bounds answered %+v, want InvalidArgs and no test", desc, out)
			}
		case level >= need && member == "BandwidthTest" && !validBandwidthTestArgs(msg.Body):
			if out.errName != ErrInvalidArgs || len(out.calls) != 0 {
				t.Fatalf("%s: BandwidthTest with a bad target or options answered %+v, want InvalidArgs and no test", desc, out)
			}
		case level >= need && len(out.calls) != 1:
			t.Fatalf("%s: an admin's call did not reach the backend: %+v", desc, out)
		}
	}

	// A reply must be a valid message, as godbus would send it.
	if out.stage == "reply" {
		reply := &dbus.Message{Type: dbus.TypeMethodReply, Headers: map[dbus.HeaderField]dbus.Variant{
			dbus.FieldReplySerial: dbus.MakeVariant(uint32(7)),
		}, Body: out.ret}
		// The bus stamps the sender of every message it delivers with the
		// caller's unique name, so the reply's destination is always a
		// valid name; a decoded message may carry any string there.
		if fzValidBusName(sender) {
			reply.Headers[dbus.FieldDestination] = dbus.MakeVariant(sender)
		}
		if len(out.ret) > 0 {
			reply.Headers[dbus.FieldSignature] = dbus.MakeVariant(dbus.SignatureOf(out.ret...))
		}
		var buf bytes.Buffer
		if err := fzEncode(&buf, reply, 9); err != nil {
			// godbus would drop such a reply and the caller would time out.
			t.Fatalf("%s: the reply %.300v does not encode: %v", desc, out.ret, err)
		} else if _, err := dbus.DecodeMessage(&buf); err != nil {
			t.Fatalf("%s: the reply %.300v does not decode: %v", desc, out.ret, err)
		}
	}
	return out
}

// fzValidBusName reports whether s is a bus name the bus could put in a
// message's sender field: a unique name (":1.42") or a well-known name,
// as the D-Bus specification's "Valid Bus Names" defines them.
func fzValidBusName(s string) bool {
	if s == "" || len(s) > 255 {
		return false
	}
	unique := s[0] == ':'
	if unique {
		s = s[1:]
	}
	elems := strings.Split(s, ".")
	if len(elems) < 2 {
		return false
	}
	for _, e := range elems {
		if e == "" {
			return false
		}
		for i, r := range e {
			switch {
			case r >= 'A' && r <= 'Z', r >= 'a' && r <= 'z', r == '_', r == '-':
			case r >= '0' && r <= '9':
				if i == 0 && !unique {
					return false
				}
			default:
				return false
			}
		}
	}
	return true
}

// fzMethodOut is the signature m declares it returns.
func fzMethodOut(m dbus.Method) string {
	var out []any
	for i := 0; i < m.NumReturns(); i++ {
		out = append(out, m.ReturnValue(i))
	}
	return dbus.SignatureOf(out...).String()
}

// fzArgs builds an argument list from spec: each byte picks one value of
// some D-Bus type, made from s1 and s2 where it holds text.
func fzArgs(spec []byte, s1, s2 string) []any {
	var args []any
	for i, c := range spec {
		if i == 8 {
			break
		}
		var v any
		switch c % 20 {
		case 0:
			v = s1
		case 1:
			v = s2
		case 2:
			v = uint32(len(s1))
		case 3:
			v = int32(-len(s2))
		case 4:
			v = len(s1)%2 == 0
		case 5:
			v = []byte(s1)
		case 6:
			v = dbus.MakeVariant(s1)
		case 7:
			v = dbus.MakeVariant(uint32(c))
		case 8:
			v = dbus.ObjectPath(Path)
		case 9:
			v = []string{s1, s2}
		case 10:
			v = map[string]dbus.Variant{s1: dbus.MakeVariant(s2)}
		case 11:
			v = dbus.MakeVariant(dbus.MakeVariant([]any{s1, uint64(c)}))
		case 12:
			v = []map[string][]dbus.Variant{{s1: {dbus.MakeVariant(int16(c)), dbus.MakeVariant(s2)}}}
		case 13:
			v = float64(c) / 3
		case 14:
			v = uint64(c) << 40
		case 15:
			v = byte(c)
		case 16:
			v = dbus.Signature{}
		case 17:
			v = struct {
				A string
				B uint32
			}{s1, uint32(c)}
		case 18:
			v = Interface
		case 19:
			v = "Version"
		}
		args = append(args, v)
	}
	return args
}

// fzCall builds a method call message.
func fzCall(path dbus.ObjectPath, iface, member, sender string, args []any) *dbus.Message {
	msg := &dbus.Message{Type: dbus.TypeMethodCall, Headers: map[dbus.HeaderField]dbus.Variant{
		dbus.FieldPath:   dbus.MakeVariant(path),
		dbus.FieldMember: dbus.MakeVariant(member),
	}, Body: args}
	if iface != "" {
		msg.Headers[dbus.FieldInterface] = dbus.MakeVariant(iface)
	}
	if sender != "" {
		msg.Headers[dbus.FieldSender] = dbus.MakeVariant(sender)
	}
	if len(args) > 0 {
		msg.Headers[dbus.FieldSignature] = dbus.MakeVariant(dbus.SignatureOf(args...))
	}
	return msg
}

// FuzzDBusCall dispatches calls built from its input: a sender (by index
// into fzSenders), a path and a method (by index, or named by the input)
// and up to 8 arguments of mixed types (see fzArgs).
func FuzzDBusCall(f *testing.F) {
	f.Add(uint8(0), uint8(0), uint8(5), "", "", "", []byte{}, "", "")
	f.Add(uint8(2), uint8(0), uint8(5), "", "", "", []byte{}, "", "")
	f.Add(uint8(1), uint8(0), uint8(7), "", "", "", []byte{0}, "192.0.2.17", "")
	f.Add(uint8(0), uint8(0), uint8(7), "", "", "", []byte{0}, "%00expire%20x", "")
	f.Add(uint8(0), uint8(0), uint8(7), "", "", "", []byte{2}, "", "")
	f.Add(uint8(3), uint8(0), uint8(6), "", "", "", []byte{}, "", "")
	f.Add(uint8(0), uint8(0), uint8(0), "", "", "", []byte{18, 19}, "", "")
	f.Add(uint8(2), uint8(1), uint8(0), "", "", "", []byte{0, 1}, DeviceInterface, "Name")
	f.Add(uint8(2), uint8(0), uint8(2), "", "", "", []byte{18, 19, 6}, "x", "")
	f.Add(uint8(2), uint8(0), uint8(1), "", "", "", []byte{7}, "", "")
	f.Add(uint8(9), uint8(3), uint8(3), "", "", "", []byte{}, "", "")
	f.Add(uint8(0), uint8(0), uint8(0), "/org/rdmad/Agent1", "org.rdmad.Agent1", "Probe", []byte{6}, "192.0.2.17", "")
	f.Add(uint8(5), uint8(0), uint8(8), "", "", "", []byte{0}, " ", "")
	f.Add(uint8(1), uint8(0), uint8(15), "", "", "", []byte{0, 10}, "rxe0", "qps")
	f.Fuzz(func(t *testing.T, who, pathSel, methodSel uint8, path, iface, member string, spec []byte, s1, s2 string) {
		sender := fzSenders[int(who)%len(fzSenders)].name
		p := dbus.ObjectPath(path)
		if path == "" || !p.IsValid() {
			p = fzPaths[int(pathSel)%len(fzPaths)]
		}
		im := fzMethods[int(methodSel)%len(fzMethods)]
		if member != "" {
			im = [2]string{iface, member}
		}
		args := fzArgs(spec, s1, s2)
		msg := fzCall(p, im[0], im[1], sender, args)
		if msg.IsValid() != nil {
			// The bus and godbus's decoder drop invalid messages (member,
			// interface or string arguments that are not valid).
			return
		}
		fzDispatch(t, who >= 128, who >= 64 && who < 128, msg)
	})
}

// FuzzDBusMessage decodes its input with godbus's message decoder, as the
// connection's reader does, and dispatches what is a valid method call.
func FuzzDBusMessage(f *testing.F) {
	seed := func(path dbus.ObjectPath, iface, member, sender string, args ...any) []byte {
		var buf bytes.Buffer
		if err := fzEncode(&buf, fzCall(path, iface, member, sender, args), 1); err != nil {
			f.Fatal(err)
		}
		return buf.Bytes()
	}
	f.Add(false, seed(Path, Interface, "Reload", ":1.0"))
	f.Add(false, seed(Path, Interface, "Reload", ":1.2"))
	f.Add(false, seed(Path, Interface, "Probe", ":1.1", "192.0.2.17"))
	f.Add(false, seed(Path, Interface, "Probe", ":1.1", uint32(7)))
	f.Add(false, seed(Path, Interface, "Probe", ":1.1", dbus.MakeVariant("192.0.2.17")))
	f.Add(true, seed(Path, Interface, "Apply", ":1.0"))
	f.Add(false, seed(Path, PropertiesInterface, "Get", ":1.3", Interface, "Peers"))
	f.Add(false, seed(Path, Interface, "Resources", ":1.2"))
	f.Add(false, seed(Path, Interface, "Resources", ":1.3"))
	f.Add(false, seed(Path, Interface, "Bandwidth", ":1.2", "192.0.2.17", "write", uint32(65536), uint32(3000)))
	f.Add(false, seed(Path, Interface, "Bandwidth", ":1.1", "192.0.2.17", "write", uint32(65536), uint32(3000)))
	f.Add(false, seed(Path, Interface, "Bandwidth", ":1.0", "192.0.2.17", "fill", uint32(2<<20), uint32(3600000)))
	f.Add(false, seed(Path, Interface, "Bandwidth", ":1.0", "-x", "", uint32(0), uint32(0)))
	f.Add(false, seed(Path, Interface, "BandwidthTest", ":1.1", "rxe0:1", map[string]dbus.Variant{
		"loopback": dbus.MakeVariant(true), "qps": dbus.MakeVariant(uint32(4)), "duration_ms": dbus.MakeVariant(uint32(2000))}))
	f.Add(false, seed(Path, Interface, "BandwidthTest", ":1.2", "192.0.2.17", map[string]dbus.Variant{}))
	f.Add(false, seed(Path, Interface, "BandwidthTest", ":1.0", "192.0.2.17", map[string]dbus.Variant{"qsp": dbus.MakeVariant(uint32(4))}))
	f.Add(false, seed(Path, Interface, "BandwidthTest", ":1.0", "", map[string]dbus.Variant{"loopback": dbus.MakeVariant("yes")}))
	f.Add(false, seed(Path, PropertiesInterface, "Set", ":1.0", Interface, "State", dbus.MakeVariant("stopped")))
	f.Add(false, seed(DevicePath("mlx5_0"), PropertiesInterface, "GetAll", ":1.2", DeviceInterface))
	f.Add(false, seed("/", IntrospectableInterface, "Introspect", ":1.9"))
	f.Add(false, seed(Path, ObjectManagerInterface, "GetManagedObjects", ""))
	f.Add(false, boolKeyed(f, seed(Path, Interface, "BandwidthTest", ":1.0", "", map[uint32]uint32{})))
	f.Fuzz(func(t *testing.T, fail bool, data []byte) {
		msg, err := dbus.DecodeMessage(bytes.NewReader(data))
		if err != nil || msg.Type != dbus.TypeMethodCall {
			return
		}
		// godbus answers the Peer interface itself.
		if iface, _ := msg.Headers[dbus.FieldInterface].Value().(string); iface == "org.freedesktop.DBus.Peer" {
			return
		}
		fzDispatch(t, fail, false, msg)
	})
}

// TestFuzzSendersLevels keeps fzSenders in step with the access roles.
func TestFuzzSendersLevels(t *testing.T) {
	conn := fzBusConn(t)
	for _, s := range fzSenders {
		c, err := callerOf(call{conn: conn, sender: s.name})
		var got access.Level
		if err == nil {
			got = fzRoles.LevelFor(c)
		}
		if got != s.level {
			t.Errorf("sender %q: level %v (caller %+v, %v), want %v", s.name, got, c, err, s.level)
		}
	}
}

// boolKeyed turns a call whose body holds an a{uu} into the same call with
// an a{bb}: the two have the same wire layout (a boolean is a 4-byte 0 or
// 1), and godbus cannot encode a map keyed by bool itself. The fuzzer found
// a{bb} first (daemon/bus/testdata/fuzz/FuzzDBusMessage/673e191b9c8ee004).
func boolKeyed(tb testing.TB, b []byte) []byte {
	tb.Helper()
	n := bytes.Count(b, []byte("a{uu}"))
	if n != 1 {
		tb.Fatalf("boolKeyed: %d a{uu} in the message, want 1", n)
	}
	return bytes.Replace(b, []byte("a{uu}"), []byte("a{bb}"), 1)
}

// TestFuzzBoolKeyedDict: a call whose argument is a dict keyed by booleans
// decodes (godbus gives map[bool]bool) and is refused like any argument of
// the wrong type, without a panic in the handler or in the reply.
func TestFuzzBoolKeyedDict(t *testing.T) {
	var buf bytes.Buffer
	if err := fzEncode(&buf, fzCall(Path, Interface, "BandwidthTest", ":1.0", []any{"", map[uint32]uint32{}}), 1); err != nil {
		t.Fatal(err)
	}
	msg, err := dbus.DecodeMessage(bytes.NewReader(boolKeyed(t, buf.Bytes())))
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	if _, ok := msg.Body[1].(map[bool]bool); !ok {
		t.Fatalf("body[1] is %T, want map[bool]bool (the case under test)", msg.Body[1])
	}
	out := fzDispatch(t, false, false, msg)
	if out.errName == "" {
		t.Fatalf("BandwidthTest(s a{bb}) answered %v, want an error", out.ret)
	}
}
