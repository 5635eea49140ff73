package probe

import (
	"bytes"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/rdmad/rdmad/probe/ud"
	"github.com/rdmad/rdmad/probe/wire"
)

// The inbox is the one part of a Manager other goroutines touch: the
// transport's replies and the control endpoint's messages wait in it for
// the manager's next pass instead of waking it each. At a thousand probes
// a second that is a thousand goroutine wakeups saved; control answers (and
// the queries this node answered, for their fingerprints) come a few
// hundred a second at ten thousand peers. The pass that expires probes
// takes the replies first, so a queued answer is never counted as lost.
// kick wakes the manager at once only while a one-shot probe waits
// (urgent).
type inbox struct {
	repMu    sync.Mutex
	replies  []ud.Reply
	repSpare []ud.Reply // the other reply buffer, Run's
	ansMu    sync.Mutex
	answers  []answer
	ansSpare []answer // the other answer buffer, Run's
	// ansExt and ansVal hold the queued answers' extensions and their
	// values (addAnswer copies them out of the control endpoint's read
	// buffer, which its next read overwrites); extTaken and valTaken are
	// those of the answers Run took, extSpare and valSpare the other
	// buffers, Run's. Like the answers they are used again, never made
	// per message. lastFP is the fingerprint value queued last.
	ansExt, extTaken, extSpare []wire.Ext
	ansVal, valTaken, valSpare []byte
	lastFP                     []byte
	// repShrink and ansShrink give up buffers a burst left oversized.
	repShrink, ansShrink shrinker
	kick                 chan struct{}
	urgent               atomic.Bool
	// ports says the transport's local ports changed (PortsChanged):
	// the next pass reads them, rather than the next publish.
	ports atomic.Bool
}

func newInbox() inbox { return inbox{kick: make(chan struct{}, 1)} }

// maxQueuedReplies bounds the replies waiting for the manager's pass.
const maxQueuedReplies = 8192

// maxQueuedAnswers bounds the control messages waiting for the manager's
// pass; more are dropped (a query not answered is asked again).
const maxQueuedAnswers = 4096

type answer struct {
	from netip.AddrPort
	m    wire.Message
	// query: m is a query this node answered, passed on for the
	// fingerprint it carries.
	query bool
	// at is when the answer was read off the socket: T4 of its clock
	// exchange (the manager takes it later, at its next pass).
	at time.Time
}

// OnReply takes an answered probe from the prober. It never blocks; a reply
// that finds the queue full is dropped and the probe counts as lost.
func (m *Manager) OnReply(r ud.Reply) { m.in.addReply(r) }

func (in *inbox) addReply(r ud.Reply) {
	in.repMu.Lock()
	if len(in.replies) < maxQueuedReplies {
		in.replies = append(in.replies, r)
	}
	in.repMu.Unlock()
	in.wake()
}

// addAnswer hands a control message to the manager's next pass. It never
// blocks. The manager wakes at once only while a one-shot probe waits;
// otherwise it runs within the batch window while queries are outstanding
// (tick).
//
// a.m's extensions may alias the caller's buffers (the control endpoint's,
// wire.DecodeAlias): they are copied into the inbox's.
func (in *inbox) addAnswer(a answer) {
	in.ansMu.Lock()
	if len(in.answers) < maxQueuedAnswers {
		a.m.Ext = in.keepExt(a.m.Ext)
		in.answers = append(in.answers, a)
	}
	in.ansMu.Unlock()
	in.wake()
}

// keepExt copies exts into the inbox's buffers (ansMu held). A buffer that
// grows leaves the extensions copied before in the old array, which stays
// theirs: the buffers are only ever appended to until Run is done with
// the answers. A fingerprint the same as the one queued last (a fleet's
// are alike) shares its copy: the values are never changed.
func (in *inbox) keepExt(exts []wire.Ext) []wire.Ext {
	if len(exts) == 0 {
		return nil
	}
	start := len(in.ansExt)
	for _, e := range exts {
		var v []byte
		switch {
		case e.Type == wire.ExtFingerprint && len(e.Value) > 0 && bytes.Equal(e.Value, in.lastFP):
			v = in.lastFP
		case len(e.Value) > 0:
			at := len(in.ansVal)
			in.ansVal = append(in.ansVal, e.Value...)
			v = in.ansVal[at:len(in.ansVal):len(in.ansVal)]
			if e.Type == wire.ExtFingerprint {
				in.lastFP = v
			}
		}
		in.ansExt = append(in.ansExt, wire.Ext{Type: e.Type, Value: v})
	}
	return in.ansExt[start:len(in.ansExt):len(in.ansExt)]
}

