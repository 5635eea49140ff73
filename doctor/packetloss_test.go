package doctor

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"
)

// fakeNet is a NetCounters over two reads: before[netdev] until the
// counter interval's Wait, after[netdev] from then on (an error value for
// a netdev in errs).
type fakeNet struct {
	t             *testing.T
	before, after map[string]map[string]uint64
	errs          map[string]error
	waited        bool
	calls         map[string]int
}

func (f *fakeNet) read(nd string) (map[string]uint64, error) {
	f.calls[nd]++
	if err, ok := f.errs[nd]; ok {
		return nil, err
	}
	m := f.before
	if f.waited {
		m = f.after
	}
	c, ok := m[nd]
	if !ok {
		f.t.Errorf("NetCounters(%s): not a RoCE netdev of the fixture", nd)
		return nil, errors.New("no such netdev")
	}
	return maps.Clone(c), nil
}

func (f *fakeNet) wait(ctx context.Context, d time.Duration) error {
	f.waited = true
	return nil
}

// unsupported is what rdmad's NetCounters returns for a netdev whose
// driver has neither pause parameters nor ethtool -S statistics (virtio,
// veth).
var unsupported = fmt.Errorf("ethtool: pause statistics of eth0: operation not supported: %w", errors.ErrUnsupported)

// netEnv is the fixture (RoCE netdevs ens1f0np0 of mlx5_0/1 and eth0 of
// rxe0/1) with a counter interval of 2s over which ens1f0np0's counters go
// from before to after; eth0 (virtio under Soft-RoCE) has none.
func netEnv(t *testing.T, before, after map[string]uint64) *Env {
	f := &fakeNet{t: t, calls: map[string]int{},
		before: map[string]map[string]uint64{"ens1f0np0": before},
		after:  map[string]map[string]uint64{"ens1f0np0": after},
		errs:   map[string]error{"eth0": unsupported}}
	return &Env{SysRoot: fixture, Interval: 2 * time.Second, Wait: f.wait, NetCounters: f.read}
}

// mlx5Net is the counters of an mlx5 netdev with PFC on priority 3 as
// rdmad keeps them, with over's values in place.
func mlx5Net(over map[string]uint64) map[string]uint64 {
	m := map[string]uint64{
		"rx_prio3_pause": 100, "tx_prio3_pause": 40, "rx_prio3_pause_duration": 300_000, "tx_prio3_pause_duration": 9_000,
		"tx_pause_storm_warning_events": 3, "tx_pause_storm_error_events": 1,
		"rx_discards_phy": 0, "tx_discards_phy": 0, "rx_out_of_buffer": 5, "rx_prio3_discards": 0, "rx_prio3_buf_discard": 0,
		"rx_buffer_passed_thres_phy": 17, "tx_pause_frames": 0, "rx_pause_frames": 0,
	}
	maps.Copy(m, over)
	return m
}

