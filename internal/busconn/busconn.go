// Package busconn connects rdmad to the system bus through a guard that
// keeps one message from taking the connection down.
package busconn

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/godbus/dbus/v5"
)

// godbus closes its connection when a message from the bus fails to decode
// with anything but an InvalidMessageError, and its decoder fails on valid
// D-Bus: a dict keyed by booleans (a{bb}) with one entry is an
// InvalidTypeError (godbus's isKeyType leaves bool out). The bus passes
// such a message on, so any local user could disconnect rdmad from the bus
// with one call, or one unicast signal, which the system bus's default
// policy lets everyone send: rdmad then left the bus, retried, and was
// disconnected again. guardedConn stands between godbus and the socket: it
// reads each message whole, decodes it the way godbus will, and hands godbus
// in its place a message godbus drops (an invalid message type) when the
// decode would have failed, or panicked. The connection stays; the message
// is reported (the D-Bus service counts it in
// rdmad_dbus_calls_refused_total{reason="undecodable"} and logs it), and a
// method call that expects a reply is answered InvalidArgs
// by guardedConn itself, so that its caller does not wait for a timeout.

// maxGuardedMessage bounds the message guardedConn reads whole. rdmad's
// calls and the replies it waits for are a few kilobytes; a larger message
// is read past in pieces and dropped, so a caller cannot make rdmad hold
// the 128 MiB the protocol allows.
const maxGuardedMessage = 1 << 20

// droppedMessage is what godbus reads in place of a message it cannot
// decode: a little-endian message of type 0 with no header fields and no
// body, which godbus's ReadMessage refuses as an InvalidMessageError
// ("invalid message type") and its reader then skips.
var droppedMessage = []byte{'l', 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0}

// Dropped says what the guard dropped, for the log. The header's strings
// are quoted where they are not plain text (the guard does not trust what
// it could not decode).
type Dropped struct {
	Why                                  string
	Bytes                                int
	Sender, Interface, Member, Signature string

	rawSender string
}

// guardedConn is a connection to the bus whose incoming messages, after
// the authentication, are read whole and checked before godbus reads them.
type guardedConn struct {
	net.Conn
	in     *bufio.Reader
	onDrop func(Dropped)

	mu      sync.Mutex // guards began and serializes writes
	began   bool       // the client sent BEGIN: the bytes are messages
	serial  uint32     // the serial of guardedConn's own last error reply
	pending []byte     // the current message, still to be read by godbus
}

func newGuardedConn(c net.Conn, onDrop func(Dropped)) *guardedConn {
	if onDrop == nil {
		onDrop = func(Dropped) {}
	}
	return &guardedConn{Conn: c, in: bufio.NewReaderSize(c, 8<<10), onDrop: onDrop}
}

// Write passes the bytes on and notes the end of the authentication (the
// client's BEGIN line: the bus sends nothing after its last answer to the
// authentication until the client's first message, so every byte read
// after it is a message).
// godbus writes each message with one Write (under its own lock), so a
// reply of guardedConn's, written under mu, never splits one of godbus's.
func (g *guardedConn) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.began && bytes.HasSuffix(p, []byte("BEGIN\r\n")) {
		g.began = true
	}
	return g.Conn.Write(p)
}

// Read serves godbus the authentication's lines as they come, then one
// checked message at a time.
func (g *guardedConn) Read(p []byte) (int, error) {
	g.mu.Lock()
	began := g.began
	g.mu.Unlock()
	if !began {
		return g.in.Read(p)
	}
	if len(g.pending) == 0 {
		msg, err := g.next()
		if err != nil {
			return 0, err
		}
		g.pending = msg
	}
	n := copy(p, g.pending)
	g.pending = g.pending[n:]
	return n, nil
}

