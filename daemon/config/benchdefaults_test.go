package config

import (
	"testing"
	"time"
)

// TestProbeDefaultsOfTheBenchmarks: the peer engine's benchmarks of the
// shipped defaults (probe/scale_test.go defaultSettings, maxPeersBound)
// copy these values, since probe may not import this package; a default
// changed here must be changed there too, or those rows measure something
// no package installs.
func TestProbeDefaultsOfTheBenchmarks(t *testing.T) {
	pr := Default().Probe
	type probeDefaults struct {
		interval, timeout, rotate, rtt time.Duration
		window, flows, down, up        int
		loss                           float64
		maxPeersBound                  int
	}
	got := probeDefaults{pr.PeerInterval.Duration, pr.PeerTimeout.Duration, pr.Rotate.Duration, pr.RTTThreshold.Duration,
		pr.Window, pr.Flows, pr.DownAfter, pr.UpAfter, pr.LossThreshold, MaxProbePeers}
	want := probeDefaults{time.Second, 500 * time.Millisecond, time.Minute, 0, 100, 4, 3, 3, 1, 4096}
	if got != want {
		t.Errorf("[probe] defaults %+v; probe/scale_test.go defaultSettings measures %+v: change it with them", got, want)
	}
}
