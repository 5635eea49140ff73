package peer

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/rdmad/rdmad/probe/ud"
	"github.com/rdmad/rdmad/verbs"
)

// probeFrom delivers a v1 probe from (gid, qpn) to p and reports whether p
// answered it.
func probeFrom(p *udPort, gid verbs.GID, qpn uint32) bool {
	b := make([]byte, PayloadSize)
	(&Payload{Version: PayloadV1, Kind: KindProbe, Seq: 1, SentAt: 5}).Encode(b)
	deliver(p, gid, qpn, b, 10)
	return queued(p) == 1
}

// TestAdmitFloodOneSource is the attack of issue #13 item 8: 16,384
// control queries from one allowed (or spoofed) address, each admitting a
// new QP, used to fill the admission table so that new and restarted peers
// got no answer. Now the flood only churns that address's own quota: a
// confirmed admission (of the same address and of another), an unconfirmed
// one of another address, and a new address's admission all get through,
// and the table stays small.
func TestAdmitFloodOneSource(t *testing.T) {
	e := testEngine(t)
	p := testPort(t, e, "b/1", gidB)
	until := time.Now().Add(time.Hour)
	flooder, other, late := netip.MustParseAddr("192.0.2.66"), netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.3")
	admit := func(gid verbs.GID, qpn uint32, from netip.Addr) {
		t.Helper()
		if err := e.Admit("b/1", ud.Endpoint{GID: gid, QPN: qpn, QKey: 1}, from, false, until); err != nil {
			t.Fatalf("Admit(%v, %#x, from %v): %v", gid, qpn, from, err)
		}
	}
	// A real peer behind the flooder's address (the spoofed victim), one
	// behind another address; both probed, so confirmed. One more that
	// was admitted and has not probed yet.
	admit(gidM, 1, flooder)
	admit(gidA, qpnA, other)
	admit(gid6, 2, other)
	if !probeFrom(p, gidM, 1) || !probeFrom(p, gidA, qpnA) {
		t.Fatal("admitted probers not answered")
	}
	start := time.Now()
	for i := range 16384 {
		admit(v4GID(10, byte(i>>16), byte(i>>8), byte(i)), uint32(0x1000+i), flooder)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("16,384 admissions took %v: the flood is expensive", d)
	}
	if n := p.admitted.len(); n > admitPerSource+2 {
		t.Errorf("%d admissions after the flood, want at most %d", n, admitPerSource+2)
	}
	if n := len(p.admitted.bySrc[flooder]); n > admitPerSource {
		t.Errorf("flooder holds %d admissions, quota %d", n, admitPerSource)
	}
	// A new peer behind a third address.
	admit(gidB, 3, late)
	for _, c := range []struct {
		name string
		gid  verbs.GID
		qpn  uint32
	}{{"confirmed, flooder's address", gidM, 1}, {"confirmed, other address", gidA, qpnA},
		{"unconfirmed, other address", gid6, 2}, {"new address", gidB, 3}} {
		if !probeFrom(p, c.gid, c.qpn) {
			t.Errorf("%s: not answered after the flood (stats %+v)", c.name, e.Stats())
		}
	}
	checkAdmTable(t, &p.admitted)
}

// TestAdmitFloodManySources fills the whole table with unconfirmed
// admissions from many addresses (each within its quota). A new address is
// still admitted, at the expense of the oldest unconfirmed admission, and
// confirmed admissions survive. Only a table full of live confirmed
// admissions refuses, and an expired one makes room again.
func TestAdmitFloodManySources(t *testing.T) {
	e, err := New(Config{MaxAH: 64}) // table of 256
	if err != nil {
		t.Fatal(err)
	}
	p := testPort(t, e, "b/1", gidB)
	max := 4 * 64
	until := time.Now().Add(time.Hour)
	addr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}) }
	if err := e.Admit("b/1", ud.Endpoint{GID: gidA, QPN: qpnA}, netip.MustParseAddr("192.0.2.1"), false, until); err != nil {
		t.Fatal(err)
	}
	if !probeFrom(p, gidA, qpnA) {
		t.Fatal("admitted prober not answered")
	}
	for i := range 16384 {
		if err := e.Admit("b/1", ud.Endpoint{GID: v4GID(10, 2, byte(i>>8), byte(i)), QPN: uint32(i)}, addr(i/admitPerSource), false, until); err != nil {
			t.Fatalf("admission %d: %v", i, err)
		}
	}
	if n := p.admitted.len(); n != max {
		t.Errorf("%d admissions, want the bound %d", n, max)
	}
	if err := e.Admit("b/1", ud.Endpoint{GID: gidM, QPN: qpnM}, netip.MustParseAddr("192.0.2.66"), false, until); err != nil {
		t.Fatalf("a new address's admission into a table full of unconfirmed ones: %v", err)
	}
	if !probeFrom(p, gidA, qpnA) || !probeFrom(p, gidM, qpnM) {
		t.Errorf("confirmed or new admission lost: %+v", e.Stats())
	}

	// Now confirm everything: a full table of real peers refuses.
	tb := &p.admitted
	for tb.unconf.head != nil {
		tb.confirm(tb.unconf.head)
	}
	err = e.Admit("b/1", ud.Endpoint{GID: gid6, QPN: 1}, netip.MustParseAddr("192.0.2.99"), false, until)
	if err == nil {
		t.Fatal("admission into a table full of live confirmed admissions succeeded")
	}
	// One of them expires: room again, and the expired one is the one that goes.
	old := tb.conf.tail
	old.until = time.Now().Add(-time.Second)
	if err := e.Admit("b/1", ud.Endpoint{GID: gid6, QPN: 1}, netip.MustParseAddr("192.0.2.99"), false, until); err != nil {
		t.Fatalf("admission with an expired one in the table: %v", err)
	}
	if tb.byKey[old.key] != nil || tb.len() != max {
		t.Errorf("expired admission kept (%v) or table size %d, want %d", tb.byKey[old.key] != nil, tb.len(), max)
	}
	checkAdmTable(t, tb)
}

