package probe

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/probe/probetest"
	"github.com/rdmad/rdmad/probe/ud"
)

// blockTransport is the memory transport whose posts from one port block
// while a gate is set, as rxe's ibv_post_send stands while it retries a
// send the kernel dropped; it counts the probes each port posted.
type blockTransport struct {
	*probetest.MemTransport
	mu      sync.Mutex
	blocked string
	gate    chan struct{}
	posted  map[string]int
}

func (b *blockTransport) ProbeBatch(local string, ts []ud.Target) int {
	b.mu.Lock()
	g := b.gate
	if local != b.blocked {
		g = nil
	}
	b.mu.Unlock()
	if g != nil {
		<-g
	}
	n := b.MemTransport.ProbeBatch(local, ts)
	b.mu.Lock()
	b.posted[local] += n
	b.mu.Unlock()
	return n
}

func (b *blockTransport) block(local string) (release func()) {
	g := make(chan struct{})
	b.mu.Lock()
	b.blocked, b.gate = local, g
	b.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			b.mu.Lock()
			b.gate = nil
			b.mu.Unlock()
			close(g)
		})
	}
}

func (b *blockTransport) postedFrom(local string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.posted[local]
}

// portView is what the last published state says of one local port: its
// Stuck text and its paths' states and losses.
type portView struct {
	stuck  string
	states map[string]int
	lost   uint64
	paths  int
}

func viewPort(ps *apitype.Peers, local string) portView {
	v := portView{states: map[string]int{}}
	if ps == nil {
		return v
	}
	for _, lp := range ps.Ports {
		if lp.Key == local {
			v.stuck = lp.Stuck
		}
	}
	for _, p := range ps.Peers {
		for _, pa := range p.Paths {
			if pa.Local == local {
				v.states[pa.State]++
				v.lost += pa.Lost
				v.paths++
			}
		}
	}
	return v
}

// fresh returns the state with figures no older than now.
func (r *scaleRun) fresh(tb testing.TB) *apitype.Peers {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := r.m.Fresh(ctx, 0); err != nil {
		tb.Fatalf("Fresh: %v", err)
	}
	return r.last.Load()
}

