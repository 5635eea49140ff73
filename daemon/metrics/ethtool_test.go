package metrics

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/inventory/ethtool"
)

// fixtureNetStats is the NetStats hook of the fixture collector: what
// inventory/ethtool reads from an mlx5 netdev with PFC on priority 3 (every
// kept ethtool -S statistic, and the standard pause statistics) and from
// Soft-RoCE's virtio netdev (neither pause parameters nor kept statistics).
// It checks that the collector asks for the RoCE netdevs only.
func fixtureNetStats(t *testing.T) func([]string) []ethtool.Counters {
	return func(netdevs []string) []ethtool.Counters {
		if want := []string{"ens1f0np0", "eth0"}; !slices.Equal(netdevs, want) {
			t.Errorf("NetStats asked for %q, want the RoCE netdevs %q (not IPoIB's ib0)", netdevs, want)
		}
		return []ethtool.Counters{
			{Netdev: "ens1f0np0",
				Pause: &ethtool.Pause{Netdev: "ens1f0np0", RX: true, TX: true, TXFrames: 12, RXFrames: 34, HasTXFrames: true, HasRXFrames: true},
				Driver: map[string]uint64{"rx_prio3_pause": 1200, "tx_prio3_pause": 800, "rx_prio0_pause": 0,
					"rx_prio3_pause_duration": 2500000, "tx_prio3_pause_duration": 1500,
					"tx_pause_storm_warning_events": 2, "tx_pause_storm_error_events": 1,
					"rx_discards_phy": 5, "tx_discards_phy": 6, "rx_out_of_buffer": 7, "rx_prio3_discards": 8, "rx_prio3_buf_discard": 9,
					"rx_buffer_passed_thres_phy": 10}},
			{Netdev: "eth0", Driver: map[string]uint64{}},
		}
	}
}

// TestNetStatsOff: without the hook (tests, a fixture tree) and without
// RoCE netdevs, no rdmad_net_ metric is exported and nothing is read.
func TestNetStatsOff(t *testing.T) {
	if out := string(scrape(t, NewCollector(Options{Snapshot: func() *apitype.Snapshot { return fixtureSnapshot(t) }, SysfsRoot: t.TempDir()}))); strings.Contains(out, "rdmad_net_") {
		t.Errorf("scrape without NetStats has rdmad_net_ metrics:\n%s", out)
	}
	ib := &apitype.Snapshot{Devices: []apitype.Device{{Name: "mlx4_0", Ports: []apitype.Port{{Port: 1, LinkLayer: "InfiniBand", Netdev: "ib0"}}}}}
	called := false
	c := NewCollector(Options{Snapshot: func() *apitype.Snapshot { return ib }, SysfsRoot: t.TempDir(),
		NetStats: func([]string) []ethtool.Counters { called = true; return nil }})
	if out := string(scrape(t, c)); called || strings.Contains(out, "rdmad_net_") {
		t.Errorf("an InfiniBand-only node: NetStats called %v, scrape has rdmad_net_: %v", called, strings.Contains(out, "rdmad_net_"))
	}
}

// TestNetStatsPartial: a netdev whose driver counts no standard pause
// frames (Pause without them), or has no pause parameters (nil), gets no
// rdmad_net_pause_frames_total; a counter that is not kept is not
// exported.
func TestNetStatsPartial(t *testing.T) {
	snap := &apitype.Snapshot{Devices: []apitype.Device{{Name: "mlx5_0", Ports: []apitype.Port{
		{Port: 1, LinkLayer: "Ethernet", Netdev: "p0"}, {Port: 2, LinkLayer: "Ethernet", Netdev: "p1"}}}}}
	c := NewCollector(Options{Snapshot: func() *apitype.Snapshot { return snap }, SysfsRoot: t.TempDir(),
		NetStats: func([]string) []ethtool.Counters {
			return []ethtool.Counters{
				{Netdev: "p0", Pause: &ethtool.Pause{RX: true}, Driver: map[string]uint64{"rx_prio3_pause": 4, "rx_queue_0_drops": 9}},
				{Netdev: "p1", Driver: map[string]uint64{"rx_discards_phy": 1}},
			}
		}})
	out := string(scrape(t, c))
	for _, want := range []string{
		`rdmad_net_priority_pause_frames_total{direction="rx",netdev="p0",priority="3"} 4`,
		`rdmad_net_discards_total{counter="rx_discards_phy",netdev="p1"} 1`,
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("scrape lacks %s", want)
		}
	}
	for _, not := range []string{"rdmad_net_pause_frames_total", "rx_queue_0_drops"} {
		if strings.Contains(out, not) {
			t.Errorf("scrape has %s:\n%s", not, out)
		}
	}
}

// TestEthtoolTableDocumented: the table of docs/METRICS.md that maps
// ethtool -S names to metrics is inventory/ethtool's Kept, in its order,
// with the metric the collector exports for each.
func TestEthtoolTableDocumented(t *testing.T) {
	b, err := os.ReadFile(metricsDoc)
	if err != nil {
		t.Fatal(err)
	}
	// | `rx_prio[0-7]_pause` | `rdmad_net_priority_pause_frames_total` | ...
	row := regexp.MustCompile("(?m)^\\| `([a-z0-9_\\[\\]-]+)` \\| `(rdmad_net_[a-z0-9_]+)` \\|")
	var doc [][2]string
	for _, m := range row.FindAllStringSubmatch(string(b), -1) {
		doc = append(doc, [2]string{m[1], m[2]})
	}
	kindDesc := map[ethtool.Kind]*prometheus.Desc{
		ethtool.PriorityPause:         netPriorityPauseFrames,
		ethtool.PriorityPauseDuration: netPriorityPauseDuration,
		ethtool.PauseStorm:            netPauseStorms,
		ethtool.Discard:               netDiscards,
		ethtool.BufferThreshold:       netBufferThreshold,
	}
	var code [][2]string
	for _, k := range ethtool.Kept {
		d, ok := kindDesc[k.Kind]
		if !ok {
			t.Fatalf("kind %d of %s has no metric", k.Kind, k.Pattern)
		}
		code = append(code, [2]string{k.Pattern, descName(t, d)})
	}
	if diff := cmp.Diff(code, doc); diff != "" {
		t.Errorf("docs/METRICS.md's ethtool -S table (-inventory/ethtool.Kept +docs):\n%s", diff)
	}
}
