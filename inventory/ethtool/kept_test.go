package ethtool

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestClassify(t *testing.T) {
	for name, want := range map[string]Class{
		"rx_prio3_pause":                {Kind: PriorityPause, Direction: "rx", Priority: 3},
		"tx_prio0_pause":                {Kind: PriorityPause, Direction: "tx", Priority: 0},
		"rx_prio7_pause_duration":       {Kind: PriorityPauseDuration, Direction: "rx", Priority: 7},
		"tx_prio5_pause_duration":       {Kind: PriorityPauseDuration, Direction: "tx", Priority: 5},
		"tx_pause_storm_warning_events": {Kind: PauseStorm, Priority: -1, Level: "warning"},
		"tx_pause_storm_error_events":   {Kind: PauseStorm, Priority: -1, Level: "error"},
		"rx_discards_phy":               {Kind: Discard, Priority: -1},
		"tx_discards_phy":               {Kind: Discard, Priority: -1},
		"rx_out_of_buffer":              {Kind: Discard, Priority: -1},
		"rx_prio4_discards":             {Kind: Discard, Priority: 4},
		"rx_prio2_buf_discard":          {Kind: Discard, Priority: 2},
		"rx_buffer_passed_thres_phy":    {Kind: BufferThreshold, Priority: -1},
	} {
		got, ok := Classify(name)
		if !ok {
			t.Errorf("%s is not kept", name)
			continue
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Classify(%s) (-want +got):\n%s", name, diff)
		}
	}
	// Look-alikes rdmad does not keep: other priorities' syntax, the
	// global pause counters (the standard pause statistics have them),
	// per-priority traffic, veth's and mlx5's ring counters.
	for _, name := range []string{"rx_prio8_pause", "rx_prio10_pause", "rx_prio3_pause_transition", "rx_global_pause", "tx_pause_ctrl_phy",
		"rx_prio3_packets", "rx_prio3_cong_discard", "rx_queue_0_drops", "rx0_buff_alloc_err", "peer_ifindex", "rx_discards", "tx_pause_storm_events"} {
		if c, ok := Classify(name); ok {
			t.Errorf("Classify(%s) = %+v, want not kept", name, c)
		}
	}
	kept := Keep([]Stat{{"peer_ifindex", 2}, {"rx_prio3_pause", 9}, {"rx_discards_phy", 1}, {"rx_queue_0_drops", 4}})
	if diff := cmp.Diff(map[string]uint64{"rx_prio3_pause": 9, "rx_discards_phy": 1}, kept); diff != "" {
		t.Errorf("Keep (-want +got):\n%s", diff)
	}
}
