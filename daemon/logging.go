package daemon

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unicode"

	"github.com/coreos/go-systemd/v22/journal"
	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/client/apitype"
)

// journalSocket is journald's native protocol socket. Tests point it at a
// socket of their own.
var journalSocket = "/run/systemd/journal/socket"

// newLogger logs to the journal natively, with structured fields (DEVICE=,
// NETDEV=, POLICY=, MESSAGE_ID=, ...), when JOURNAL_STREAM says stderr is
// connected to it (systemd started rdmad) and journald's socket answers; as
// text to stderr otherwise. Each record goes one way only: a record the
// journal socket refuses is written to stderr instead, never to both.
//
// Attributes whose value is a nil error are left out in both forms (no
// "err=<nil>" on success).
func newLogger(stderr io.Writer, level *slog.LevelVar) *slog.Logger {
	text := slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level, ReplaceAttr: dropNil})
	if ok, _ := journal.StderrIsJournalStream(); ok {
		if j, err := dialJournal(journalSocket); err == nil {
			return slog.New(&journalHandler{level: level, out: j, fallback: text})
		}
	}
	return slog.New(text)
}

// dropNil is a ReplaceAttr that leaves out attributes with a nil value
// (a nil error passed as "err").
func dropNil(_ []string, a slog.Attr) slog.Attr {
	if isNil(a.Value) {
		return slog.Attr{}
	}
	return a
}

func isNil(v slog.Value) bool { return v.Kind() == slog.KindAny && v.Any() == nil }

func parseLevel(s string) slog.Level {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return slog.LevelInfo
	}
	return l
}

// A journalHandler sends records to journald's native protocol, each attribute
// as an upper-case field, so `journalctl -u rdmad NETDEV=ens1f0` finds them.
// The attribute apitype.MessageIDKey becomes the MESSAGE_ID field (the key
// of the message catalog) and is left out of the MESSAGE text.
type journalHandler struct {
	level slog.Leveler
	out   *journalConn
	// fallback writes a record the journal socket refused to stderr.
	fallback slog.Handler
	attrs    []prefixed
	prefix   prefix // of open groups
}

// A prefixed attribute remembers the groups open when it was added.
type prefixed struct {
	prefix
	a slog.Attr
}

// A prefix is the open groups' part of field names and of the text.
type prefix struct{ field, text string }

func (p prefix) group(name string) prefix {
	return prefix{p.field + name + "_", p.text + name + "."}
}

func (h *journalHandler) Enabled(_ context.Context, l slog.Level) bool {
	return l >= h.level.Level()
}

// reservedFields are set by the handler; an attribute that maps to one of
// them is renamed ATTR_<name>.
var reservedFields = map[string]bool{"MESSAGE": true, "PRIORITY": true, "SYSLOG_IDENTIFIER": true, "MESSAGE_ID": true}

func (h *journalHandler) Handle(ctx context.Context, r slog.Record) error {
	e := journalEntry{index: map[string]int{}}
	var text strings.Builder
	text.WriteString(r.Message)
	msgID := ""
	var add func(p prefix, a slog.Attr)
	add = func(p prefix, a slog.Attr) {
		a.Value = a.Value.Resolve()
		if a.Key == apitype.MessageIDKey && a.Value.Kind() == slog.KindString {
			msgID = a.Value.String()
			return
		}
		if a.Value.Kind() == slog.KindGroup {
			if a.Key != "" {
				p = p.group(a.Key)
			}
			for _, g := range a.Value.Group() {
				add(p, g)
			}
			return
		}
		if a.Key == "" || isNil(a.Value) {
			return
		}
		k := fieldName(p.field + a.Key)
		if reservedFields[k] {
			k = "ATTR_" + k
		}
		v := a.Value.String()
		e.set(k, v)
		fmt.Fprintf(&text, " %s%s=%s", p.text, a.Key, quoteIfNeeded(v))
	}
	for _, pa := range h.attrs {
		add(pa.prefix, pa.a)
	}
	r.Attrs(func(a slog.Attr) bool { add(h.prefix, a); return true })

	head := []journalField{{"MESSAGE", text.String()}, {"PRIORITY", strconv.Itoa(int(priority(r.Level)))}, {"SYSLOG_IDENTIFIER", "rdmad"}}
	if msgID != "" {
		head = append(head, journalField{"MESSAGE_ID", msgID})
	}
	if err := h.out.send(append(head, e.fields...)); err != nil {
		// journald restarting, or its socket gone: stderr is still the
		// journal's stream, so the line is not lost (its fields are).
		return h.fallback.Handle(ctx, r)
	}
	return nil
}

func (h *journalHandler) WithAttrs(as []slog.Attr) slog.Handler {
	n := *h
	n.attrs = append([]prefixed(nil), h.attrs...)
	for _, a := range as {
		n.attrs = append(n.attrs, prefixed{h.prefix, a})
	}
	n.fallback = h.fallback.WithAttrs(as)
	return &n
}

