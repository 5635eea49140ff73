package wire

import (
	"encoding/binary"
	"testing"
	"time"
)

// TestClockExt round-trips the clock extension of a query and an answer
// through the wire, and refuses what a sender must not send: zero or
// absurd times, T3 before T2, a wrong length, two of them, a query's
// clock in an answer.
func TestClockExt(t *testing.T) {
	t1 := time.Unix(1_800_000_000, 123)
	q := Message{Version: Version2, Type: TypeQuery, Nonce: 1, Count: 1, QPN: 5, QKey: 1,
		Ext: []Ext{{Type: ExtClock, Value: AppendClockQuery(nil, t1)}}}
	b, err := q.Append(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	dq, err := Decode(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := QueryClock(&dq); !ok || got != t1.UnixNano() {
		t.Errorf("QueryClock = %d, %v; want %d", got, ok, t1.UnixNano())
	}
	if _, _, ok := AnswerClock(&dq); ok {
		t.Errorf("a query's clock read as an answer's")
	}
	t2, t3 := t1.Add(time.Second), t1.Add(time.Second+5*time.Microsecond)
	a := Message{Version: Version2, Type: TypeAnswer, Nonce: 1, Ext: []Ext{ClockAnswerExt(t2, t3)}}
	b, err = a.Append(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != Size+ClockExtLen {
		t.Errorf("answer of %d bytes, want %d", len(b), Size+ClockExtLen)
	}
	da, err := Decode(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	if g2, g3, ok := AnswerClock(&da); !ok || g2 != t2.UnixNano() || g3 != t3.UnixNano() {
		t.Errorf("AnswerClock = %d %d %v", g2, g3, ok)
	}
	if _, ok := QueryClock(&da); ok {
		t.Errorf("an answer's clock read as a query's")
	}

	ans := func(v []byte) *Message {
		return &Message{Type: TypeAnswer, Ext: []Ext{{Type: ExtClock, Value: v}}}
	}
	two := func(x, y int64) []byte {
		return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, uint64(x)), uint64(y))
	}
	now := t1.UnixNano()
	for name, m := range map[string]*Message{
		"zero":            ans(two(0, 0)),
		"negative":        ans(two(-now, -now)),
		"huge":            ans(two(1<<63-1, 1<<63-1)),
		"beyond 2116":     ans(two(1<<62, 1<<62)),
		"T3 before T2":    ans(two(now, now-1)),
		"short":           ans(two(now, now)[:12]),
		"long":            ans(append(two(now, now), 0)),
		"twice":           {Type: TypeAnswer, Ext: []Ext{{Type: ExtClock, Value: two(now, now)}, {Type: ExtClock, Value: two(now, now)}}},
		"none":            {Type: TypeAnswer},
		"query's 8 bytes": ans(AppendClockQuery(nil, t1)),
	} {
		if _, _, ok := AnswerClock(m); ok {
			t.Errorf("%s: answer clock taken", name)
		}
	}
	if _, ok := QueryClock(&Message{Type: TypeQuery, Ext: []Ext{{Type: ExtClock, Value: AppendClockQuery(nil, time.Unix(0, 0))}}}); ok {
		t.Errorf("a query's zero time taken")
	}
}
