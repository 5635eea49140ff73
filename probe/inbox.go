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

// A shrinker tells when a buffer that is used again (the inbox's) has
// been far larger than what it held for long enough to be given up: after
// a burst (the first resolves of every peer, a stall), a buffer kept at
// its size would be heap held for nothing. Not at once: the clock queries and
// the refreshes come in bursts (clockEvery, every 15 s to a minute), and a
// buffer given up between them would be allocated again, in steps, at
// every burst.
type shrinker struct{ idle int }

// shrinkAfter is how many takes in a row a buffer must be oversized to be
// given up: a minute or more at four passes a second.
const shrinkAfter = 256

// shrinkKeep is the size up to which a buffer is kept whatever it held.
const shrinkKeep = 8 << 10

// keep reports whether a buffer of capacity c entries of size bytes that
// held n is kept.
func (s *shrinker) keep(n, c, size int) bool {
	if c*size <= shrinkKeep || 8*n >= c {
		s.idle = 0
		return true
	}
	s.idle++
	if s.idle < shrinkAfter {
		return true
	}
	s.idle = 0
	return false
}

// reuse returns b emptied for use again, or nil when it is not kept.
func reuse[T any](b []T, keep bool) []T {
	if !keep {
		return nil
	}
	clear(b)
	return b[:0]
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
	keep := in.ansShrink.keep(len(as), cap(as), int(unsafe.Sizeof(answer{})))
	in.ansSpare = reuse(as, keep)
	in.extSpare, in.valSpare = reuse(in.extTaken, keep), reuse(in.valTaken, keep)
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
	in.repSpare = reuse(rs, in.repShrink.keep(len(rs), cap(rs), int(unsafe.Sizeof(ud.Reply{}))))
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
