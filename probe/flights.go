package probe

import "unsafe"

// A flight is a probe waiting for its answer.
type flight struct {
	p    *mpeer // nil: answered, refused or dropped
	pa   *path
	sent int64 // monoNs: 32 bytes a flight, not 48
	flow uint8 // the path's flow it went on
}

// flights are the probes in flight in send order. Sequence numbers are
// consecutive (one counter, one probe each), so a ring indexed by sequence
// number holds them: a reply finds its probe without a map, a probe costs
// no allocation, and the oldest, which time out first, are at the front.
// An answered probe leaves a hole that the front skips. The ring spans
// from the oldest probe not yet answered or timed out to the newest:
// about the probes of one peer_timeout (5,000 at 10,000 probes a second
// and 500 ms), and grows by doubling when a span needs more.
type flights struct {
	ring []flight
	head int    // index of the oldest
	n    int    // entries from head, holes included
	base uint64 // sequence number at head
	// sh sizes the ring to the most it spanned lately (trim): a burst
	// (the first probes of every peer, a stall) grew it for good.
	sh shrinker
}

// minRing is the least ring trim leaves.
const minRing = 64

// trim sizes the ring to the most it spanned over the last periods of
// passes (shrinker), once a pass: the live entries move to a smaller ring
// when it is over twice that.
func (fs *flights) trim() {
	want := fs.sh.size(fs.n, len(fs.ring), int(unsafe.Sizeof(flight{})))
	if want >= len(fs.ring) || max(want, minRing) >= len(fs.ring) {
		return
	}
	ring := make([]flight, max(want, fs.n, minRing))
	for i := range fs.n {
		ring[i] = fs.ring[(fs.head+i)%len(fs.ring)]
	}
	fs.ring, fs.head = ring, 0
}

// push adds the probe seq, which must follow the last one pushed.
func (fs *flights) push(seq uint64, f flight) {
	if fs.n == 0 {
		fs.base = seq
	}
	if fs.n == len(fs.ring) {
		ring := make([]flight, max(2*len(fs.ring), 64))
		for i := range fs.n {
			ring[i] = fs.ring[(fs.head+i)%len(fs.ring)]
		}
		fs.ring, fs.head = ring, 0
	}
	fs.ring[(fs.head+fs.n)%len(fs.ring)] = f
	fs.n++
}

// get returns the probe seq if it is in flight, else nil.
func (fs *flights) get(seq uint64) *flight {
	if seq < fs.base || seq-fs.base >= uint64(fs.n) {
		return nil
	}
	f := &fs.ring[(fs.head+int(seq-fs.base))%len(fs.ring)]
	if f.p == nil {
		return nil
	}
	return f
}

// front returns the oldest probe in flight, dropping the holes before it;
// nil when there is none.
func (fs *flights) front() *flight {
	for fs.n > 0 {
		f := &fs.ring[fs.head]
		if f.p != nil {
			return f
		}
		fs.pop()
	}
	return nil
}

// frontSeq is the sequence number of the entry at the front.
func (fs *flights) frontSeq() uint64 { return fs.base }

// pop removes the entry at the front.
func (fs *flights) pop() {
	fs.ring[fs.head] = flight{}
	fs.head = (fs.head + 1) % len(fs.ring)
	fs.n--
	fs.base++
}

// live returns how many probes are in flight.
func (fs *flights) live() int {
	k := 0
	for i := range fs.n {
		if fs.ring[(fs.head+i)%len(fs.ring)].p != nil {
			k++
		}
	}
	return k
}

// forget ends the flights of p (dropped from the selection).
func (fs *flights) forget(p *mpeer) {
	for i := range fs.n {
		if f := &fs.ring[(fs.head+i)%len(fs.ring)]; f.p == p {
			*f = flight{}
		}
	}
}