// TestPacketLoss covers the rest of the packet-loss check: drivers that
// count frames without durations, link-level pause, counter resets, errors,
// netdevs without the counters.
func TestPacketLoss(t *testing.T) {
	for _, tt := range []struct {
		name          string
		before, after map[string]uint64
		verdict       string
		message, fix  string
	}{
		{"frames without durations, slow", map[string]uint64{"tx_prio3_pause": 10}, map[string]uint64{"tx_prio3_pause": 1999}, OK,
			"no pause storm, heavy pausing or discards over 2s (1 counters)", ""},
		{"frames without durations, fast", map[string]uint64{"tx_prio3_pause": 10}, map[string]uint64{"tx_prio3_pause": 2010}, Warn,
			"ens1f0np0: heavy pausing in 2s: priority 3 paused by this port, this host cannot take the traffic in (tx_prio3_pause +2000)", "check PFC on the RoCE priority"},
		{"link-level pause", mlx5Net(nil), mlx5Net(map[string]uint64{"rx_pause_frames": 5000}), Warn,
			"5000 link-level pause frames received (rx_pause_frames +5000)", "ECN"},
		{"transmit pausing, duration", mlx5Net(nil), mlx5Net(map[string]uint64{"tx_prio3_pause_duration": 409_000}), Warn,
			"priority 3 paused 20% of the time by this port, this host cannot take the traffic in (tx_prio3_pause +0, tx_prio3_pause_duration +400ms)", "PFC"},
		{"counters reset", mlx5Net(map[string]uint64{"rx_discards_phy": 99, "tx_pause_storm_error_events": 4}), mlx5Net(nil), OK,
			"no pause storm, heavy pausing or discards over 2s (13 counters)", ""},
		{"a counter appears", map[string]uint64{}, map[string]uint64{"rx_discards_phy": 5}, Skip,
			"ens1f0np0 has none of the pause or discard counters rdmad judges; eth0 has no pause or discard counters", ""},
		{"storm and discards together", mlx5Net(nil), mlx5Net(map[string]uint64{"tx_pause_storm_error_events": 3, "rx_out_of_buffer": 8}), Fail,
			"PAUSE STORM: tx_pause_storm_error_events +2 in 2s", "a pause storm comes from a receiver"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := checkPacketLoss(netEnv(t, tt.before, tt.after))
			if r.Verdict != tt.verdict || !strings.Contains(r.Message, tt.message) || !strings.Contains(r.Fix, tt.fix) {
				t.Errorf("got %s %q (fix %q)\nwant %s, message containing %q, fix containing %q", r.Verdict, r.Message, r.Fix, tt.verdict, tt.message, tt.fix)
			}
		})
	}

	t.Run("storm and discards name both", func(t *testing.T) {
		r := checkPacketLoss(netEnv(t, mlx5Net(nil), mlx5Net(map[string]uint64{"tx_pause_storm_error_events": 3, "rx_out_of_buffer": 8})))
		if !strings.Contains(r.Message, "discards rising: rx_out_of_buffer +3 in 2s") || !strings.Contains(r.Fix, "; check PFC on the RoCE priority") {
			t.Errorf("message %q, fix %q: want the discards and both fixes", r.Message, r.Fix)
		}
	})

	t.Run("read error", func(t *testing.T) {
		e := netEnv(t, nil, nil)
		f := &fakeNet{t: t, calls: map[string]int{}, errs: map[string]error{
			"ens1f0np0": errors.New("ethtool: ethtool -S statistics of ens1f0np0: ETHTOOL_GSTATS: no such device (the netdev is gone: the next inventory read drops it)"),
			"eth0":      unsupported}}
		e.NetCounters, e.Wait = f.read, f.wait
		r := checkPacketLoss(e)
		if r.Verdict != Warn || !strings.Contains(r.Message, "cannot read the pause and discard counters of ens1f0np0: ethtool: ethtool -S statistics of ens1f0np0") ||
			!strings.Contains(r.Fix, "ethtool -S ens1f0np0") {
			t.Errorf("got %s %q (fix %q)", r.Verdict, r.Message, r.Fix)
		}
	})

	t.Run("no RoCE netdev supports them", func(t *testing.T) {
		f := &fakeNet{t: t, calls: map[string]int{}, errs: map[string]error{"ens1f0np0": unsupported, "eth0": unsupported}}
		r := checkPacketLoss(&Env{SysRoot: fixture, Interval: time.Second, Wait: f.wait, NetCounters: f.read})
		if r.Verdict != Skip || !strings.Contains(r.Message, "ens1f0np0 has no pause or discard counters") || !strings.Contains(r.Message, "eth0 has no pause") {
			t.Errorf("got %s %q", r.Verdict, r.Message)
		}
	})

	t.Run("without interval", func(t *testing.T) {
		f := &fakeNet{t: t, calls: map[string]int{}}
		r := checkPacketLoss(&Env{SysRoot: fixture, NetCounters: f.read})
		if r.Verdict != Skip || !strings.Contains(r.Message, "--interval 0") || len(f.calls) != 0 {
			t.Errorf("got %s %q, %d reads", r.Verdict, r.Message, len(f.calls))
		}
	})

	t.Run("InfiniBand only", func(t *testing.T) {
		root := tree(t, map[string]string{"sys/class/infiniband/mlx5_0": "", "sys/class/infiniband/rxe0": ""})
		f := &fakeNet{t: t, calls: map[string]int{}}
		r := checkPacketLoss(&Env{SysRoot: root, Interval: time.Second, Wait: f.wait, NetCounters: f.read})
		if r.Verdict != Skip || !strings.Contains(r.Message, "no RoCE ports with a netdev") {
			t.Errorf("got %s %q", r.Verdict, r.Message)
		}
	})
}

// TestPacketLossOneInterval: the whole table pays the counter interval
// once, and reads each RoCE netdev's counters twice, with the devices.
func TestPacketLossOneInterval(t *testing.T) {
	waits := 0
	f := &fakeNet{t: t, calls: map[string]int{},
		before: map[string]map[string]uint64{"ens1f0np0": mlx5Net(nil), "eth0": {}},
		after:  map[string]map[string]uint64{"ens1f0np0": mlx5Net(map[string]uint64{"rx_discards_phy": 1}), "eth0": {}}}
	e := &Env{SysRoot: fixture, DevRoot: t.TempDir(), ProcRoot: t.TempDir(), DaemonErr: errors.New("not running"), Interval: time.Second,
		Wait:        func(ctx context.Context, d time.Duration) error { waits++; return f.wait(ctx, d) },
		NetCounters: f.read, Addrs: addrs(nil)}
	var got Result
	for _, r := range Run(e, Checks) {
		if r.ID == "packet-loss" {
			got = Result{Verdict: r.Verdict, Message: r.Message}
		}
	}
	if waits != 1 {
		t.Errorf("waited %d times, want 1", waits)
	}
	if want := map[string]int{"ens1f0np0": 2, "eth0": 2}; !maps.Equal(f.calls, want) {
		t.Errorf("NetCounters calls %v, want %v", f.calls, want)
	}
	if got.Verdict != Warn || !strings.Contains(got.Message, "ens1f0np0: discards rising: rx_discards_phy +1 in 1s") {
		t.Errorf("packet-loss in the table: %s %q", got.Verdict, got.Message)
	}
}
