package daemon

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/probe/wire"
	"github.com/rdmad/rdmad/verbs/bw"
)

// TestClockHint: a test refused as stale says what the probes measured of
// the peer's clock, which of the two clocks is off and by how much (the
// tagged clock step drill: node 1's clock an hour ahead). Other refusals and
// errors, a peer whose clock was not measured and one within the window
// (the probes measure it every 15 s: a clock stepped just now still reads
// as it was) are left as they are.
func TestClockHint(t *testing.T) {
	addr := netip.MustParseAddr("192.0.2.2")
	stale := &bw.RefusedError{Peer: netip.AddrPortFrom(addr, 18516), Status: wire.BWStale}
	snap := func(off time.Duration, samples int) *apitype.Snapshot {
		return &apitype.Snapshot{Peers: apitype.Peers{Peers: []apitype.Peer{
			{Name: "192.0.2.9", Address: "192.0.2.9", ClockOffset: 5 * time.Hour, ClockSamples: 3},
			{Name: "node2", Address: "192.0.2.2", ClockOffset: off, ClockOffsetError: 2 * time.Millisecond, ClockSamples: samples},
		}}}
	}
	for _, c := range []struct {
		name string
		err  error
		s    *apitype.Snapshot
		want []string // in the message; nil: the error unchanged
	}{
		{"its clock an hour behind", stale, snap(-time.Hour, 4), []string{"refused the bandwidth test", "the probes measure its clock 1h0m0s behind this node's (±2ms)", "NTP"}},
		{"its clock ahead", stale, snap(90*time.Second, 4), []string{"1m30s ahead of this node's", "NTP"}},
		{"clocks agree (or one stepped since the last measurement)", stale, snap(3*time.Millisecond, 4), nil},
		{"within the window", stale, snap(-29*time.Second, 4), nil},
		{"not measured", stale, snap(-time.Hour, 0), nil},
		{"no snapshot", stale, nil, nil},
		{"another refusal", &bw.RefusedError{Peer: stale.Peer, Status: wire.BWBusy}, snap(-time.Hour, 4), nil},
		{"another error", errors.New("bw: no answer"), snap(-time.Hour, 4), nil},
		{"no error", nil, snap(-time.Hour, 4), nil},
	} {
		got := clockHint(c.err, c.s, addr, "node2")
		if c.want == nil {
			if got != c.err {
				t.Errorf("%s: %v; want the error unchanged (%v)", c.name, got, c.err)
			}
			continue
		}
		var re *bw.RefusedError
		if !errors.As(got, &re) {
			t.Errorf("%s: %v does not wrap the refusal", c.name, got)
		}
		for _, w := range c.want {
			if !strings.Contains(got.Error(), w) {
				t.Errorf("%s: %q; want %q in it", c.name, got, w)
			}
		}
	}
}