// next reads one message from the bus and returns it, or droppedMessage in
// its place.
func (g *guardedConn) next() ([]byte, error) {
	var fixed [16]byte
	if _, err := io.ReadFull(g.in, fixed[:]); err != nil {
		return nil, err
	}
	var order binary.ByteOrder
	switch fixed[0] {
	case 'l':
		order = binary.LittleEndian
	case 'B':
		order = binary.BigEndian
	default:
		// The bus sent no message: nothing after this can be framed.
		return nil, fmt.Errorf("dbus: the bus sent a message with byte order %#x; rdmad reconnects", fixed[0])
	}
	bodyLen := uint64(order.Uint32(fixed[4:8]))
	fieldsLen := uint64(order.Uint32(fixed[12:16]))
	if 16+fieldsLen+bodyLen > 1<<27 {
		return nil, fmt.Errorf("dbus: the bus sent a message of %d bytes, over the protocol's 128 MiB; rdmad reconnects", 16+fieldsLen+bodyLen)
	}
	total := 16 + (fieldsLen+7)&^7 + bodyLen
	if total > maxGuardedMessage {
		if _, err := io.CopyN(io.Discard, g.in, int64(total-16)); err != nil {
			return nil, err
		}
		g.onDrop(Dropped{Why: fmt.Sprintf("a message of %d bytes, over the %d rdmad reads", total, maxGuardedMessage), Bytes: int(total)})
		return droppedMessage, nil
	}
	msg := make([]byte, total)
	copy(msg, fixed[:])
	if _, err := io.ReadFull(g.in, msg[16:]); err != nil {
		return nil, err
	}
	if err := trialDecode(msg); err != nil {
		info := headerInfo(msg, order, int(fieldsLen))
		info.Why, info.Bytes = err.Error(), int(total)
		g.onDrop(info)
		const methodCall, noReplyExpected = 1, 0x1
		if fixed[1] == methodCall && fixed[2]&noReplyExpected == 0 {
			if err := g.replyInvalidArgs(order.Uint32(fixed[8:12]), info); err != nil {
				return nil, err
			}
		}
		return droppedMessage, nil
	}
	return msg, nil
}

// replyInvalidArgs answers the method call of serial that the dropped
// message was, from its sender, with InvalidArgs.
func (g *guardedConn) replyInvalidArgs(serial uint32, info Dropped) error {
	if serial == 0 || !isUniqueName(info.rawSender) {
		// The bus sets the sender of every message it passes on; without
		// one there is no one to answer.
		return nil
	}
	text := fmt.Sprintf("rdmad cannot decode the arguments of %s (signature %s): %s; send the arguments "+
		"busctl introspect shows for the method", info.Member, info.Signature, info.Why)
	reply := &dbus.Message{Type: dbus.TypeError, Headers: map[dbus.HeaderField]dbus.Variant{
		dbus.FieldReplySerial: dbus.MakeVariant(serial),
		dbus.FieldDestination: dbus.MakeVariant(info.rawSender),
		dbus.FieldErrorName:   dbus.MakeVariant("org.freedesktop.DBus.Error.InvalidArgs"),
		dbus.FieldSignature:   dbus.MakeVariant(dbus.SignatureOf("")),
	}, Body: []any{strings.ToValidUTF8(text, "?")}}
	var buf bytes.Buffer
	if err := reply.EncodeTo(&buf, binary.LittleEndian); err != nil {
		return nil // nothing the bus would take
	}
	b := buf.Bytes()
	g.mu.Lock()
	defer g.mu.Unlock()
	// godbus's serials count up from 1; guardedConn's count down from
	// the top, so that they never meet on one connection's life.
	g.serial--
	if g.serial == 0 {
		g.serial--
	}
	binary.LittleEndian.PutUint32(b[8:12], g.serial)
	_, err := g.Conn.Write(b)
	return err
}

// isUniqueName says whether s is a bus's unique connection name (":1.42").
func isUniqueName(s string) bool {
	if len(s) < 2 || len(s) > 255 || s[0] != ':' {
		return false
	}
	for _, c := range []byte(s[1:]) {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// trialDecode decodes msg as godbus's reader will and returns what would
// make godbus close the connection: an error other than an
// InvalidMessageError (which godbus skips), or a panic.
func trialDecode(msg []byte) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("the decoder panicked: %v", v)
		}
	}()
	_, err = dbus.DecodeMessage(bytes.NewReader(msg))
	var skipped dbus.InvalidMessageError
	if err == nil || errors.As(err, &skipped) {
		return nil
	}
	return err
}