// TestAdmitRestartedPeer: an address whose quota is all confirmed
// admissions (a peer that restarted many times, each with a new QPN) is
// still admitted for its newest QP, replacing its oldest.
func TestAdmitRestartedPeer(t *testing.T) {
	tb := newAdmTable(1000, 4)
	from := netip.MustParseAddr("192.0.2.1")
	now := time.Now()
	for i := range 4 {
		if err := tb.admit(srcKey{gid: gidA, qpn: uint32(i)}, from, 1, 0, false, now.Add(time.Duration(i+1)*time.Minute), now); err != nil {
			t.Fatal(err)
		}
		a, _ := tb.lookup(srcKey{gid: gidA, qpn: uint32(i)}, now)
		tb.confirm(a)
	}
	if err := tb.admit(srcKey{gid: gidA, qpn: 99}, from, 1, 0, false, now.Add(time.Hour), now); err != nil {
		t.Fatalf("restarted peer refused: %v", err)
	}
	if _, ok := tb.lookup(srcKey{gid: gidA, qpn: 0}, now); ok {
		t.Error("the address's oldest admission survived beyond its quota")
	}
	if _, ok := tb.lookup(srcKey{gid: gidA, qpn: 99}, now); !ok {
		t.Error("the new admission is missing")
	}
	checkAdmTable(t, &tb)
}

// TestAdmitRefresh: a refresh keeps a confirmation unless the qkey or LID
// changed by an authenticated query (answers would go elsewhere: a claim
// again), which from another address moves the admission to that
// address's quota; v4-mapped
// and plain IPv4 addresses are one source; expiry is honoured.
func TestAdmitRefresh(t *testing.T) {
	tb := newAdmTable(1000, 4)
	now := time.Now()
	k := srcKey{gid: gidA, qpn: 1}
	v4, mapped := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("::ffff:192.0.2.1")
	tb.admit(k, v4, 7, 0, false, now.Add(time.Minute), now)
	a, _ := tb.lookup(k, now)
	tb.confirm(a)
	tb.admit(k, mapped, 7, 0, false, now.Add(2*time.Minute), now)
	if !a.confirmed || len(tb.bySrc) != 1 || a.until != now.Add(2*time.Minute) {
		t.Errorf("refresh from the v4-mapped address: confirmed %v, %d sources, until %v", a.confirmed, len(tb.bySrc), a.until)
	}
	other := netip.MustParseAddr("192.0.2.7")
	tb.admit(k, other, 8, 0, true, now.Add(2*time.Minute), now)
	if a.confirmed || a.qkey != 8 || len(tb.bySrc[other]) != 1 || len(tb.bySrc[v4]) != 0 {
		t.Errorf("authenticated refresh with another qkey from another address: %+v, sources %v", a, tb.bySrc)
	}
	if _, ok := tb.lookup(k, now.Add(3*time.Minute)); ok || tb.len() != 0 {
		t.Error("expired admission found")
	}
	checkAdmTable(t, &tb)
}

// TestEngineAdmitNoPort: Admit for a port that is not probing.
func TestEngineAdmitNoPort(t *testing.T) {
	e := testEngine(t)
	if err := e.Admit("rxe9/1", ud.Endpoint{}, netip.MustParseAddr("192.0.2.1"), false, time.Now()); !errors.Is(err, ErrNoPort) {
		t.Errorf("Admit = %v, want ErrNoPort", err)
	}
}

