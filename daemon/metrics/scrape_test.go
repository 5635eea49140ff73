package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/inventory/ethtool"
)

// TestScrapeCollectorSeries: each scrape-time read reports its success and
// its duration, as node_exporter's collectors do: 0 when it failed (its
// series are missing), the time the read took; none for a read that is
// not made (no hook, no RoCE netdev) (#27 item 5).
func TestScrapeCollectorSeries(t *testing.T) {
	snap := fixtureSnapshot(t)
	ok := true
	c := NewCollector(Options{Snapshot: func() *apitype.Snapshot { return snap }, SysfsRoot: "testdata/netroot", GoVersion: "go1.x",
		Now: steppingClock(40 * time.Millisecond),
		NetStats: func(netdevs []string) []ethtool.Counters {
			if !ok {
				return nil
			}
			return []ethtool.Counters{{Netdev: netdevs[0], Driver: map[string]uint64{}}}
		},
		Resources: func() apitype.Resources {
			if !ok {
				return apitype.Resources{Error: "rdmares: open an RDMA netlink socket: protocol not supported"}
			}
			return apitype.Resources{}
		}})
	for _, want := range []bool{true, false} {
		ok = want
		out := string(scrape(t, c))
		v := "0"
		if want {
			v = "1"
		}
		for _, line := range []string{
			`rdmad_scrape_collector_success{collector="ethtool"} ` + v,
			`rdmad_scrape_collector_success{collector="rdma_netlink"} ` + v,
			`rdmad_scrape_collector_duration_seconds{collector="ethtool"} 0.04`,
			`rdmad_scrape_collector_duration_seconds{collector="rdma_netlink"} 0.04`,
		} {
			if !strings.Contains(out, line+"\n") {
				t.Errorf("reads succeeding %v: scrape lacks %s", want, line)
			}
		}
	}
	// No read, no collector series.
	none := NewCollector(Options{Snapshot: func() *apitype.Snapshot { return snap }, SysfsRoot: "testdata/netroot"})
	if out := string(scrape(t, none)); strings.Contains(out, "rdmad_scrape_collector_") {
		t.Errorf("a collector without scrape-time reads reports them:\n%s", out)
	}
}