// headerInfo reads the sender, interface, member and signature header
// fields of msg as far as they can be read, for the log.
func headerInfo(msg []byte, order binary.ByteOrder, fieldsLen int) Dropped {
	var info Dropped
	end := 16 + fieldsLen
	if end > len(msg) {
		return info
	}
	pos := 16
	align := func(n int) { pos = (pos + n - 1) &^ (n - 1) }
	for pos < end {
		align(8)
		if pos+3 > end {
			break
		}
		code := msg[pos]
		sigLen := int(msg[pos+1])
		if pos+2+sigLen+1 > end {
			break
		}
		sig := string(msg[pos+2 : pos+2+sigLen])
		pos += 2 + sigLen + 1
		var val string
		switch sig {
		case "s", "o":
			align(4)
			if pos+4 > end {
				return info
			}
			n := int(order.Uint32(msg[pos : pos+4]))
			if n < 0 || pos+4+n+1 > end {
				return info
			}
			val = string(msg[pos+4 : pos+4+n])
			pos += 4 + n + 1
		case "g":
			if pos+1 > end {
				return info
			}
			n := int(msg[pos])
			if pos+1+n+1 > end {
				return info
			}
			val = string(msg[pos+1 : pos+1+n])
			pos += 1 + n + 1
		case "u":
			align(4)
			pos += 4
		default:
			return info
		}
		switch code {
		case 2:
			info.Interface = logText(val)
		case 3:
			info.Member = logText(val)
		case 7:
			info.Sender, info.rawSender = logText(val), val
		case 8:
			info.Signature = logText(val)
		}
	}
	return info
}

// logText is a header string as it may reach the journal: the bus checked
// names and signatures, but what rdmad could not decode it does not trust,
// so it is quoted (control bytes and invalid UTF-8 escaped) and cut at 80
// bytes.
func logText(s string) string {
	if len(s) > 80 {
		s = s[:80] + "..."
	}
	q := strconv.QuoteToASCII(s)
	if q == `"`+s+`"` {
		return s
	}
	return q
}

// SystemBusSocket is the system bus's socket when DBUS_SYSTEM_BUS_ADDRESS
// is not set (the D-Bus specification's default).
const SystemBusSocket = "/run/dbus/system_bus_socket"

// SystemBusAddress is the system bus's address as godbus's
// ConnectSystemBus finds it, except that a machine without a system bus
// gives an error wrapping fs.ErrNotExist (godbus says only "system bus not
// found"). An address from DBUS_SYSTEM_BUS_ADDRESS naming one socket path
// (unix:path=P, the usual form) is checked the same way.
func SystemBusAddress() (string, error) {
	addr := os.Getenv("DBUS_SYSTEM_BUS_ADDRESS")
	if addr == "" {
		addr = "unix:path=" + SystemBusSocket
	}
	if path, ok := strings.CutPrefix(addr, "unix:path="); ok && !strings.ContainsAny(path, ",;%") {
		if _, err := os.Stat(path); err != nil {
			return "", fmt.Errorf("no system bus (%w)", err)
		}
	}
	return addr, nil
}

// Connect is dbus.Connect through the guard: it dials addr, a D-Bus
// address of unix sockets (unix:path=P or unix:abstract=N, the system
// bus's forms; the first entry that connects is used), authenticates and
// says Hello. onDrop, when set, hears of every message the guard dropped.
func Connect(ctx context.Context, addr string, onDrop func(Dropped), opts ...dbus.ConnOption) (*dbus.Conn, error) {
	gc, err := dial(ctx, addr, onDrop)
	if err != nil {
		return nil, err
	}
	conn, err := dbus.NewConn(gc, opts...)
	if err != nil {
		gc.Close()
		return nil, err
	}
	if err := conn.Auth(nil); err != nil {
		conn.Close()
		return nil, err
	}
	if err := conn.Hello(); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

func dial(ctx context.Context, addr string, onDrop func(Dropped)) (*guardedConn, error) {
	var errs []error
	for _, entry := range strings.Split(addr, ";") {
		if entry == "" {
			continue
		}
		path, err := unixSocketOf(entry)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, "unix", path)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		return newGuardedConn(c, onDrop), nil
	}
	if len(errs) == 0 {
		return nil, fmt.Errorf("dbus: bus address %q names no socket", addr)
	}
	return nil, errors.Join(errs...)
}

// unixSocketOf is the socket an address entry names: a path, or an
// abstract name (with net's leading "@").
func unixSocketOf(entry string) (string, error) {
	kind, rest, ok := strings.Cut(entry, ":")
	if !ok || kind != "unix" {
		return "", fmt.Errorf("dbus: bus address %q: rdmad connects to the system bus over a unix socket only (unix:path= or unix:abstract=); set DBUS_SYSTEM_BUS_ADDRESS to one", entry)
	}
	for _, kv := range strings.Split(rest, ",") {
		k, v, _ := strings.Cut(kv, "=")
		val, err := url.PathUnescape(v)
		if err != nil {
			return "", fmt.Errorf("dbus: bus address %q: %s: %v", entry, k, err)
		}
		switch k {
		case "path":
			return val, nil
		case "abstract":
			return "@" + val, nil
		}
	}
	return "", fmt.Errorf("dbus: bus address %q names no path= or abstract=; rdmad needs one", entry)
}
