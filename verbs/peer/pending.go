package peer

import (
	"time"

	"github.com/rdmad/rdmad/probe/ud"
	"github.com/rdmad/rdmad/verbs"
)

// pendingSlots is the size of a port's table of probes awaiting a reply.
// A probe's entry lives until a reply consumes it, until pendingTTL has
// passed, or until the probe pendingSlots sequence numbers later takes its
// slot. The daemon numbers probes from one counter for all ports, so at
// 1,000 probes/s an entry has about 4 s, eight times the default
// peer_timeout, before it can be overwritten; a reply later than that is
// late to the daemon anyway.
const pendingSlots = 4096

// pendingTTL is the oldest reply a probe's entry accepts.
const pendingTTL = int64(time.Minute)

// A pending is a probe this port posted: the prober's own record of where
// it went and when, which a reply must match. Nothing in the reply's
// payload but the sequence number is used to find it.
type pending struct {
	seq     uint64
	sent    int64 // engine stamp just before the post
	gid     verbs.GID
	qpn     uint32
	version uint8
	flow    uint8 // the port's flow that sent it: the reply must come back to its QP
	live    bool
}

// A pendingTable is a fixed ring of pending probes indexed by sequence
// number: no allocation after the port is built, O(1) add and match.
type pendingTable struct {
	slots []pending
}

func newPendingTable(n int) pendingTable { return pendingTable{slots: make([]pending, n)} }

// add records a posted probe, overwriting (and so reclaiming) whatever
// older probe had the slot.
func (t *pendingTable) add(seq uint64, sent int64, dst ud.Endpoint, version, flow uint8) {
	t.slots[seq%uint64(len(t.slots))] = pending{seq: seq, sent: sent, gid: dst.GID, qpn: dst.QPN, version: version, flow: flow, live: true}
}

// match looks for the probe a reply answers: seq must be outstanding, the
// reply must come from the QPN and GID the probe was sent to (as the
// adapter and the GRH report them) in the probe's payload version, to the
// flow's QP that sent the probe, and
// the probe must be younger than pendingTTL at now. On a match the entry
// is consumed and match returns the probe's send stamp. A reply that does
// not match leaves the entry alone, so a forged reply cannot cancel the
// real one; an entry found expired is reclaimed.
func (t *pendingTable) match(seq uint64, src verbs.GID, qpn uint32, version, flow uint8, now int64) (sent int64, ok bool) {
	e := &t.slots[seq%uint64(len(t.slots))]
	if !e.live || e.seq != seq {
		return 0, false
	}
	if now-e.sent > pendingTTL || now < e.sent {
		e.live = false
		return 0, false
	}
	if e.qpn != qpn || e.gid != src || e.version != version || e.flow != flow {
		return 0, false
	}
	e.live = false
	return e.sent, true
}
