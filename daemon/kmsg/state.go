package kmsg

import (
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/rdmad/rdmad/client/apitype"
)

// MaxLine bounds KernelFault.Line in bytes, after escaping.
const MaxLine = 256

// MaxRecent bounds KernelFault.Recent: the times a link-down fault keeps
// for the flap rule.
const MaxRecent = 16

// A key is one fault: a device, a pattern and, for a per-netdev pattern,
// the netdev.
type key struct{ device, pattern, netdev string }

// A table holds one KernelFault per (device, pattern, netdev), at most max
// of them: a new one evicts the one seen least recently.
type table struct {
	max     int
	entries map[key]*entry
	scratch []byte // the escaped line being compared, reused
}

// An entry is a fault and the hash of the raw line it holds, so that a
// flood of one message is not escaped again for each copy (a collision,
// one in 2^64, would keep the previous line).
type entry struct {
	apitype.KernelFault
	raw uint64
	// recent are the times of the last nrecent records of a link-down
	// pattern (hit.down), oldest first: KernelFault.Recent when listed.
	recent  [MaxRecent]time.Time
	nrecent int
	down    bool
}

func newTable(max int) *table {
	return &table{max: max, entries: make(map[key]*entry, max), scratch: make([]byte, 0, MaxLine)}
}

// add counts one record of fault h seen at at and reports whether it made
// a new entry (so the set of faults changed, not only a count). Adding to
// an existing entry does not allocate unless the line differs from the
// last.
func (t *table) add(h hit, priority int, line []byte, at time.Time) (isNew, evicted bool) {
	k := key{h.device, h.pattern, h.netdev}
	e, ok := t.entries[k]
	if !ok {
		if len(t.entries) >= t.max {
			t.evictOldest()
			evicted = true
		}
		e = &entry{KernelFault: apitype.KernelFault{Device: h.device, Pattern: h.pattern, Class: h.class, Netdev: h.netdev,
			First: at, Last: at}, down: h.down}
		t.entries[k] = e
		isNew = true
	}
	if e.down {
		if e.nrecent == MaxRecent {
			copy(e.recent[:], e.recent[1:])
			e.nrecent--
		}
		e.recent[e.nrecent] = at
		e.nrecent++
	}
	// Only the first MaxLine+1 bytes can show (every byte takes at least
	// one), so they are what is hashed and escaped.
	line = line[:min(len(line), MaxLine+1)]
	if h := fnv1a(line); isNew || h != e.raw {
		t.scratch = printable(t.scratch[:0], line, MaxLine)
		if string(t.scratch) != e.Line {
			e.Line = string(t.scratch)
		}
		e.raw = h
	}
	e.Priority = priority
	e.Count++
	if at.Before(e.First) {
		e.First = at
	}
	if at.After(e.Last) {
		e.Last = at
	}
	return isNew, evicted
}

func (t *table) evictOldest() {
	var oldest key
	var at time.Time
	first := true
	for k, e := range t.entries {
		if first || e.Last.Before(at) || e.Last.Equal(at) && less(k, oldest) {
			oldest, at, first = k, e.Last, false
		}
	}
	delete(t.entries, oldest)
}

// less orders keys by device, pattern, then netdev.
func less(a, b key) bool {
	if a.device != b.device {
		return a.device < b.device
	}
	if a.pattern != b.pattern {
		return a.pattern < b.pattern
	}
	return a.netdev < b.netdev
}

// expire drops the entries whose Last is window or more before now and
// reports whether it dropped any.
func (t *table) expire(now time.Time, window time.Duration) bool {
	dropped := false
	for k, e := range t.entries {
		if !now.Before(e.Last.Add(window)) {
			delete(t.entries, k)
			dropped = true
		}
	}
	return dropped
}

// nextExpiry is when the first entry expires; zero when there is none.
func (t *table) nextExpiry(window time.Duration) time.Time {
	var next time.Time
	for _, e := range t.entries {
		if at := e.Last.Add(window); next.IsZero() || at.Before(next) {
			next = at
		}
	}
	return next
}