// TestPortStallOthersKeepRate is issue #38 item 2: one port's post that
// does not return cannot stall the pass. With mem0/1's posts blocked for
// 3 s, mem1/1's probes keep their rate, the manager's pass never stands,
// mem0/1 is cut off after PostBound (Stuck says so) with its paths
// unknown and not one loss counted on them, no peer goes down, and once
// the post returns mem0/1 is probed again and its paths come back up.
// Before the posters, the blocked post held the pass and mem1/1 sent
// nothing for the 3 s.
func TestPortStallOthersKeepRate(t *testing.T) {
	const peers, interval = 10, 100 * time.Millisecond
	s := Settings{Interval: interval, Timeout: 50 * time.Millisecond, Window: 20, MaxPeers: peers, Rotate: time.Hour, Resolve: time.Minute,
		Threshold: Thresholds{DownAfter: 3, UpAfter: 3, LossPct: 5, MinLosses: 2}}
	var bt *blockTransport
	r := startScaleWrapped(t, peers, 2, s, 100*time.Microsecond, 0, func(mt *probetest.MemTransport) Transport {
		bt = &blockTransport{MemTransport: mt, posted: map[string]int{}}
		return bt
	})
	defer r.stop(t)
	r.waitUp(t, 10*time.Second)
	before := viewPort(r.fresh(t), "mem0/1")
	if before.paths == 0 || before.states[apitype.PeerUp] != before.paths {
		t.Fatalf("before the stall mem0/1's paths are %v, want %d up", before.states, before.paths)
	}

	const stall = 3 * time.Second
	other0 := bt.postedFrom("mem1/1")
	release := bt.block("mem0/1")
	defer release() // before r.stop: a manager standing in the post would never return
	start := time.Now()
	var cutAt time.Duration
	for time.Since(start) < stall {
		if _, doing, stalled := r.m.Stalled(time.Now(), 500*time.Millisecond); stalled {
			t.Fatalf("the pass stood for 500 ms while one port's post was blocked (%s)", doing)
		}
		ps := r.last.Load()
		v := viewPort(ps, "mem0/1")
		if v.states[apitype.PeerDown] > 0 {
			t.Fatalf("%v after the block: mem0/1's paths are %v; a port that cannot post makes its paths unknown, not down", time.Since(start), v.states)
		}
		for _, p := range ps.Peers {
			if p.State == apitype.PeerDown {
				t.Fatalf("%v after the block: peer %s is down (%s): its mem1/1 path answers", time.Since(start), p.Name, p.Reason)
			}
		}
		if cutAt == 0 && v.stuck != "" {
			cutAt = time.Since(start)
		}
		time.Sleep(20 * time.Millisecond)
	}
	during := viewPort(r.fresh(t), "mem0/1")
	other := bt.postedFrom("mem1/1") - other0
	// One probe per peer and interval on mem1/1's paths: 300 in 3 s.
	want := int(stall/interval) * peers
	t.Logf("mem0/1 cut off %v after the block; mem1/1 posted %d probes in %v (%d due); mem0/1 %+v", cutAt, other, stall, want, during)
	if other < want*8/10 {
		t.Errorf("mem1/1 posted %d probes while mem0/1's post was blocked for %v, want at least %d (80%% of %d due)", other, stall, want*8/10, want)
	}
	if cutAt == 0 || cutAt > PostBound+time.Second {
		t.Errorf("mem0/1 was cut off %v after its post blocked, want within %v", cutAt, PostBound+time.Second)
	}
	if !strings.Contains(during.stuck, "ibv_post_send") {
		t.Errorf("mem0/1's Stuck = %q, want it to name the call that does not return", during.stuck)
	}
	if during.states[apitype.PeerUnknown] != during.paths {
		t.Errorf("mem0/1's paths are %v while it is cut off, want all %d unknown", during.states, during.paths)
	}
	if during.lost > before.lost {
		t.Errorf("mem0/1's paths lost %d probes during the stall: probes that waited for the stuck post are not losses", during.lost-before.lost)
	}
	if v := viewPort(r.last.Load(), "mem1/1"); v.states[apitype.PeerUp] != v.paths || v.stuck != "" {
		t.Errorf("mem1/1 during the stall: %+v, want every path up and not stuck", v)
	}

	release()
	back := time.Now()
	for {
		v := viewPort(r.fresh(t), "mem0/1")
		if v.stuck == "" && v.states[apitype.PeerUp] == v.paths {
			t.Logf("mem0/1 back up %v after its post returned", time.Since(back))
			break
		}
		if time.Since(back) > 3*time.Second {
			t.Fatalf("3 s after the post returned mem0/1 is %+v, want every path up and not stuck", v)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPortCutJudgesPeerByOtherPaths: while a port is cut off, and after it
// rejoins until its path's next sample, the peer is judged by its other
// paths: up, not unknown, even when the cut port's path is its last (a
// later unknown path would otherwise make it unknown, stateRank). With
// every path cut off the peer is unknown, saying why; the next answer on
// the rejoined path brings that path up.
func TestPortCutJudgesPeerByOtherPaths(t *testing.T) {
	m := flowsManager(t, 1, 1, 20)
	p := m.peers.inOrder()[0]
	now := time.Now()
	for _, pa := range p.paths {
		m.observe(p, pa, sample{rtt: 30}, now)
	}
	if p.state != apitype.PeerUp {
		t.Fatalf("peer %s before the cut, want up", p.state)
	}
	m.sched.posters = map[string]*poster{}
	for _, lp := range m.local {
		m.sched.posters[lp.Key] = &poster{local: lp.Key}
	}
	last := p.paths[len(p.paths)-1]
	pp := m.sched.posters[last.local]

	m.cutPort(last.local, pp, now, now)
	if last.h.state != apitype.PeerUnknown || !strings.Contains(last.h.reason, "ibv_post_send") {
		t.Errorf("the cut port's path is %s (%q), want unknown naming the call", last.h.state, last.h.reason)
	}
	if p.state != apitype.PeerUp {
		t.Errorf("with one of its ports cut off the peer is %s (%q), want up by its other path", p.state, p.reason)
	}
	m.rejoinPort(last.local, pp, now)
	if p.state != apitype.PeerUp {
		t.Errorf("after the port rejoined, before its path's next probe, the peer is %s (%q), want up", p.state, p.reason)
	}
	m.observe(p, last, sample{rtt: 30}, now)
	if last.h.state != apitype.PeerUp || p.state != apitype.PeerUp {
		t.Errorf("after the rejoined path's answer: path %s, peer %s; want both up", last.h.state, p.state)
	}

	for _, pa := range p.paths {
		m.cutPort(pa.local, m.sched.posters[pa.local], now, now)
	}
	if p.state != apitype.PeerUnknown || !strings.Contains(p.reason, "cut off") {
		t.Errorf("with every port cut off the peer is %s (%q), want unknown saying the ports are cut off", p.state, p.reason)
	}
}