// A shrinker sizes a buffer that is used again (the inbox's) to what it
// holds: after a burst (the first resolves of every peer, a stall, a
// reload that adds peers), a buffer kept at the burst's size would be heap
// held for nothing ever after. It keeps the most a take held in the
// current period of shrinkAfter takes and in the one before (the
// high-water mark); once a period has passed, a buffer over twice that
// and over shrinkKeep bytes is given up for one of a quarter more than
// it: one allocation, not a regrowth by doubling at the next take. A burst
// that comes back within two periods finds its buffer kept.
type shrinker struct {
	takes     int
	hwm, last int  // the most held in this period and in the one before
	seen      bool // a whole period has passed
}

// shrinkAfter is the takes of one period: half a minute or more at four
// passes a second.
const shrinkAfter = 128

// shrinkKeep is the size up to which a buffer is kept whatever it held.
const shrinkKeep = 8 << 10

// size returns the capacity to keep a buffer of capacity c entries of
// size bytes at, after a take that held n: c, or less (0: none).
func (s *shrinker) size(n, c, size int) int {
	s.hwm = max(s.hwm, n)
	if s.takes++; s.takes == shrinkAfter {
		s.takes, s.last, s.hwm, s.seen = 0, s.hwm, 0, true
	}
	most := max(s.hwm, s.last)
	if !s.seen || c*size <= shrinkKeep || c <= 2*most {
		return c
	}
	return most + most/4
}

// resize returns b emptied for use again, with room for want entries:
// b itself when that is its capacity, a new buffer of want when less
// (nil for 0).
func resize[T any](b []T, want int) []T {
	if want >= cap(b) {
		clear(b)
		return b[:0]
	}
	if want == 0 {
		return nil
	}
	return make([]T, 0, want)
}

// wake kicks the manager while a one-shot probe waits.
func (in *inbox) wake() {
	if in.urgent.Load() {
		select {
		case in.kick <- struct{}{}:
		default:
		}
	}
}

// PortsChanged tells the manager that the transport's local ports changed
// (a probe port opened or closed: a link that came back, a device added).
// It never blocks. The manager reads them at once instead of at its next
// publish (up to a second later): until then its control endpoint would
// answer the peers' queries with the ports of before, and a peer waiting
// for this node's new probe QP (a partition's end) would wait that long
// for it.
func (m *Manager) PortsChanged() {
	m.in.ports.Store(true)
	select {
	case m.in.kick <- struct{}{}:
	default:
	}
}

// answersIn takes the queued control messages, on Run's goroutine; their
// buffer comes back with answersDone.
func (in *inbox) answersIn() []answer {
	in.ansMu.Lock()
	as := in.answers
	in.answers = in.ansSpare[:0]
	in.extTaken, in.valTaken = in.ansExt, in.ansVal
	in.ansExt, in.ansVal, in.lastFP = in.extSpare[:0], in.valSpare[:0], nil
	in.ansMu.Unlock()
	return as
}

func (in *inbox) answersDone(as []answer) {
	want := in.ansShrink.size(len(as), cap(as), int(unsafe.Sizeof(answer{})))
	in.ansSpare = resize(as, want)
	// The extensions and their values go with the answers: kept while
	// the answers' buffer is, sized to them when it is given up.
	if want < cap(as) {
		in.extSpare = resize(in.extTaken, min(cap(in.extTaken), 2*len(in.extTaken)))
		in.valSpare = resize(in.valTaken, min(cap(in.valTaken), 2*len(in.valTaken)))
	} else {
		in.extSpare, in.valSpare = resize(in.extTaken, cap(in.extTaken)), resize(in.valTaken, cap(in.valTaken))
	}
	in.extTaken, in.valTaken = nil, nil
}

// repliesIn takes the queued replies, on Run's goroutine; their buffer
// comes back with repliesDone.
func (in *inbox) repliesIn() []ud.Reply {
	in.repMu.Lock()
	rs := in.replies
	in.replies = in.repSpare[:0]
	in.repMu.Unlock()
	return rs
}

func (in *inbox) repliesDone(rs []ud.Reply) {
	in.repSpare = resize(rs, in.repShrink.size(len(rs), cap(rs), int(unsafe.Sizeof(ud.Reply{}))))
}

// takeInbox handles the queued replies, then the control messages.
func (m *Manager) takeInbox(now time.Time) {
	rs := m.in.repliesIn()
	for _, r := range rs {
		m.onReply(r)
	}
	m.in.repliesDone(rs)
	as := m.in.answersIn()
	for i := range as {
		m.onAnswer(as[i], now)
	}
	m.in.answersDone(as)
}
