package probe

import (
	"encoding/binary"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/probe/wire"
)

// TestClockFilter: the best (smallest error) of the window is reported; a
// step of the peer's clock replaces the old samples at the next exchange,
// and a step back does too; old samples leave the window after
// clockWindow exchanges.
func TestClockFilter(t *testing.T) {
	var f clockFilter
	if _, ok := f.best(); ok {
		t.Fatal("an empty filter has a best sample")
	}
	for i, e := range []time.Duration{300, 100, 200} {
		f.add(clockSample{offset: time.Duration(i) * time.Microsecond, err: e * time.Microsecond})
	}
	if b, _ := f.best(); b.err != 100*time.Microsecond || b.offset != time.Microsecond || f.n != 3 {
		t.Errorf("best %+v of %d, want the 100 µs error one of 3", b, f.n)
	}
	// date -s "+3 seconds" on the peer.
	f.add(clockSample{offset: 3 * time.Second, err: 500 * time.Microsecond})
	if b, _ := f.best(); b.offset != 3*time.Second || f.n != 1 {
		t.Errorf("after a step: best %+v of %d, want the 3 s sample alone", b, f.n)
	}
	f.add(clockSample{offset: 3*time.Second + 20*time.Microsecond, err: 50 * time.Microsecond})
	if b, _ := f.best(); b.offset != 3*time.Second+20*time.Microsecond || f.n != 2 {
		t.Errorf("best %+v of %d, want the tighter 3 s sample of 2", b, f.n)
	}
	f.add(clockSample{offset: 10 * time.Microsecond, err: 400 * time.Microsecond})
	if b, _ := f.best(); b.offset != 10*time.Microsecond || f.n != 1 {
		t.Errorf("after the step back: best %+v of %d", b, f.n)
	}
	// A tight sample ages out: clockWindow later it is gone.
	f.add(clockSample{offset: 0, err: time.Microsecond})
	for range clockWindow {
		f.add(clockSample{offset: 0, err: 90 * time.Microsecond})
	}
	if b, _ := f.best(); b.err != 90*time.Microsecond || f.n != clockWindow {
		t.Errorf("best %+v of %d; the 1 µs sample should have left the window of %d", b, f.n, clockWindow)
	}
	// An error bound over what the filter keeps (32 bits of ns) is left
	// out, not wrapped into a tight one; the largest kept is exact.
	f = clockFilter{}
	f.add(clockSample{offset: time.Second, err: maxClockErr + time.Nanosecond})
	if f.n != 0 {
		t.Errorf("a %v error bound was kept: %d samples", maxClockErr+time.Nanosecond, f.n)
	}
	f.add(clockSample{offset: -time.Hour, err: maxClockErr})
	if b, ok := f.best(); !ok || b.err != maxClockErr || b.offset != -time.Hour {
		t.Errorf("best %+v (%v), want offset -1h error %v", b, ok, maxClockErr)
	}
}

// TestClockSampleOf computes an exchange by hand: the peer 3 s ahead, 100
// µs each way, held 20 µs; and refuses holds longer than the round trip,
// offsets beyond a year, answers without a clock and queries without T1.
func TestClockSampleOf(t *testing.T) {
	t1 := time.Now()
	t4 := t1.Add(220 * time.Microsecond)
	T1 := t1.UnixNano()
	peer := func(t2, t3 int64) *wire.Message {
		return &wire.Message{Type: wire.TypeAnswer, Ext: []wire.Ext{{Type: wire.ExtClock,
			Value: binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, uint64(t2)), uint64(t3))}}}
	}
	ahead := int64(3 * time.Second)
	t2 := T1 + int64(100*time.Microsecond) + ahead
	s, ok := clockSampleOf(peer(t2, t2+int64(20*time.Microsecond)), t1, t4)
	if !ok || s.offset != 3*time.Second || s.err != 100*time.Microsecond {
		t.Errorf("sample %+v %v; want offset 3s, error 100µs", s, ok)
	}
	for name, c := range map[string]struct {
		m      *wire.Message
		t1, t4 time.Time
	}{
		"hold beyond the round trip": {peer(t2, t2+int64(time.Millisecond)), t1, t4},
		"two years ahead":            {peer(T1+int64(2*maxClockOffset), T1+int64(2*maxClockOffset)), t1, t4},
		"two years behind":           {peer(T1-int64(2*maxClockOffset), T1-int64(2*maxClockOffset)), t1, t4},
		"no clock":                   {&wire.Message{Type: wire.TypeAnswer}, t1, t4},
		"no T1 (version 1)":          {peer(t2, t2), time.Time{}, t4},
		"answer before the query":    {peer(t2, t2), t4, t1},
	} {
		if s, ok := clockSampleOf(c.m, c.t1, c.t4); ok {
			t.Errorf("%s: sample %+v taken", name, s)
		}
	}
}

