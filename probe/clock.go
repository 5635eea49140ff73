package probe

import (
	"math"
	"time"

	"github.com/rdmad/rdmad/probe/wire"
)

// The clock offset between this node and a peer, NTP's on-wire method over
// the control exchange (docs/PROBES.md, "Clock offset"): a version-2 query
// carries this node's realtime T1, the answer the peer's T2 (query
// received) and T3 (answer sent), and this node takes T4 when the answer
// arrives. offset = ((T2-T1) + (T3-T4)) / 2, and whatever the path's
// asymmetry the true offset lies within offset ± ((T4-T1) - (T3-T2)) / 2,
// the sample's error bound. T4-T1 is measured on the monotonic clock, so a
// step of this node's clock during the exchange cannot bend the sample.

// clockWindow is how many recent samples a peer's filter keeps; the best
// of them (the smallest error, NTP's clock filter) is reported.
const clockWindow = 8

// clockMinSamples is how many agreeing samples a peer's offset needs
// before the doctor judges it: one message, however tight the error bound
// it claims, is never a verdict.
const clockMinSamples = 2

// maxClockOffset bounds the offset a sample may claim: a peer claiming to
// be more than a year off is broken or lying, and the bound keeps the
// arithmetic far from overflow.
const maxClockOffset = 365 * 24 * time.Hour

// clockSlack is how far two samples' intervals (offset ± error) may miss
// each other before the filter takes it as a step of either clock rather
// than drift (100 ppm over the exchanges between two samples, at most a
// minute apart: 6 ms; NTP-disciplined clocks drift far less).
const clockSlack = 10 * time.Millisecond

// A clockSample is one exchange's offset and error bound.
type clockSample struct {
	offset, err time.Duration
}

// A clockFilter holds a peer's last clockWindow samples, oldest first
// overwritten. A sample that no interval of the window can explain
// (|offset - best's| > both errors + clockSlack) means a clock stepped
// (date -s, a first NTP sync): the window restarts with it, so that the
// offset follows a step at the next exchange instead of reporting the old
// best until it ages out.
type clockFilter struct {
	// The samples' offsets and error bounds apart: 12 bytes a sample
	// instead of 16, in every peer.
	off  [clockWindow]time.Duration
	err  [clockWindow]uint32 // nanoseconds (maxClockErr at most)
	n    uint8               // samples held (at most clockWindow)
	next uint8               // where the next sample goes
}

// maxClockErr bounds the error of a sample the filter keeps (4.29 s, the
// filter's 32 bits of nanoseconds): an exchange that took more than twice
// that says nothing worth keeping about a clock.
const maxClockErr = math.MaxUint32 * time.Nanosecond

// add takes a sample; one with an error bound over maxClockErr is left
// out.
func (f *clockFilter) add(s clockSample) {
	if s.err < 0 || s.err > maxClockErr {
		return
	}
	if b, ok := f.best(); ok {
		if d := s.offset - b.offset; d > s.err+b.err+clockSlack || -d > s.err+b.err+clockSlack {
			f.n, f.next = 0, 0
		}
	}
	f.off[f.next], f.err[f.next] = s.offset, uint32(s.err)
	f.next = (f.next + 1) % clockWindow
	f.n = min(f.n+1, clockWindow)
}

// best returns the held sample with the smallest error bound.
func (f *clockFilter) best() (clockSample, bool) {
	if f.n == 0 {
		return clockSample{}, false
	}
	b := 0
	for i := 1; i < int(f.n); i++ {
		if f.err[i] < f.err[b] {
			b = i
		}
	}
	return clockSample{offset: f.off[b], err: time.Duration(f.err[b])}, true
}

// clockSampleOf computes the sample of an answer to a query sent at t1
// (this node's clock, with its monotonic reading) and received at t4. It
// reports false when the answer carries no clock or an implausible one:
// times outside the wire's bounds, a hold (T3-T2) longer than the round
// trip this node measured (the peer's claim cannot exceed what it is part
// of), or an offset beyond maxClockOffset.
func clockSampleOf(m *wire.Message, t1, t4 time.Time) (clockSample, bool) {
	if t1.IsZero() {
		return clockSample{}, false // a version-1 query: no T1 was sent
	}
	t2, t3, ok := wire.AnswerClock(m)
	if !ok {
		return clockSample{}, false
	}
	rtt := t4.Sub(t1) // monotonic
	hold := time.Duration(t3 - t2)
	if rtt < 0 || hold > rtt {
		return clockSample{}, false
	}
	T1 := t1.UnixNano()
	T4 := T1 + int64(rtt)
	a, b := time.Duration(t2-T1), time.Duration(t3-T4)
	if a > maxClockOffset || -a > maxClockOffset || b > maxClockOffset || -b > maxClockOffset {
		return clockSample{}, false
	}
	return clockSample{offset: (a + b) / 2, err: (rtt - hold) / 2}, true
}

// clockEvery is how often a peer's first path is asked again for the clock
// alone: every 15 s, or more seldom above 250 peers (60 ms of a query per
// peer: at most some 17 queries a second for the clock, however many
// peers), and never more seldom than the refresh every resolve interval
// that asks anyway, so that from a thousand peers on (at the default
// minute) the refresh is the clock's exchange and the clock costs no
// query of its own. Each exchange is a datagram each way and its handling
// on both nodes: at 67 a second (the 15 ms a peer this replaced) the
// clock's queries were a fifth of the whole daemon's CPU at a thousand
// peers (issue #29), for a figure that moves by microseconds a minute on
// a synchronised clock and whose steps show at the next exchange anyway.
// Each query also refreshes the admission the peer gave, which is
// harmless.
func (m *Manager) clockEvery() time.Duration {
	every := max(15*time.Second, 60*time.Millisecond*time.Duration(len(m.peers.byName)))
	if m.cfg.Resolve > 0 {
		every = min(every, m.cfg.Resolve)
	}
	return every
}

// takeClock takes the clock sample of p's answer a to query q. With a
// fleet key only an authenticated answer counts (auth = "prefer" takes
// unauthenticated answers for the probes, not for the clock): the nonce,
// the address and port, and the tag bind it to the query, so a replayed or
// forged answer never reaches here.
func (m *Manager) takeClock(p *mpeer, a answer, q query) {
	if len(m.cfg.Auth.Key) > 0 && !a.m.Authenticated {
		return
	}
	s, ok := clockSampleOf(&a.m, q.t1, a.at)
	if !ok {
		return
	}
	p.clock.add(s)
	m.pub.dirty = true
}
