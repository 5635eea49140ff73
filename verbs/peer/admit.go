package peer

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/rdmad/rdmad/verbs"
)

// admitPerSource bounds the admissions one control-endpoint source address
// holds on a port. A node needs one per local port that probes this port,
// plus the leftovers of its restarts (new QPNs) until they expire: a few.
const admitPerSource = 32

// A srcKey is what a probe's sender is recognised by: the QPN the adapter
// reports for the sender and the source GID of the packet's GRH. Neither
// is taken from the payload.
type srcKey struct {
	gid verbs.GID
	qpn uint32
}

// An admission is a source the control endpoint vouched for. It is
// confirmed once a probe from it passed every check (its tag, when one is
// required): until then it is only somebody's claim, and the first to go
// when the table is full.
//
// Its reply parameters (qkey, LID) change only in ways a third host cannot
// force (#41 item 3). An authenticated query (a valid fleet-key tag) sets
// them at once: the key proves the querier is a member. Without one, a
// query changes the incumbent parameters only when it comes from the
// address that admitted them, and then only by refreshing the same values.
// Other values, or another address, make at most the one candidate: replies
// then go to both the incumbent's and the candidate's parameters (the real
// peer's adapter drops the one with a wrong qkey, so a poisoner can add a
// reply nobody takes but cannot take one away). The candidate belongs to
// its address while it lives; it takes over only when nobody refreshed the
// incumbent for a whole lifetime, as when a peer really changed them. An
// unauthenticated query never changes an admission an authenticated one
// made.
type admission struct {
	key       srcKey
	from      netip.Addr // who asked the control endpoint to admit it
	qkey      uint32
	lid       uint16
	until     time.Time // of the incumbent parameters
	confirmed bool
	authed    bool // admitted or last changed by an authenticated query

	// The candidate: other reply parameters, asked for by candFrom while
	// the incumbent lived (candUntil zero: none).
	candFrom  netip.Addr
	candQKey  uint32
	candLID   uint16
	candUntil time.Time

	prev, next *admission // in the table's confirmed or unconfirmed list
}

// An admList is an intrusive doubly linked list of admissions, oldest
// (least recently admitted or confirmed) first.
type admList struct {
	head, tail *admission
	n          int
}

func (l *admList) pushBack(a *admission) {
	a.prev, a.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = a
	} else {
		l.head = a
	}
	l.tail = a
	l.n++
}

func (l *admList) remove(a *admission) {
	if a.prev != nil {
		a.prev.next = a.next
	} else {
		l.head = a.next
	}
	if a.next != nil {
		a.next.prev = a.prev
	} else {
		l.tail = a.prev
	}
	a.prev, a.next = nil, nil
	l.n--
}

// An admTable holds a port's admissions, bounded twice: at most perSource
// per admitting source address, and at most max in all. A source over its
// quota replaces its own oldest admission (unconfirmed ones first), so
// however much one address asks it cannot push anybody else out, and a
// restarted peer asking from its usual address is always admitted. A full
// table drops expired admissions, then the oldest unconfirmed one; only a
// table full of live confirmed admissions refuses. Every operation but a
// refusal in that last case is O(perSource) or better: a flood of
// admissions costs the completion loop, which shares the port's lock,
// nothing that grows with the table.
type admTable struct {
	max, perSource int
	byKey          map[srcKey]*admission
	bySrc          map[netip.Addr][]*admission
	unconf, conf   admList
}

func newAdmTable(max, perSource int) admTable {
	return admTable{max: max, perSource: perSource, byKey: map[srcKey]*admission{}, bySrc: map[netip.Addr][]*admission{}}
}

func (t *admTable) len() int { return len(t.byKey) }

func (t *admTable) list(a *admission) *admList {
	if a.confirmed {
		return &t.conf
	}
	return &t.unconf
}

// remove forgets a.
func (t *admTable) remove(a *admission) {
	delete(t.byKey, a.key)
	t.list(a).remove(a)
	t.dropFromSource(a)
}

func (t *admTable) dropFromSource(a *admission) {
	s := t.bySrc[a.from]
	for i, b := range s {
		if b == a {
			s[i] = s[len(s)-1]
			s[len(s)-1] = nil
			s = s[:len(s)-1]
			break
		}
	}
	if len(s) == 0 {
		delete(t.bySrc, a.from)
	} else {
		t.bySrc[a.from] = s
	}
}

// sourceVictim picks the admission a source over its quota gives up:
// an expired one, else its oldest unconfirmed one, else its oldest
// confirmed one. keep is never picked.
func (t *admTable) sourceVictim(from netip.Addr, keep *admission, now time.Time) *admission {
	var best *admission
	rank := func(a *admission) int {
		switch {
		case now.After(a.expiry()):
			return 0
		case !a.confirmed:
			return 1
		}
		return 2
	}
	for _, a := range t.bySrc[from] {
		if a == keep {
			continue
		}
		if best == nil || rank(a) < rank(best) || (rank(a) == rank(best) && a.expiry().Before(best.expiry())) {
			best = a
		}
	}
	return best
}

// sweep drops the expired admissions at the head of both lists: amortised
// O(1) cleaning that keeps dead entries from piling up between lookups.
func (t *admTable) sweep(now time.Time) {
	for _, l := range []*admList{&t.unconf, &t.conf} {
		for l.head != nil && now.After(l.head.expiry()) {
			t.remove(l.head)
		}
	}
}

