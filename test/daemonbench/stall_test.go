package daemonbench

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/probe"
)

// TestStalledProbesReported: when the peer engine's post does not return
// (on the test bed, rxe retrying a send a tc drop refused stood in
// ibv_post_send for 14-16 s, docs/TESTING.md), the daemon does not go on
// showing the peers' last states as if they were current: the post runs
// on the port's own poster, so the pass goes on, and once the call has
// stood longer than probe.PostBound (1 s) the port is cut off: a status
// request finds the peers component in error naming the device and port
// and the call, the port's paths unknown, and the verdict's daemon
// condition a problem; once the post returns, the component is ok again
// and the figures move.
func TestStalledProbesReported(t *testing.T) {
	const n = 2
	r := startWithFleet(t, n, 1, config.DefaultProbeFlows, "peer_interval = \"100ms\"\npeer_timeout = \"50ms\"\n")
	defer r.stop(t)
	r.waitUp(t, n, 30*time.Second)

	hold := make(chan struct{})
	postHold.Store(&hold)
	released := false
	release := func() {
		if !released {
			released = true
			postHold.Store(nil)
			close(hold)
		}
	}
	defer release()
	held := time.Now()
	var st *apitype.Snapshot
	var err error
	for {
		if st, err = r.c.Status(context.Background()); err != nil {
			t.Fatal(err)
		}
		if c := st.Components[apitype.ComponentPeers]; c.State == apitype.Error {
			if !strings.Contains(c.Error, "ibv_post_send") || !strings.Contains(c.Error, "device mem0 port 1") {
				t.Errorf("peers component in error with %q; want it to name the device and port whose post does not return", c.Error)
			}
			break
		}
		if time.Since(held) > 10*time.Second {
			t.Fatalf("after %v of a blocked post the peers component is %+v", time.Since(held), st.Components[apitype.ComponentPeers])
		}
		time.Sleep(500 * time.Millisecond)
	}
	if took := time.Since(held); took < probe.PostBound || took > probe.StallBound(100*time.Millisecond) {
		t.Errorf("reported after %v, want between the post bound %v and the pass's stall bound %v", took, probe.PostBound, probe.StallBound(100*time.Millisecond))
	}
	for _, p := range st.Peers.Peers {
		for _, pa := range p.Paths {
			if pa.Local == "mem0/1" && pa.State != apitype.PeerUnknown {
				t.Errorf("peer %s's path from the stuck port is %s, want unknown", p.Name, pa.State)
			}
		}
	}
	problem := false
	for _, c := range st.Health.Conditions {
		if c.Type == apitype.CondDaemon && c.Status == "problem" && strings.Contains(c.Message, "peers") {
			problem = true
		}
	}
	if !problem || st.Health.Healthy {
		t.Errorf("verdict with the probes stalled: healthy %v, conditions %+v; want the daemon condition a problem naming peers", st.Health.Healthy, st.Health.Conditions)
	}

	release()
	var sent0 uint64
	for _, p := range st.Peers.Peers {
		for _, pa := range p.Paths {
			sent0 += pa.Sent
		}
	}
	for deadline := time.Now().Add(20 * time.Second); ; {
		if st, err = r.c.Status(context.Background()); err != nil {
			t.Fatal(err)
		}
		var sent uint64
		for _, p := range st.Peers.Peers {
			for _, pa := range p.Paths {
				sent += pa.Sent
			}
		}
		if c := st.Components[apitype.ComponentPeers]; c.State == apitype.OK && sent > sent0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("20 s after the post returned: peers component %+v, probes counted %d (were %d)", st.Components[apitype.ComponentPeers], sent, sent0)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
