package daemon

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/client/apitype"
)

// A fakeJournal is a unixgram socket in a temporary directory that stands
// in for journald's: journalSocket points at it and JOURNAL_STREAM says
// stderr (fd 2 of the test binary) is the journal's stream, as systemd
// sets it for a service. It decodes every entry sent to it, also those
// passed as a memfd.
type fakeJournal struct {
	path    string
	conn    *net.UnixConn
	entries chan map[string]string
	errs    chan error

	mu   sync.Mutex
	seen []map[string]string // what next has taken from entries
}

func newFakeJournal(t *testing.T) *fakeJournal {
	t.Helper()
	path := filepath.Join(t.TempDir(), "journal.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatalf("fake journal socket: %v", err)
	}
	old := journalSocket
	journalSocket = path
	t.Cleanup(func() { journalSocket = old; conn.Close() })
	var st unix.Stat_t
	if err := unix.Fstat(2, &st); err != nil {
		t.Fatalf("fstat stderr: %v", err)
	}
	t.Setenv("JOURNAL_STREAM", fmt.Sprintf("%d:%d", st.Dev, st.Ino))
	j := &fakeJournal{path: path, conn: conn, entries: make(chan map[string]string, 1024), errs: make(chan error, 16)}
	go j.read()
	return j
}

func (j *fakeJournal) read() {
	buf := make([]byte, 4<<20)
	oob := make([]byte, unix.CmsgSpace(4*4))
	for {
		n, oobn, _, _, err := j.conn.ReadMsgUnix(buf, oob)
		if err != nil {
			close(j.entries)
			return
		}
		data := buf[:n]
		if oobn > 0 {
			if data, err = readPassedFD(oob[:oobn]); err != nil {
				j.errs <- err
				continue
			}
		}
		e, err := parseJournal(data)
		if err != nil {
			j.errs <- err
			continue
		}
		j.entries <- e
	}
}

// readPassedFD reads the file (a memfd) passed with SCM_RIGHTS, from its
// start.
func readPassedFD(oob []byte) ([]byte, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil || len(msgs) != 1 {
		return nil, fmt.Errorf("control message: %v (%d messages)", err, len(msgs))
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		return nil, fmt.Errorf("passed fds: %v (%d)", err, len(fds))
	}
	f := os.NewFile(uintptr(fds[0]), "passed")
	defer f.Close()
	seals, err := unix.FcntlInt(f.Fd(), unix.F_GET_SEALS, 0)
	if err != nil || seals&unix.F_SEAL_WRITE == 0 {
		return nil, fmt.Errorf("passed fd is not a write-sealed memfd (seals %#x, %v): journald would copy or refuse it", seals, err)
	}
	return io.ReadAll(io.NewSectionReader(f, 0, 1<<30))
}

// parseJournal decodes the native protocol: KEY=value lines, or KEY, a
// newline, a 64-bit little-endian length, the value and a newline.
func parseJournal(b []byte) (map[string]string, error) {
	e := map[string]string{}
	for len(b) > 0 {
		nl := bytes.IndexByte(b, '\n')
		if nl < 0 {
			return nil, fmt.Errorf("entry ends without a newline: %q", b)
		}
		line := string(b[:nl])
		b = b[nl+1:]
		if k, v, ok := strings.Cut(line, "="); ok {
			e[k] = v
			continue
		}
		if len(b) < 8 {
			return nil, fmt.Errorf("field %s: no length", line)
		}
		n := binary.LittleEndian.Uint64(b)
		b = b[8:]
		if uint64(len(b)) < n+1 || b[n] != '\n' {
			return nil, fmt.Errorf("field %s: length %d does not fit", line, n)
		}
		e[line] = string(b[:n])
		b = b[n+1:]
	}
	return e, nil
}

// next returns the first entry received whose fields include every one
// of want (a value "*" matches any value), waiting for it up to timeout.
func (j *fakeJournal) next(t *testing.T, timeout time.Duration, want map[string]string) map[string]string {
	t.Helper()
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, e := range j.seen {
		if matches(e, want) {
			return e
		}
	}
	deadline := time.After(timeout)
	for {
		select {
		case e, ok := <-j.entries:
			if !ok {
				t.Fatalf("fake journal closed while waiting for %v", want)
			}
			j.seen = append(j.seen, e)
			if matches(e, want) {
				return e
			}
		case err := <-j.errs:
			t.Fatalf("fake journal received an entry it cannot decode: %v", err)
		case <-deadline:
			t.Fatalf("no journal entry with %v within %v", want, timeout)
		}
	}
}

func matches(e, want map[string]string) bool {
	for k, v := range want {
		got, ok := e[k]
		if !ok || (v != "*" && got != v) {
			return false
		}
	}
	return true
}