// makeRoom frees one place in a full table: the oldest unconfirmed
// admission, else an expired confirmed one. It reports false when every
// admission is confirmed and live.
func (t *admTable) makeRoom(now time.Time) bool {
	if t.unconf.head != nil {
		t.remove(t.unconf.head)
		return true
	}
	// Only live, confirmed admissions are left: real peers that probed.
	// Scanning them is rare (the table holds 4 x max_peers of them) and
	// never caused by mere admissions.
	var oldest *admission
	for a := t.conf.head; a != nil; a = a.next {
		if now.After(a.expiry()) && (oldest == nil || a.expiry().Before(oldest.expiry())) {
			oldest = a
		}
	}
	if oldest == nil {
		return false
	}
	t.remove(oldest)
	return true
}

// expiry is when a stops being admitted: when its incumbent and its
// candidate have both run out.
func (a *admission) expiry() time.Time {
	if a.candUntil.After(a.until) {
		return a.candUntil
	}
	return a.until
}

// settle makes a live candidate the incumbent once the incumbent ran out:
// nobody refreshed the parameters it had for a whole lifetime. It returns
// the address the admission counted against before, when that changed.
func (a *admission) settle(now time.Time) (was netip.Addr, moved bool) {
	if !a.candUntil.IsZero() && now.After(a.until) && !now.After(a.candUntil) {
		was, moved = a.from, a.from != a.candFrom
		a.from, a.qkey, a.lid, a.until = a.candFrom, a.candQKey, a.candLID, a.candUntil
		a.candUntil = time.Time{}
	}
	if !a.candUntil.IsZero() && now.After(a.candUntil) {
		a.candUntil = time.Time{}
	}
	return was, moved
}

// candidate reports the candidate's reply parameters while it lives.
func (a *admission) candidate(now time.Time) (qkey uint32, lid uint16, ok bool) {
	if a.candUntil.IsZero() || now.After(a.candUntil) {
		return 0, 0, false
	}
	return a.candQKey, a.candLID, true
}

// admit adds or refreshes the admission of key, asked for by from, by an
// authenticated query or not (see admission for what each may change).
func (t *admTable) admit(key srcKey, from netip.Addr, qkey uint32, lid uint16, authed bool, until, now time.Time) error {
	from = from.Unmap()
	t.sweep(now)
	a := t.byKey[key]
	if a != nil {
		t.settle(a, now)
		switch {
		case authed:
			t.moveSource(a, from, now)
			if a.qkey != qkey || a.lid != lid {
				// Answers go elsewhere now: what the old values proved
				// no longer holds.
				a.qkey, a.lid = qkey, lid
				t.unconfirm(a)
			}
			a.authed = true
			a.candUntil = time.Time{}
			a.until = until
		case a.authed:
			// A query without the key changes nothing a member set.
			return nil
		case a.from == from && a.qkey == qkey && a.lid == lid:
			a.until = until
		case a.candUntil.IsZero() || a.candFrom == from:
			// The candidate slot is free or this address's own.
			a.candFrom, a.candQKey, a.candLID, a.candUntil = from, qkey, lid, until
		default:
			// The incumbent and the candidate are other addresses' while
			// they live: this query changes and refreshes nothing.
			return nil
		}
		l := t.list(a)
		l.remove(a)
		l.pushBack(a)
		return nil
	}
	if len(t.bySrc[from]) >= t.perSource {
		t.remove(t.sourceVictim(from, nil, now))
	}
	if len(t.byKey) >= t.max && !t.makeRoom(now) {
		return fmt.Errorf("%d admitted probers, all confirmed and live", len(t.byKey))
	}
	a = &admission{key: key, from: from, qkey: qkey, lid: lid, until: until, authed: authed}
	t.byKey[key] = a
	t.unconf.pushBack(a)
	t.bySrc[from] = append(t.bySrc[from], a)
	return nil
}

// settle is admission.settle with the source quota following a promoted
// candidate's address.
func (t *admTable) settle(a *admission, now time.Time) {
	was, moved := a.settle(now)
	if !moved {
		return
	}
	from := a.from
	a.from = was
	t.moveSource(a, from, now)
}

// moveSource makes a count against from's quota instead of its own
// address's.
func (t *admTable) moveSource(a *admission, from netip.Addr, now time.Time) {
	if a.from == from {
		return
	}
	t.dropFromSource(a)
	a.from = from
	if len(t.bySrc[from]) >= t.perSource {
		t.remove(t.sourceVictim(from, a, now))
	}
	t.bySrc[from] = append(t.bySrc[from], a)
}

// unconfirm moves a confirmed admission back among the unconfirmed.
func (t *admTable) unconfirm(a *admission) {
	if a.confirmed {
		t.conf.remove(a)
		a.confirmed = false
		t.unconf.pushBack(a)
	}
}

// lookup returns the live admission of key; an expired one is dropped.
func (t *admTable) lookup(key srcKey, now time.Time) (*admission, bool) {
	a := t.byKey[key]
	if a == nil {
		return nil, false
	}
	if now.After(a.expiry()) {
		t.remove(a)
		return nil, false
	}
	t.settle(a, now)
	return a, true
}

// confirm marks a as proven by a valid probe: it survives floods of
// unconfirmed admissions.
func (t *admTable) confirm(a *admission) {
	if a.confirmed {
		return
	}
	t.unconf.remove(a)
	a.confirmed = true
	t.conf.pushBack(a)
}
