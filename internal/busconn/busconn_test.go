package busconn

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"io/fs"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
)

// streamConn is a net.Conn that reads a fixed stream and records writes.
type streamConn struct {
	r       io.Reader
	written bytes.Buffer
}

func (c *streamConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *streamConn) Write(p []byte) (int, error)      { return c.written.Write(p) }
func (c *streamConn) Close() error                     { return nil }
func (c *streamConn) LocalAddr() net.Addr              { return &net.UnixAddr{} }
func (c *streamConn) RemoteAddr() net.Addr             { return &net.UnixAddr{} }
func (c *streamConn) SetDeadline(time.Time) error      { return nil }
func (c *streamConn) SetReadDeadline(time.Time) error  { return nil }
func (c *streamConn) SetWriteDeadline(time.Time) error { return nil }

// guarded is a guardedConn reading stream, past its authentication (the
// BEGIN line it wrote is not kept).
func guarded(stream []byte, onDrop func(Dropped)) (*guardedConn, *streamConn) {
	c := &streamConn{r: bytes.NewReader(stream)}
	g := newGuardedConn(c, onDrop)
	_, _ = g.Write([]byte("BEGIN\r\n"))
	c.written.Reset()
	return g, c
}

// encodeCall is a method call from sender, serial 7, with body args, as
// the bus delivers it.
func encodeCall(t testing.TB, sender, member string, args ...any) []byte {
	t.Helper()
	msg := &dbus.Message{Type: dbus.TypeMethodCall, Headers: map[dbus.HeaderField]dbus.Variant{
		dbus.FieldPath:      dbus.MakeVariant(dbus.ObjectPath("/org/rdmad/Agent1")),
		dbus.FieldInterface: dbus.MakeVariant("org.rdmad.Agent1"),
		dbus.FieldMember:    dbus.MakeVariant(member),
		dbus.FieldSender:    dbus.MakeVariant(sender),
	}, Body: args}
	if len(args) > 0 {
		msg.Headers[dbus.FieldSignature] = dbus.MakeVariant(dbus.SignatureOf(args...))
	}
	var buf bytes.Buffer
	if err := msg.EncodeTo(&buf, binary.LittleEndian); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	binary.LittleEndian.PutUint32(b[8:12], 7)
	return b
}

// boolKeyed turns a message whose body holds an a{uu} into the same
// message with an a{bb}: the two have the same wire layout (a boolean is
// a 4-byte 0 or 1), and godbus cannot encode a map keyed by bool itself.
func boolKeyed(tb testing.TB, b []byte) []byte {
	tb.Helper()
	if n := bytes.Count(b, []byte("a{uu}")); n != 1 {
		tb.Fatalf("boolKeyed: %d a{uu} in the message, want 1", n)
	}
	return bytes.Replace(b, []byte("a{uu}"), []byte("a{bb}"), 1)
}

// boolDictCall is BandwidthTest("", {true: false}) from sender: an a{uu}
// of one entry with its signature turned into a{bb}.
func boolDictCall(t testing.TB, sender string) []byte {
	return boolKeyed(t, encodeCall(t, sender, "BandwidthTest", "", map[uint32]uint32{1: 0}))
}

func TestGuardedConnPassesAndDrops(t *testing.T) {
	good := encodeCall(t, ":1.5", "Probe", "192.0.2.17")
	bad := boolDictCall(t, ":1.6")
	var drops []Dropped
	g, c := guarded(append(append(append([]byte{}, good...), bad...), good...), func(d Dropped) { drops = append(drops, d) })

	for i, want := range []string{"Probe", "", "Probe"} {
		msg, err := dbus.DecodeMessage(g)
		if want == "" {
			var skipped dbus.InvalidMessageError
			if !errors.As(err, &skipped) {
				t.Fatalf("message %d: %v (%+v), want the InvalidMessageError godbus skips", i, err, msg)
			}
			continue
		}
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if m, _ := msg.Headers[dbus.FieldMember].Value().(string); m != want {
			t.Fatalf("message %d: member %q, want %q", i, m, want)
		}
	}
	if _, err := dbus.DecodeMessage(g); !errors.Is(err, io.EOF) {
		t.Fatalf("after the stream: %v, want EOF", err)
	}
	if len(drops) != 1 || drops[0].Sender != ":1.6" || drops[0].Member != "BandwidthTest" || drops[0].Signature != "sa{bb}" ||
		!strings.Contains(drops[0].Why, "map[bool]bool") {
		t.Fatalf("drops %+v, want one naming :1.6, BandwidthTest, sa{bb} and the decoder's error", drops)
	}
	// The dropped call is answered InvalidArgs, to its sender and serial.
	reply, err := dbus.DecodeMessage(&c.written)
	if err != nil {
		t.Fatalf("guard's reply: %v", err)
	}
	if reply.Type != dbus.TypeError || reply.Headers[dbus.FieldErrorName].Value() != "org.freedesktop.DBus.Error.InvalidArgs" ||
		reply.Headers[dbus.FieldDestination].Value() != ":1.6" || reply.Headers[dbus.FieldReplySerial].Value() != uint32(7) {
		t.Fatalf("guard's reply %+v, want InvalidArgs to :1.6 for serial 7", reply)
	}
	if text, _ := reply.Body[0].(string); !strings.Contains(text, "busctl introspect") {
		t.Errorf("reply text %q does not say what to send", text)
	}
	if c.written.Len() != 0 {
		t.Errorf("guard wrote %d bytes more than one reply", c.written.Len())
	}
}

