package daemonbench

import (
	"context"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/config"
)

// TestStatusFreshFigures: the peer manager builds its state for figures
// only when a reader asks (issue #29 item 2), so GET /v1/status asks first
// for figures no older than the publish period (1 s here): a status
// requested more than a period after the transport had sent some probes
// counts all of them but those still in flight, though the manager's
// unasked publish comes only every 30 s. (A publish for another reason,
// a state change, may have come less than a period before the request:
// the status then holds its figures, young enough; so the bound is the
// probes sent a period before the request, not those sent just before.)
func TestStatusFreshFigures(t *testing.T) {
	const n = 3
	r := startWithFleet(t, n, 1, config.DefaultProbeFlows, "peer_interval = \"100ms\"\npeer_timeout = \"50ms\"\n")
	defer r.stop(t)
	tr := <-r.tr
	r.waitUp(t, n, 30*time.Second)
	for round := range 4 {
		sent := tr.Sent()
		time.Sleep(1200 * time.Millisecond) // more than the publish period
		st, err := r.c.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var done uint64
		for _, p := range st.Peers.Peers {
			for _, pa := range p.Paths {
				done += pa.Sent
			}
		}
		// In flight: at most 2 probes a path (maxInflightPerPath), a lost
		// one among them until its 50 ms timeout.
		if done+2*n < sent {
			t.Errorf("round %d: status counts %d probes answered or lost; the transport had sent %d more than a period before the request (at most %d in flight)", round, done, sent, 2*n)
		}
	}
}
