package wire

import (
	"encoding/binary"
	"time"
)

// ExtClock carries realtime timestamps for NTP's on-wire offset between
// two nodes' clocks (docs/PROBES.md, "Clock offset"). In a query, 8 bytes:
// T1, the querier's realtime clock when it sent the query. In an answer,
// 16 bytes: T2, the responder's when it received the query, and T3, when
// it sent the answer. All are Unix nanoseconds, signed, big-endian. Not
// critical: a node that predates it skips it and answers without one. The
// querier keeps its own T1 (the answer does not echo it) and takes T4 when
// the answer arrives.
const ExtClock = 0x0005

// Sizes of an ExtClock value in a query and in an answer.
const (
	clockQueryLen  = 8
	clockAnswerLen = 16
)

// ClockExtLen is how many bytes an answer's ExtClock adds to a message.
const ClockExtLen = 4 + clockAnswerLen

// A timestamp a receiver takes is after 2001 and before 2262 (where Unix
// nanoseconds overflow): a zero, negative or absurd value is a sender's
// fault, and bounds keep the offset's arithmetic far from overflow.
const (
	minClock = 1_000_000_000 * 1_000_000_000 // 2001-09-09
	maxClock = 1 << 62                       // 2116
)

// AppendClockQuery appends an ExtClock value of a query carrying t1 to b.
func AppendClockQuery(b []byte, t1 time.Time) []byte {
	return binary.BigEndian.AppendUint64(b, uint64(t1.UnixNano()))
}

// ClockAnswerExt returns the ExtClock of an answer: t2 when the query came,
// t3 when the answer goes.
func ClockAnswerExt(t2, t3 time.Time) Ext {
	return Ext{Type: ExtClock, Value: AppendClockAnswer(make([]byte, 0, clockAnswerLen), t2, t3)}
}

// AppendClockAnswer appends ClockAnswerExt's value to b.
func AppendClockAnswer(b []byte, t2, t3 time.Time) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(t2.UnixNano()))
	return binary.BigEndian.AppendUint64(b, uint64(t3.UnixNano()))
}

// clockExt returns m's one ExtClock value; ok false when it has none, or
// more than one (which of them would be the sender's?).
func clockExt(m *Message) (v []byte, ok bool) {
	for _, e := range m.Ext {
		if e.Type == ExtClock {
			if ok {
				return nil, false
			}
			v, ok = e.Value, true
		}
	}
	return v, ok
}

func validClock(t int64) bool { return t >= minClock && t < maxClock }

// QueryClock returns the T1 a query carries (ok false: none, or one that
// is not a plausible time).
func QueryClock(m *Message) (t1 int64, ok bool) {
	v, ok := clockExt(m)
	if !ok || m.Type != TypeQuery || len(v) != clockQueryLen {
		return 0, false
	}
	t1 = int64(binary.BigEndian.Uint64(v))
	return t1, validClock(t1)
}

// AnswerClock returns the T2 and T3 an answer carries (ok false: none, or
// times that are not plausible, or T3 before T2).
func AnswerClock(m *Message) (t2, t3 int64, ok bool) {
	v, ok := clockExt(m)
	if !ok || m.Type != TypeAnswer || len(v) != clockAnswerLen {
		return 0, 0, false
	}
	t2, t3 = int64(binary.BigEndian.Uint64(v)), int64(binary.BigEndian.Uint64(v[8:]))
	return t2, t3, validClock(t2) && validClock(t3) && t3 >= t2
}
