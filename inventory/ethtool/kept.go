package ethtool

import (
	"path"
	"strings"
)

// A Kind says what a kept driver counter counts.
type Kind int

const (
	// PriorityPause counts PFC pause frames of one priority received
	// (rx: the link partner paused this port's sending on the priority)
	// or sent (tx: this port paused the partner).
	PriorityPause Kind = iota + 1
	// PriorityPauseDuration is the time a priority was paused, in
	// microseconds (mlx5).
	PriorityPauseDuration
	// PauseStorm counts the NIC's pause storm events (mlx5's PFC stall
	// prevention): warning when it has sent pause frames for longer than
	// a watermark, error when it reached the timeout and stopped sending
	// them (drops may follow).
	PauseStorm
	// Discard counts packets dropped for lack of buffers, or on
	// transmission.
	Discard
	// BufferThreshold counts the times the port's receive buffer passed
	// its fill threshold (mlx5: 85%): no drop yet, congestion.
	BufferThreshold
)

// Kept are the ethtool -S statistics rdmad keeps, as path.Match patterns
// over the names (mlx5's; other drivers with the same names count the same
// thing), in the order docs/METRICS.md lists them (a test in
// daemon/metrics compares the two). N in the text is a priority, 0 to 7.
var Kept = []struct {
	Pattern string
	Kind    Kind
}{
	{"rx_prio[0-7]_pause", PriorityPause},
	{"tx_prio[0-7]_pause", PriorityPause},
	{"rx_prio[0-7]_pause_duration", PriorityPauseDuration},
	{"tx_prio[0-7]_pause_duration", PriorityPauseDuration},
	{"tx_pause_storm_warning_events", PauseStorm},
	{"tx_pause_storm_error_events", PauseStorm},
	{"rx_discards_phy", Discard},
	{"tx_discards_phy", Discard},
	{"rx_out_of_buffer", Discard},
	{"rx_prio[0-7]_discards", Discard},
	{"rx_prio[0-7]_buf_discard", Discard},
	{"rx_buffer_passed_thres_phy", BufferThreshold},
}

// A Class is what Classify makes of a kept name.
type Class struct {
	Kind Kind
	// Direction is "rx" or "tx" for pause counters.
	Direction string
	// Priority is the priority of a per-priority counter, else -1.
	Priority int
	// Level is "warning" or "error" for PauseStorm.
	Level string
}

// Classify says whether rdmad keeps the ethtool -S statistic name, and
// what it counts.
func Classify(name string) (Class, bool) {
	var kind Kind
	for _, k := range Kept {
		if ok, _ := path.Match(k.Pattern, name); ok {
			kind = k.Kind
			break
		}
	}
	if kind == 0 {
		return Class{}, false
	}
	c := Class{Kind: kind, Priority: -1}
	dir, rest, _ := strings.Cut(name, "_")
	if kind == PriorityPause || kind == PriorityPauseDuration {
		c.Direction = dir
	}
	if p, ok := strings.CutPrefix(rest, "prio"); ok && len(p) > 0 {
		c.Priority = int(p[0] - '0')
	}
	if kind == PauseStorm {
		c.Level = strings.TrimSuffix(strings.TrimPrefix(name, "tx_pause_storm_"), "_events")
	}
	return c, true
}

// Keep returns the kept statistics of stats by name.
func Keep(stats []Stat) map[string]uint64 {
	m := map[string]uint64{}
	for _, s := range stats {
		if _, ok := Classify(s.Name); ok {
			m[s.Name] = s.Value
		}
	}
	return m
}