func TestGuardedConnNoReplyWhereNoneIsExpected(t *testing.T) {
	bad := boolDictCall(t, ":1.6")
	bad[2] |= 0x1 // NO_REPLY_EXPECTED
	signal := boolDictCall(t, ":1.7")
	signal[1] = 4 // a signal (the bus's checks are not ours to repeat)
	n := 0
	g, c := guarded(append(bad, signal...), func(Dropped) { n++ })
	for range 2 {
		var skipped dbus.InvalidMessageError
		if _, err := dbus.DecodeMessage(g); !errors.As(err, &skipped) {
			t.Fatalf("%v, want the InvalidMessageError godbus skips", err)
		}
	}
	if n != 2 || c.written.Len() != 0 {
		t.Fatalf("%d drops and %d bytes written, want 2 drops and no reply", n, c.written.Len())
	}
}

func TestGuardedConnOversized(t *testing.T) {
	big := encodeCall(t, ":1.8", "Probe", strings.Repeat("x", maxGuardedMessage))
	good := encodeCall(t, ":1.5", "Reload")
	var drops []Dropped
	g, _ := guarded(append(big, good...), func(d Dropped) { drops = append(drops, d) })
	var skipped dbus.InvalidMessageError
	if _, err := dbus.DecodeMessage(g); !errors.As(err, &skipped) {
		t.Fatalf("oversized: %v, want it dropped", err)
	}
	msg, err := dbus.DecodeMessage(g)
	if err != nil || msg.Headers[dbus.FieldMember].Value() != "Reload" {
		t.Fatalf("the message after an oversized one: %v %+v, want Reload", err, msg)
	}
	if len(drops) != 1 || !strings.Contains(drops[0].Why, "over the") {
		t.Fatalf("drops %+v, want one for the size", drops)
	}
}

func TestGuardedConnBeforeBegin(t *testing.T) {
	// The authentication's lines pass as they are, whatever they hold.
	g := newGuardedConn(&streamConn{r: strings.NewReader("OK 1234deadbeef\r\n")}, nil)
	buf := make([]byte, 64)
	n, err := g.Read(buf)
	if err != nil || string(buf[:n]) != "OK 1234deadbeef\r\n" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
}

func TestGuardedConnBrokenStream(t *testing.T) {
	for name, stream := range map[string][]byte{
		"byte order": append([]byte{'x'}, make([]byte, 15)...),
		"too long":   {'l', 1, 0, 1, 0xff, 0xff, 0xff, 0x7f, 1, 0, 0, 0, 0, 0, 0, 0},
		"truncated":  encodeCall(t, ":1.5", "Reload")[:20],
	} {
		g, _ := guarded(stream, nil)
		if _, err := g.Read(make([]byte, 16)); err == nil {
			t.Errorf("%s: read succeeded, want an error (godbus then reconnects)", name)
		}
	}
}

