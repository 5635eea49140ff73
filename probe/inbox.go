package probe

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

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
	kick     chan struct{}
	urgent   atomic.Bool
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
func (in *inbox) addAnswer(a answer) {
	in.ansMu.Lock()
	if len(in.answers) < maxQueuedAnswers {
		in.answers = append(in.answers, a)
	}
	in.ansMu.Unlock()
	in.wake()
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
	in.ansMu.Unlock()
	return as
}

func (in *inbox) answersDone(as []answer) {
	clear(as)
	in.ansSpare = as[:0]
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

func (in *inbox) repliesDone(rs []ud.Reply) { in.repSpare = rs[:0] }

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