func (h *journalHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	n := *h
	n.prefix = h.prefix.group(name)
	n.fallback = h.fallback.WithGroup(name)
	return &n
}

func priority(l slog.Level) journal.Priority {
	switch {
	case l >= slog.LevelError:
		return journal.PriErr
	case l >= slog.LevelWarn:
		return journal.PriWarning
	case l >= slog.LevelInfo:
		return journal.PriInfo
	}
	return journal.PriDebug
}

// fieldName makes a valid journal field name: upper case, [A-Z0-9_], not
// starting with "_" (reserved for trusted fields).
func fieldName(k string) string {
	b := []rune(strings.ToUpper(k))
	for i, r := range b {
		if !(r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_') {
			b[i] = '_'
		}
	}
	s := strings.TrimLeft(string(b), "_")
	if s == "" || unicode.IsDigit(rune(s[0])) {
		s = "F_" + s
	}
	return s
}

// quoteIfNeeded quotes a value of the MESSAGE text when it has a blank,
// a quote or an '=' (which would make key=value ambiguous), or anything
// strconv.Quote would change: a newline would forge a second line in
// journalctl's output, an ESC would reach the terminal of whoever reads
// it, invalid UTF-8 or a bidi control would hide what follows. The field
// itself keeps the value as it is (a journal field may hold any bytes).
func quoteIfNeeded(s string) string {
	if q := strconv.Quote(s); s == "" || strings.ContainsAny(s, " \"=") || q[1:len(q)-1] != s {
		return q
	}
	return s
}

// A journalField is one KEY=value of a journal entry.
type journalField struct{ key, value string }

// A journalEntry collects an entry's fields in order; a key set twice
// keeps its first place and its last value.
type journalEntry struct {
	fields []journalField
	index  map[string]int
}

func (e *journalEntry) set(k, v string) {
	if i, ok := e.index[k]; ok {
		e.fields[i].value = v
		return
	}
	e.index[k] = len(e.fields)
	e.fields = append(e.fields, journalField{k, v})
}

// A journalConn writes entries to journald's native protocol socket
// (https://systemd.io/JOURNAL_NATIVE_PROTOCOL/): one datagram per entry
// from an unconnected socket, so that a restarted journald is found again
// at its path; an entry too large for a datagram goes as a sealed memfd.
// It is safe for concurrent use.
type journalConn struct {
	addr *net.UnixAddr
	conn *net.UnixConn
}

// dialJournal opens a socket to send entries to the journal at path, and
// checks that something receives there.
func dialJournal(path string) (*journalConn, error) {
	probe, err := net.Dial("unixgram", path)
	if err != nil {
		return nil, fmt.Errorf("journal socket %s: %w", path, err)
	}
	probe.Close()
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Net: "unixgram"})
	if err != nil {
		return nil, fmt.Errorf("journal: open a datagram socket: %w", err)
	}
	return &journalConn{addr: &net.UnixAddr{Name: path, Net: "unixgram"}, conn: conn}, nil
}

// encodeJournal writes fields in the native protocol: KEY=value lines, or,
// for a value with a newline, KEY, a newline, its length as a 64-bit
// little-endian number, the value and a newline.
func encodeJournal(fields []journalField) []byte {
	var b bytes.Buffer
	for _, f := range fields {
		if !strings.ContainsRune(f.value, '\n') {
			b.WriteString(f.key)
			b.WriteByte('=')
			b.WriteString(f.value)
			b.WriteByte('\n')
			continue
		}
		b.WriteString(f.key)
		b.WriteByte('\n')
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(f.value)))
		b.Write(n[:])
		b.WriteString(f.value)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

func (j *journalConn) send(fields []journalField) error {
	data := encodeJournal(fields)
	_, _, err := j.conn.WriteMsgUnix(data, nil, j.addr)
	if err == nil || !(errors.Is(err, syscall.EMSGSIZE) || errors.Is(err, syscall.ENOBUFS)) {
		return err
	}
	// Too large for one datagram: hand journald a sealed memfd holding
	// the entry (memfd_create is in the unit's @system-service filter).
	fd, err := unix.MemfdCreate("rdmad-journal", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return fmt.Errorf("journal: memfd for a %d-byte entry: %w", len(data), err)
	}
	f := os.NewFile(uintptr(fd), "rdmad-journal")
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("journal: write a %d-byte entry to its memfd: %w", len(data), err)
	}
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE|unix.F_SEAL_SEAL); err != nil {
		return fmt.Errorf("journal: seal the memfd: %w", err)
	}
	_, _, err = j.conn.WriteMsgUnix(nil, unix.UnixRights(int(f.Fd())), j.addr)
	return err
}