// checkAdmTable checks the table's three indexes agree.
func checkAdmTable(t *testing.T, tb *admTable) {
	t.Helper()
	n := 0
	for _, l := range []*admList{&tb.unconf, &tb.conf} {
		var prev *admission
		c := 0
		for a := l.head; a != nil; a = a.next {
			if a.prev != prev || tb.byKey[a.key] != a || a.confirmed != (l == &tb.conf) {
				t.Fatalf("list corrupt at %+v", a.key)
			}
			prev = a
			c++
		}
		if c != l.n || l.tail != prev {
			t.Fatalf("list count %d, walked %d", l.n, c)
		}
		n += c
	}
	s := 0
	for from, as := range tb.bySrc {
		if len(as) == 0 || len(as) > tb.perSource {
			t.Fatalf("source %v holds %d", from, len(as))
		}
		for _, a := range as {
			if a.from != from || tb.byKey[a.key] != a {
				t.Fatalf("source index corrupt at %v", from)
			}
		}
		s += len(as)
	}
	if n != len(tb.byKey) || s != n || n > tb.max {
		t.Fatalf("lists hold %d, sources %d, map %d, max %d", n, s, len(tb.byKey), tb.max)
	}
}

// TestAdmitFlowsBound: with 4 flows a port lets one address hold 4 times
// admitPerSource admissions (each of its ports' flows is one), no more: a
// source naming 1,000 QPNs through its queries' flows churns only its own
// quota, and another address's admission stays.
func TestAdmitFlowsBound(t *testing.T) {
	e, err := New(Config{Flows: 4})
	if err != nil {
		t.Fatal(err)
	}
	p := &udPort{key: "b/1", e: e, gid: verbs.GIDEntry{GID: gidB}, admitted: newAdmTable(4*e.cfg.MaxAH, admitPerSource*e.cfg.Flows),
		pend: newPendingTable(pendingSlots * e.cfg.Flows)}
	e.ports["b/1"] = p
	until := time.Now().Add(time.Hour)
	flooder, other := netip.MustParseAddr("192.0.2.66"), netip.MustParseAddr("192.0.2.1")
	if err := e.Admit("b/1", ud.Endpoint{GID: gidA, QPN: qpnA, QKey: 1}, other, false, until); err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		if err := e.Admit("b/1", ud.Endpoint{GID: gidM, QPN: uint32(0x1000 + i), QKey: 1}, flooder, false, until); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(p.admitted.bySrc[flooder]); n != 4*admitPerSource {
		t.Errorf("an address naming 1,000 QPNs holds %d admissions, want its quota %d", n, 4*admitPerSource)
	}
	if !probeFrom(p, gidA, qpnA) {
		t.Error("another address's admission did not survive the flood")
	}
	if _, err := New(Config{Flows: 17}); err == nil {
		t.Error("an engine of 17 flows was made")
	}
}