// TestClockExchangeLoopback runs the real exchange between two managers on
// one host (one clock): the offset each reports must contain the truth, 0,
// within its error bound, and the answers must carry the clock within the
// control endpoint's size bound.
func TestClockExchangeLoopback(t *testing.T) {
	port := freePort(t)
	f := &fabric{byQPN: map[uint32]*fakeTransport{}}
	a := startNode(t, f, "127.0.0.2", "127.0.0.3", port, 1)
	defer a.stop(t)
	b := startNode(t, f, "127.0.0.3", "127.0.0.2", port, 2)
	defer b.stop(t)
	waitState(t, a, "127.0.0.3", apitype.PeerUp, 5*time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for a.peer("127.0.0.3").ClockSamples == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	p := a.peer("127.0.0.3")
	if p.ClockSamples == 0 {
		t.Fatalf("no clock sample after the exchange: %+v", p)
	}
	if p.ClockOffset > p.ClockOffsetError || -p.ClockOffset > p.ClockOffsetError || p.ClockOffsetError > 50*time.Millisecond {
		t.Errorf("offset %v ± %v on one host; the true offset 0 must be within the bound (and the bound small)", p.ClockOffset, p.ClockOffsetError)
	}
}

// TestClockAnswerSize: the endpoint answers a bare query's clock (64 + 12
// bytes) and a padded one's (fingerprint and clock), and never more than
// the query and a tag.
func TestClockAnswerSize(t *testing.T) {
	port := freePort(t)
	srv, _ := controlFor(t, "127.0.0.4:"+itoa(port), Auth{})
	srv.SetFingerprint(make([]byte, wire.MaxFingerprint)) // the largest fingerprint
	cl := udpFrom(t, "127.0.0.5", 0)
	to := netip.MustParseAddrPort("127.0.0.4:" + itoa(port))
	for name, ext := range map[string][]wire.Ext{
		"bare":   nil,
		"padded": wire.WithFingerprint(make([]byte, 100)),
	} {
		q := wire.Message{Version: wire.Version2, Type: wire.TypeQuery, Nonce: 5, Count: 1, QPN: 0x22, QKey: 0x55, GID: [16]byte{15: 5}}
		q.Ext = append(ext, wire.Ext{Type: wire.ExtClock, Value: wire.AppendClockQuery(nil, time.Now())})
		b, err := q.Append(nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		t1 := time.Now()
		raw := exchange(t, cl, to, b)
		t4 := time.Now()
		if raw == nil {
			t.Fatalf("%s: no answer", name)
		}
		if len(raw) > len(b)+wire.TagSize {
			t.Errorf("%s: answer of %d bytes to a query of %d", name, len(raw), len(b))
		}
		m, err := wire.Decode(raw, nil)
		if err != nil {
			t.Fatal(err)
		}
		t2, t3, ok := wire.AnswerClock(&m)
		if !ok || t2 < t1.UnixNano()-int64(time.Millisecond) || t3 < t2 || t3 > t4.UnixNano()+int64(time.Millisecond) {
			t.Errorf("%s: answer clock %d %d %v; want T1 <= T2 <= T3 <= T4 on one host", name, t2, t3, ok)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestClockAttacks feeds a manager's peer answers a hostile or broken peer
// (or an off-path sender) could send and checks that none of them moves
// the peer's offset: forged times (zero, huge, T3 before T2, a hold longer
// than the round trip, beyond a year), a replay of an answer already
// taken, one from another port, one for a nonce never sent, and with a
// fleet key an unauthenticated one (auth = "prefer" takes it for the
// probes, never for the clock). One plausible but lying answer moves the
// offset, but never past clockMinSamples: the doctor needs two that agree.
func TestClockAttacks(t *testing.T) {
	m := resolvedManager(t, 1)
	p := m.peers.inOrder()[0]
	to := netip.AddrPortFrom(p.addr, 18516)
	nonce := uint64(1000)
	// ask puts a query in flight as query() does and returns its nonce,
	// sent at t1.
	ask := func(t1 time.Time) uint64 {
		nonce++
		m.control.takeQueries(p)
		p.queried.q = append(p.queried.q, pendingQuery{nonce: nonce, query: query{idx: 0, to: to, ver: wire.Version2, sent: t1, t1: t1}})
		m.control.nonces[nonce] = p
		return nonce
	}
	answerOf := func(n uint64, t2, t3 int64, auth bool) wire.Message {
		return wire.Message{Version: wire.Version2, Type: wire.TypeAnswer, Nonce: n, Index: 0, Count: 1, QPN: p.paths[0].remote.QPN, QKey: 1,
			GID: p.paths[0].remote.GID, Authenticated: auth, Tagged: auth,
			Ext: []wire.Ext{{Type: wire.ExtClock, Value: binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, uint64(t2)), uint64(t3))}}}
	}
	clockOf := func() apitype.Peer { return m.State().Peers[0] }

	// One honest exchange: 100 µs each way, the peer 2 ms ahead.
	t1 := time.Now()
	T1 := t1.UnixNano()
	good := int64(2 * time.Millisecond)
	n := ask(t1)
	honest := answerOf(n, T1+int64(100*time.Microsecond)+good, T1+int64(110*time.Microsecond)+good, false)
	m.onAnswer(answer{from: to, m: honest, at: t1.Add(210 * time.Microsecond)}, time.Now())
	st := clockOf()
	if st.ClockSamples != 1 || st.ClockOffset != 2*time.Millisecond || st.ClockOffsetError != 100*time.Microsecond {
		t.Fatalf("after an honest exchange: offset %v ± %v of %d samples; want 2ms ± 100µs of 1", st.ClockOffset, st.ClockOffsetError, st.ClockSamples)
	}

	at := func(t1 time.Time) time.Time { return t1.Add(210 * time.Microsecond) }
	for name, c := range map[string]func() answer{
		"zero times": func() answer { return answer{from: to, m: answerOf(ask(t1), 0, 0, false), at: at(t1)} },
		"huge times": func() answer {
			return answer{from: to, m: answerOf(ask(t1), 1<<63-1, 1<<63-1, false), at: at(t1)}
		},
		"T3 before T2": func() answer { return answer{from: to, m: answerOf(ask(t1), T1+10, T1, false), at: at(t1)} },
		"hold beyond the round trip": func() answer {
			return answer{from: to, m: answerOf(ask(t1), T1, T1+int64(time.Second), false), at: at(t1)}
		},
		"ten years ahead": func() answer {
			return answer{from: to, m: answerOf(ask(t1), T1+int64(10*maxClockOffset), T1+int64(10*maxClockOffset), false), at: at(t1)}
		},
		"replay of the honest answer": func() answer { return answer{from: to, m: honest, at: at(t1)} },
		"another port": func() answer {
			return answer{from: netip.AddrPortFrom(p.addr, 40000), m: answerOf(ask(t1), T1+int64(time.Hour), T1+int64(time.Hour), false), at: at(t1)}
		},
		"nonce never sent": func() answer {
			return answer{from: to, m: answerOf(777, T1+int64(time.Hour), T1+int64(time.Hour), false), at: at(t1)}
		},
	} {
		m.onAnswer(c(), time.Now())
		if st := clockOf(); st.ClockSamples != 1 || st.ClockOffset != 2*time.Millisecond {
			t.Errorf("%s: offset %v ± %v of %d samples; want the honest 2ms of 1", name, st.ClockOffset, st.ClockOffsetError, st.ClockSamples)
		}
	}

	// With a fleet key and auth = "prefer", an unauthenticated answer is
	// taken for the path, not for the clock; an authenticated one is.
	m.cfg.Auth = Auth{Key: fleetKey}
	m.onAnswer(answer{from: to, m: answerOf(ask(t1), T1+int64(time.Hour), T1+int64(time.Hour), false), at: at(t1)}, time.Now())
	if st := clockOf(); st.ClockSamples != 1 || st.ClockOffset != 2*time.Millisecond {
		t.Errorf("unauthenticated answer with a key: offset %v of %d samples", st.ClockOffset, st.ClockSamples)
	}
	// A plausible lie, authenticated: the peer claims an hour. It is the
	// peer's claim, reported with its bound, but one message restarts the
	// window and stays below what the doctor judges.
	m.onAnswer(answer{from: to, m: answerOf(ask(t1), T1+int64(time.Hour), T1+int64(time.Hour), true), at: at(t1)}, time.Now())
	if st := clockOf(); st.ClockSamples != 1 || st.ClockSamples >= clockMinSamples || st.ClockOffset < 59*time.Minute {
		t.Errorf("one authenticated hour: offset %v of %d samples; want the hour alone, below %d samples", st.ClockOffset, st.ClockSamples, clockMinSamples)
	}
	// Each answer consumed its own query, but the one from another port,
	// which leaves the real answer its chance.
	if qs := p.queries(); len(qs) != 1 || qs[0].to != to {
		t.Errorf("queries outstanding %+v; want the one answered from another port alone", p.queries())
	}
}

// TestClockEvery: a peer's clock is asked every 15 s, less often above 250
// peers (at most some 17 clock queries a second), and never less often
// than the resolve interval's refresh.
func TestClockEvery(t *testing.T) {
	for _, c := range []struct {
		peers   int
		resolve time.Duration
		want    time.Duration
	}{
		{10, time.Minute, 15 * time.Second},
		{250, time.Minute, 15 * time.Second},
		{500, time.Minute, 30 * time.Second},
		{1000, time.Minute, time.Minute},
		{2000, time.Minute, time.Minute},
		{10000, time.Minute, time.Minute},
		{10, 5 * time.Second, 5 * time.Second},
	} {
		m := resolvedManager(t, c.peers)
		m.cfg.Resolve = c.resolve
		if got := m.clockEvery(); got != c.want {
			t.Errorf("%d peers, resolve %v: every %v, want %v", c.peers, c.resolve, got, c.want)
		}
		// Beyond the refresh every resolve interval, which asks anyway.
		if rate := float64(c.peers) / m.clockEvery().Seconds(); m.clockEvery() < c.resolve && rate > 17 {
			t.Errorf("%d peers: %.0f clock queries a second", c.peers, rate)
		}
	}
}