// forget drops every entry of device and reports whether there was one.
func (t *table) forget(device string) bool {
	dropped := false
	for k := range t.entries {
		if k.device == device {
			delete(t.entries, k)
			dropped = true
		}
	}
	return dropped
}

// list returns copies of the entries ordered by device, pattern, then
// netdev.
func (t *table) list() []apitype.KernelFault {
	out := make([]apitype.KernelFault, 0, len(t.entries))
	for _, e := range t.entries {
		f := e.KernelFault
		if e.nrecent > 0 {
			f.Recent = slices.Clone(e.recent[:e.nrecent])
		}
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b apitype.KernelFault) int {
		if c := strings.Compare(a.Device, b.Device); c != 0 {
			return c
		}
		if c := strings.Compare(a.Pattern, b.Pattern); c != 0 {
			return c
		}
		return strings.Compare(a.Netdev, b.Netdev)
	})
	return out
}

// fnv1a is the 64-bit FNV-1a hash of b.
func fnv1a(b []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range b {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return h
}

// printable appends b to dst as printable text of at most max bytes:
// control characters (C0, DEL, C1), bidirectional overrides and isolates
// (which could make a terminal show the line in another order than it
// is), other non-printable characters and invalid UTF-8 become escapes
// (nextPiece); a line cut short ends with "..." and never in the middle
// of an escape or a character. The kernel already escapes what it writes to /dev/kmsg
// (\xNN for bytes below space and above '~'), so this is a second line of
// defence for what reaches an operator's terminal through rdmactl.
func printable(dst, b []byte, max int) []byte {
	const ellipsis = "..."
	var buf [10]byte
	used := 0
	for i := 0; i < len(b); {
		if c := b[i]; c >= 0x20 && c < 0x7f && used < max-len(ellipsis) {
			dst = append(dst, c)
			used++
			i++
			continue
		}
		p, size := nextPiece(b, i, &buf)
		if used+len(p) > max-len(ellipsis) && !fits(b[i:], max-used) {
			return append(dst, ellipsis...)
		}
		dst = append(dst, p...)
		used += len(p)
		i += size
	}
	return dst
}

// fits reports whether b, escaped, takes at most room bytes.
func fits(b []byte, room int) bool {
	var buf [10]byte
	for i := 0; i < len(b); {
		p, size := nextPiece(b, i, &buf)
		if room -= len(p); room < 0 {
			return false
		}
		i += size
	}
	return true
}

// nextPiece returns the escaped form of the character at b[i] (in buf
// when it is an escape) and how many bytes of b it takes. What is not a
// printable character or the space is escaped: invalid UTF-8 and C0, DEL
// and C1 controls as \xNN, other non-printable runes (format characters
// such as the bidirectional overrides, separators, unassigned code
// points) as \uNNNN or \UNNNNNNNN.
func nextPiece(b []byte, i int, buf *[10]byte) ([]byte, int) {
	if c := b[i]; c >= 0x20 && c < 0x7f {
		return b[i : i+1], 1 // printable ASCII: all the kernel writes
	}
	r, size := utf8.DecodeRune(b[i:])
	switch {
	case r == utf8.RuneError && size <= 1:
		return appendHex(buf[:0], `\x`, uint32(b[i]), 2), 1
	case r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0:
		return appendHex(buf[:0], `\x`, uint32(r), 2), size
	case r != ' ' && !unicode.IsPrint(r) || bidiControl(r):
		if r > 0xffff {
			return appendHex(buf[:0], `\U`, uint32(r), 8), size
		}
		return appendHex(buf[:0], `\u`, uint32(r), 4), size
	}
	return b[i : i+size], size
}

func appendHex(dst []byte, prefix string, v uint32, digits int) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, prefix...)
	for i := digits - 1; i >= 0; i-- {
		dst = append(dst, hex[v>>(4*uint(i))&0xf])
	}
	return dst
}

// bidiControl reports whether r is a Unicode bidirectional formatting
// character (marks, embeddings, overrides, isolates).
func bidiControl(r rune) bool {
	return r == 0x061c || r == 0x200e || r == 0x200f || r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069
}