// TestAdmitPoisoning is #41 item 3 on the table: a third host's query naming
// a live admission's GID and QPN with another qkey, from its own address or
// spoofing the peer's, never replaces what the peer's own queries set. It
// becomes at most the candidate (answered beside the incumbent), which takes
// over only when the incumbent is not refreshed for a lifetime; a second
// poisoner cannot take a live candidate from its address; an unauthenticated
// query changes nothing an authenticated one set.
func TestAdmitPoisoning(t *testing.T) {
	const life = time.Minute
	peer, poisoner, second := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.66"), netip.MustParseAddr("192.0.2.67")
	k := srcKey{gid: gidA, qpn: qpnA}
	now := time.Now()
	tb := newAdmTable(1000, 4)
	tb.admit(k, peer, 7, 0, false, now.Add(life), now)
	a, _ := tb.lookup(k, now)
	tb.confirm(a)
	reply := func(at time.Time) (uint32, []uint32) {
		t.Helper()
		a, ok := tb.lookup(k, at)
		if !ok {
			t.Fatalf("admission gone at +%v", at.Sub(now))
		}
		var cand []uint32
		if q, _, ok := a.candidate(at); ok && q != a.qkey {
			cand = append(cand, q)
		}
		return a.qkey, cand
	}

	// The poisoner, from its own address, then spoofing the peer's.
	tb.admit(k, poisoner, 99, 0, false, now.Add(life), now)
	if q, c := reply(now); q != 7 || len(c) != 1 || c[0] != 99 {
		t.Errorf("after a query from another address: incumbent qkey %d, candidates %v; want 7 and [99]", q, c)
	}
	tb.admit(k, second, 98, 0, false, now.Add(life), now)
	if q, c := reply(now); q != 7 || len(c) != 1 || c[0] != 99 {
		t.Errorf("a second address took the live candidate: incumbent %d, candidates %v", q, c)
	}
	tb.admit(k, peer, 66, 0, false, now.Add(life), now) // spoofed from the peer's address
	if q, _ := reply(now); q != 7 || !a.confirmed {
		t.Errorf("a spoofed query from the peer's address replaced the incumbent: qkey %d, confirmed %v", q, a.confirmed)
	}
	checkAdmTable(t, &tb)

	// The peer keeps refreshing; the poisoner keeps asking: for ten
	// lifetimes the incumbent stays.
	for i := 1; i <= 20; i++ {
		at := now.Add(time.Duration(i) * life / 2)
		tb.admit(k, poisoner, 99, 0, false, at.Add(life), at)
		tb.admit(k, peer, 7, 0, false, at.Add(life), at)
		if q, _ := reply(at); q != 7 {
			t.Fatalf("at +%v the incumbent qkey is %d, want 7", at.Sub(now), q)
		}
	}

	// A peer that really changed its qkey: nobody refreshes 7 any more, so
	// the candidate it refreshes takes over within a lifetime.
	tb2 := newAdmTable(1000, 4)
	tb2.admit(k, peer, 7, 0, false, now.Add(life), now)
	mid := now.Add(life / 2)
	tb2.admit(k, peer, 8, 0, false, mid.Add(life), mid)
	if a, _ := tb2.lookup(k, mid); a.qkey != 7 {
		t.Errorf("the new qkey replaced the live one at once: %d", a.qkey)
	}
	later := now.Add(life + time.Second)
	if a, ok := tb2.lookup(k, later); !ok || a.qkey != 8 || a.from != peer {
		t.Errorf("after the old qkey ran out: %+v, %v; want qkey 8 from the peer", a, ok)
	}
	checkAdmTable(t, &tb2)

	// A candidate from another address moves the admission to that
	// address's quota when it takes over.
	tb3 := newAdmTable(1000, 4)
	tb3.admit(k, peer, 7, 0, false, now.Add(life), now)
	tb3.admit(k, poisoner, 7, 0, false, mid.Add(life), mid)
	if a, ok := tb3.lookup(k, later); !ok || a.from != poisoner || len(tb3.bySrc[peer]) != 0 {
		t.Errorf("promoted candidate: %+v, sources %v", a, tb3.bySrc)
	}
	checkAdmTable(t, &tb3)

	// Authenticated: a member's query sets the qkey; no query without the
	// key changes or refreshes it.
	tb4 := newAdmTable(1000, 4)
	tb4.admit(k, peer, 7, 0, true, now.Add(life), now)
	tb4.admit(k, peer, 99, 0, false, now.Add(life), now)
	tb4.admit(k, poisoner, 99, 0, false, now.Add(2*life), now)
	a4, _ := tb4.lookup(k, now)
	if _, _, ok := a4.candidate(now); ok || a4.qkey != 7 || a4.until != now.Add(life) {
		t.Errorf("unauthenticated queries changed an authenticated admission: %+v", a4)
	}
	tb4.admit(k, peer, 8, 0, true, now.Add(life), now)
	if a4.qkey != 8 {
		t.Errorf("an authenticated query did not set the qkey: %d", a4.qkey)
	}
	checkAdmTable(t, &tb4)
}

// TestPoisonedAdmissionStillAnswered: with a poisoner's candidate the
// peer's probe is answered at the peer's own qkey, and once more at the
// candidate's (which the peer's adapter drops): nothing is taken away.
func TestPoisonedAdmissionStillAnswered(t *testing.T) {
	_, a, eb, b := pair(t, nil, false) // B admitted A with qkey 7 from 192.0.2.1
	pl, err := probe(a, ud.Target{Dst: toB, Seq: 1}, 100)
	if err != nil {
		t.Fatal(err)
	}
	deliver(b, gidA, qpnA, pl, 10)
	if err := eb.Admit("b/1", ud.Endpoint{GID: gidA, QPN: qpnA, QKey: 99}, netip.MustParseAddr("192.0.2.66"), false, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	b.out = b.out[:0]
	b.mu.Unlock()
	deliver(b, gidA, qpnA, pl, 20)
	b.mu.Lock()
	defer b.mu.Unlock()
	var qkeys []uint32
	for _, o := range b.out {
		qkeys = append(qkeys, o.dst.QKey)
	}
	if len(qkeys) != 2 || qkeys[0] != 7 || qkeys[1] != 99 {
		t.Errorf("answers went to qkeys %v, want [7 99] (the peer's first)", qkeys)
	}
}