// TestJournalNative: with JOURNAL_STREAM naming stderr, a tagged event is
// one native entry (MESSAGE_ID, priority, identifier, each attribute a
// field), nothing goes to stderr, and a nil error is no field.
func TestJournalNative(t *testing.T) {
	j := newFakeJournal(t)
	var stderr bytes.Buffer
	log := newLogger(&stderr, new(slog.LevelVar)).With("component", "peers")
	var noErr error
	log.Warn("peer down", apitype.MessageIDKey, apitype.MsgPeerDown, "peer", "192.0.2.17", "reason", "mlx5_0/1: 3 probes lost", "err", noErr,
		slog.Group("path", "local", "mlx5_0/1"), "detail", "line one\nline two")

	e := j.next(t, 5*time.Second, map[string]string{"MESSAGE_ID": apitype.MsgPeerDown})
	want := map[string]string{
		"PRIORITY": "4", "SYSLOG_IDENTIFIER": "rdmad", "COMPONENT": "peers", "PEER": "192.0.2.17",
		"REASON": "mlx5_0/1: 3 probes lost", "PATH_LOCAL": "mlx5_0/1", "DETAIL": "line one\nline two",
	}
	for k, v := range want {
		if e[k] != v {
			t.Errorf("field %s = %q, want %q (entry %v)", k, e[k], v, e)
		}
	}
	if _, ok := e["ERR"]; ok {
		t.Errorf("a nil error became the field ERR=%q", e["ERR"])
	}
	msg := e["MESSAGE"]
	if !strings.HasPrefix(msg, "peer down component=peers peer=192.0.2.17 ") || !strings.Contains(msg, "path.local=mlx5_0/1") {
		t.Errorf("MESSAGE %q: want the message, then the attributes as key=value", msg)
	}
	if strings.Contains(msg, apitype.MsgPeerDown) || strings.Contains(msg, "err=") {
		t.Errorf("MESSAGE %q carries the MESSAGE_ID or a nil error", msg)
	}
	if stderr.Len() != 0 {
		t.Errorf("the entry went to the journal socket and also to stderr: %q", stderr.String())
	}
}

// TestJournalMessageQuotes is issue #24's forged journal lines: a value
// with a newline, an ESC, invalid UTF-8 or a bidi control appears in
// MESSAGE quoted (one line, nothing a terminal acts on), while its field
// keeps the bytes.
func TestJournalMessageQuotes(t *testing.T) {
	j := newFakeJournal(t)
	log := newLogger(io.Discard, new(slog.LevelVar))
	forged := "192.0.2.17\nrdmad[1]:configuration-loaded\x1b[2J\xff\u202e" // no blank: quoted for its controls alone
	log.Info("D-Bus method call", "peer", forged, "plain", "tor-a")
	e := j.next(t, 5*time.Second, map[string]string{"PEER": forged})
	want := "D-Bus method call peer=" + strconv.Quote(forged) + " plain=tor-a"
	if e["MESSAGE"] != want {
		t.Errorf("MESSAGE %q, want %q", e["MESSAGE"], want)
	}
	if strings.ContainsAny(e["MESSAGE"], "\n\x1b\u202e") {
		t.Errorf("MESSAGE %q carries a raw newline, ESC or bidi control", e["MESSAGE"])
	}
}

// TestJournalLargeEntry: an entry larger than a datagram reaches the
// journal as a sealed memfd.
func TestJournalLargeEntry(t *testing.T) {
	j := newFakeJournal(t)
	var stderr bytes.Buffer
	big := strings.Repeat("x", 1<<20)
	newLogger(&stderr, new(slog.LevelVar)).Error("configuration rejected", apitype.MessageIDKey, apitype.MsgConfigRejected, "err", big)
	e := j.next(t, 5*time.Second, map[string]string{"MESSAGE_ID": apitype.MsgConfigRejected})
	if e["ERR"] != big || e["PRIORITY"] != "3" {
		t.Errorf("large entry: ERR has %d bytes (want %d), PRIORITY %q", len(e["ERR"]), len(big), e["PRIORITY"])
	}
	if stderr.Len() != 0 {
		t.Errorf("the large entry also went to stderr (%d bytes)", stderr.Len())
	}
}

// TestJournalFallback: when the journal socket refuses an entry, the line
// goes to stderr (the journal's stream) once, as text.
func TestJournalFallback(t *testing.T) {
	j := newFakeJournal(t)
	var stderr bytes.Buffer
	log := newLogger(&stderr, new(slog.LevelVar))
	j.conn.Close()
	os.Remove(j.path)
	log.Info("RDMA device added", apitype.MessageIDKey, apitype.MsgDeviceAdded, "device", "rxe0")
	out := stderr.String()
	if strings.Count(out, "RDMA device added") != 1 || !strings.Contains(out, "device=rxe0") {
		t.Errorf("stderr after the journal socket went away: %q, want the line once", out)
	}
}

// TestTextLog: without the journal, lines are text on stderr, with the
// MESSAGE_ID as one more key and no nil error.
func TestTextLog(t *testing.T) {
	t.Setenv("JOURNAL_STREAM", "")
	var stderr bytes.Buffer
	newLogger(&stderr, new(slog.LevelVar)).Info("inventory read", "devices", 2, "err", error(nil), apitype.MessageIDKey, apitype.MsgDeviceAdded)
	out := stderr.String()
	if !strings.Contains(out, "devices=2") || !strings.Contains(out, "MESSAGE_ID="+apitype.MsgDeviceAdded) {
		t.Errorf("text line %q lacks its attributes", out)
	}
	if strings.Contains(out, "err=") {
		t.Errorf("text line %q has a nil error", out)
	}
}

// TestJournalNoSocket: JOURNAL_STREAM set but no journald socket: text on
// stderr.
func TestJournalNoSocket(t *testing.T) {
	j := newFakeJournal(t)
	journalSocket = filepath.Join(filepath.Dir(j.path), "absent.sock")
	var stderr bytes.Buffer
	newLogger(&stderr, new(slog.LevelVar)).Info("hello", "k", "v")
	if !strings.Contains(stderr.String(), "k=v") {
		t.Errorf("stderr %q, want the text line when journald's socket is absent", stderr.String())
	}
	select {
	case e := <-j.entries:
		t.Errorf("an entry reached the journal socket that is not configured: %v", e)
	default:
	}
}