func TestHeaderInfoBounds(t *testing.T) {
	msg := boolDictCall(t, ":1.6")
	fieldsLen := int(binary.LittleEndian.Uint32(msg[12:16]))
	want := headerInfo(msg, binary.LittleEndian, fieldsLen)
	if want.Sender != ":1.6" || want.Member != "BandwidthTest" {
		t.Fatalf("headerInfo %+v", want)
	}
	// Every cut of the header reads no further than it holds.
	for n := range 16 + fieldsLen {
		_ = headerInfo(msg[:n], binary.LittleEndian, fieldsLen)
		_ = headerInfo(msg, binary.LittleEndian, n)
	}
	// Strings that are not text are quoted for the log.
	if got := logText("a\x1b[31mb\xff"); got != `"a\x1b[31mb\xff"` {
		t.Errorf("logText = %s", got)
	}
	if got := logText(strings.Repeat("n", 200)); len(got) > 90 {
		t.Errorf("logText kept %d bytes", len(got))
	}
}

func TestUnixSocketOf(t *testing.T) {
	for entry, want := range map[string]string{
		"unix:path=/run/dbus/system_bus_socket":      "/run/dbus/system_bus_socket",
		"unix:path=/tmp/a%20b,guid=0123456789abcdef": "/tmp/a b",
		"unix:guid=0123,abstract=/tmp/dbus-XyZ":      "@/tmp/dbus-XyZ",
		"tcp:host=127.0.0.1,port=1234":               "",
		"unix:runtime=yes":                           "",
		"unix:path=%zz":                              "",
	} {
		got, err := unixSocketOf(entry)
		if want == "" {
			if err == nil || !strings.Contains(err.Error(), entry) {
				t.Errorf("unixSocketOf(%q) = %q, %v; want an error naming it", entry, got, err)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("unixSocketOf(%q) = %q, %v; want %q", entry, got, err, want)
		}
	}
}

// FuzzGuardedConn: whatever the bus's stream holds, the guard never
// panics and godbus never reads from it a message whose decode would close
// the connection (an error other than an InvalidMessageError).
func FuzzGuardedConn(f *testing.F) {
	f.Add(encodeCall(f, ":1.5", "Probe", "192.0.2.17"))
	f.Add(boolDictCall(f, ":1.6"))
	f.Add(append(boolDictCall(f, ":1.6"), encodeCall(f, ":1.5", "Reload")...))
	f.Fuzz(func(t *testing.T, stream []byte) {
		g, _ := guarded(stream, nil)
		for range 64 {
			_, err := dbus.DecodeMessage(g)
			if err == nil {
				continue
			}
			var skipped dbus.InvalidMessageError
			if errors.As(err, &skipped) {
				continue
			}
			// What remains must be the stream's own end or break, which
			// the guard returns before godbus reads a byte of the message
			// (godbus then reconnects): never a decoder's error.
			if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !strings.HasPrefix(err.Error(), "dbus: the bus sent") {
				t.Fatalf("godbus would close on a message the guard passed: %v", err)
			}
			return
		}
	})
}

// TestConnectTriesEachEntry: the first entry of the address that connects
// is used; an address of none says what each entry did.
func TestConnectTriesEachEntry(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "bus")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	g, err := dial(ctx, "unix:path="+filepath.Join(dir, "absent")+";tcp:host=localhost;unix:path="+sock, nil)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	g.Close()
	_, err = dial(ctx, "unix:path="+filepath.Join(dir, "absent")+";tcp:host=localhost", nil)
	if err == nil || !strings.Contains(err.Error(), "absent") || !strings.Contains(err.Error(), "tcp:host=localhost") {
		t.Fatalf("dial of no socket: %v, want both entries named", err)
	}
	if _, err := dial(ctx, "", nil); err == nil {
		t.Fatal("dial of an empty address succeeded")
	}
}

// TestSystemBusAddress: a machine without the bus's socket is told apart
// (fs.ErrNotExist), for the default and for a unix:path= address; other
// forms are passed on to the dial, which names them.
func TestSystemBusAddress(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", "unix:path="+filepath.Join(dir, "absent"))
	if _, err := SystemBusAddress(); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "no system bus") {
		t.Errorf("absent socket: %v, want no system bus wrapping fs.ErrNotExist", err)
	}
	l, err := net.Listen("unix", filepath.Join(dir, "bus"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, addr := range []string{"unix:path=" + filepath.Join(dir, "bus"), "unix:abstract=/x,guid=01", "tcp:host=localhost,port=1"} {
		t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", addr)
		if got, err := SystemBusAddress(); err != nil || got != addr {
			t.Errorf("%q: %q, %v", addr, got, err)
		}
	}
}
