package metrics

import (
	"bytes"
	"context"
	"flag"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/prometheus/common/expfmt"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/internal/testenv"
	"github.com/rdmad/rdmad/inventory"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// fixtureSnapshot is the state of a daemon on inventory's fake sysfs tree
// with one policy and a failed reload.
func fixtureSnapshot(t *testing.T) *apitype.Snapshot {
	t.Helper()
	devs, err := inventory.Reader{Root: "../../inventory/testdata/roce-ib"}.Read()
	if err != nil {
		t.Fatal(err)
	}
	// More of what real drivers expose than the sysfs fixture has, so that
	// every documented metric is in the golden file (TestDocumented): the
	// mlx5 hw_counters with node_exporter names, one without (generic),
	// lifespan (milliseconds), every counters/ file and one rdmad has no
	// metric for; a bnxt_re port with its gauges.
	for i := range devs {
		if devs[i].Name == "mlx4_0" && devs[i].PCIe != nil {
			devs[i].PCIe.Speed = 0 // sysfs said Unknown
		}
		if devs[i].Name != "mlx5_0" {
			continue
		}
		p := &devs[i].Ports[0]
		if p.Port != 1 || p.HWCounters == nil || p.Counters == nil {
			t.Fatalf("fixture: mlx5_0's first port is %d with hw_counters %v, counters %v", p.Port, p.HWCounters, p.Counters)
		}
		// The daemon counts transitions and reads the netdev's speed
		// where sysfs has it (the fixture has no class/net/ens1f0np0).
		p.Transitions, p.NetdevSpeedMbps = 3, 100000
		if devs[i].PCIe == nil {
			t.Fatal("fixture: mlx5_0 has no PCIe link")
		}
		// A Gen4 card that trained at x8 in a Gen4 x16 path.
		devs[i].PCIe.Width = 8
		for k, v := range map[string]uint64{"rp_cnp_handled": 40, "np_ecn_marked_roce_packets": 41, "local_ack_timeout_err": 3,
			"rnr_nak_retry_err": 4, "out_of_buffer": 5, "duplicate_request": 6, "req_cqe_error": 8, "resp_cqe_error": 9,
			"req_rnr_retries_exceeded": 11, "lifespan": 10, "implied_nak_seq_err": 15, "req_cqe_flush_error": 16,
			"req_remote_access_errors": 17, "req_remote_invalid_request": 18, "resp_cqe_flush_error": 19, "resp_local_length_error": 20,
			"resp_remote_access_errors": 21, "roce_adp_retrans": 22, "roce_adp_retrans_to": 23, "roce_slow_restart": 24,
			"roce_slow_restart_cnps": 25, "roce_slow_restart_trans": 26, "rp_cnp_ignored": 27, "rx_atomic_requests": 28,
			"rx_dct_connect": 29, "rx_icrc_encapsulated": 30, "rx_read_requests": 31, "rx_write_requests": 32} {
			p.HWCounters[k] = v
		}
		for k, v := range map[string]uint64{"port_rcv_errors": 12, "port_xmit_discards": 13, "port_rcv_packets": 1000, "port_xmit_packets": 2000,
			"link_error_recovery": 1, "port_xmit_wait": 77, "excessive_buffer_overrun_errors": 33, "local_link_integrity_errors": 34,
			"multicast_rcv_packets": 35, "multicast_xmit_packets": 36, "unicast_rcv_packets": 37, "unicast_xmit_packets": 38,
			"port_rcv_constraint_errors": 39, "port_xmit_constraint_errors": 40, "port_rcv_discards": 41,
			"port_rcv_remote_physical_errors": 42, "port_rcv_switch_relay_errors": 43, "VL15_dropped": 44,
			"unknown_counter": 45} {
			p.Counters[k] = v
		}
	}
	devs = append(devs, apitype.Device{Name: "bnxt_re0", NodeType: "1: CA", NodeGUID: "0a1b:2c3d:4e5f:6071", FWVer: "227.0.131.0",
		Ports: []apitype.Port{{Port: 1, State: "ACTIVE", PhysState: "LinkUp", LinkLayer: "Ethernet", RateGbps: 100,
			HWCounters: map[string]uint64{"active_qps": 5, "active_pds": 2, "watermark_qps": 12, "db_fifo_register": 3,
				"to_retransmits": 14, "lifespan": 1000}}}})
	return &apitype.Snapshot{
		Seq: 42, Version: "1.2.3", State: apitype.Degraded, PID: 100, StartedAt: t0, UpdatedAt: t0.Add(time.Minute),
		Config:  apitype.Config{Path: "/etc/rdmad/rdmad.toml", Generation: 3, LoadedAt: t0.Add(10 * time.Second), Error: "rdmad.toml:3: daemon.x: unknown key", Failures: 1},
		Devices: devs,
		Policy: apitype.PolicyState{Policies: []apitype.PolicyStatus{{Name: "fabric", Mode: "enforce", Targets: []apitype.Target{
			{Kind: "mtu", Object: "ens1f0np0", Desired: "9000", Actual: "9000", State: apitype.Applied, LastChange: t0.Add(20 * time.Second), Applies: 2, Drifts: 2},
			{Kind: "qos", Object: "ens1f0np0", Desired: "trust=dscp pfc=3", Actual: "no DCB", State: apitype.Unsupported, LastChange: t0},
			{Kind: "roce", Object: "mlx5_0/1", Desired: "tos=106", Actual: "tos=0", State: apitype.TargetError, Error: "permission denied"},
			{Kind: "ecn", Object: "ens1f0np0", Desired: "np=3", Actual: "np=3", State: apitype.InSync, LastChange: t0},
		}}}},
		Loopback: []apitype.LoopbackPort{{Device: "rxe0", Port: 1, State: "ok", Rounds: 10, Failures: 1, QPRecreated: 1,
			GID: "::ffff:192.0.2.1", TrafficClass: 106,
			Write: apitype.OpStats{LastRTT: 40 * time.Microsecond, P50: 30 * time.Microsecond, P99: 90 * time.Microsecond, Max: 120 * time.Microsecond, Count: 9, Errors: 1,
				RTTHist: rtts(30*time.Microsecond, 8, 120*time.Microsecond, 1)},
			Read: apitype.OpStats{P50: 35 * time.Microsecond, P99: 80 * time.Microsecond, Max: 100 * time.Microsecond, LastRTT: 35 * time.Microsecond, Count: 9,
				RTTHist: rtts(35*time.Microsecond, 8, 100*time.Microsecond, 1)},
			Send: apitype.OpStats{Errors: 1}}},
		MRPool: []apitype.PoolDevice{{Device: "rxe0", Registered: true, RegisteredBytes: 9 << 20, InUse: 1, InUseBytes: 4 << 10, HighWaterBytes: 8 << 10, Failures: 3,
			Classes: []apitype.PoolClass{{Size: 4 << 10, Count: 256, InUse: 1, HighWater: 2, Gets: 5, Exhausted: 0}, {Size: 1 << 20, Count: 8, Exhausted: 3}},
			Canary:  apitype.Canary{Registrations: 4, LastLatency: 1500 * time.Microsecond, MaxLatency: 3 * time.Millisecond}}},
		Peers: apitype.Peers{NodeID: "5eed0001", Ports: []apitype.PeerPort{{Key: "rxe0/1", QPN: 17, TrafficClass: 104}}, Configured: 2, Peers: []apitype.Peer{
			{Name: "192.0.2.17", Group: "tor-a", NodeID: "5eed0017", State: "up", Paths: []apitype.PeerPath{{Local: "rxe0/1", State: "up",
				RTTP50: 20 * time.Microsecond, RTTP99: 50 * time.Microsecond, LastRTT: 21 * time.Microsecond, HostDelayP99: 5 * time.Microsecond,
				LossPct: 2.5, Samples: 40, Sent: 41, Lost: 1, RTTHist: apitype.NewSharedRTTHistogram(rtts(20*time.Microsecond, 38, 50*time.Microsecond, 2))}},
				ClockOffset: -1500 * time.Microsecond, ClockOffsetError: 40 * time.Microsecond, ClockSamples: 3},
			{Name: "192.0.2.18", State: "down", Paths: []apitype.PeerPath{{Local: "rxe0/1", State: "down", Sent: 5, Lost: 5}}},
		}, RTTHist: rtts(20*time.Microsecond, 38, 50*time.Microsecond, 2), Counters: apitype.PeerCounters{ControlAnswered: 7, ControlRefused: 2, ControlBadTag: 3, ControlRateLimited: 5, ProbesAnswered: 40, ProbeUnsolicited: 4, ProbeUntagged: 6}},
		ECN: []apitype.NetdevECN{{Netdev: "ens1f0np0", NP: []int{3}, RP: []int{3, 4}}},
		QoS: []apitype.NetdevQoS{
			{Netdev: "ens1f0np0", Device: "mlx5_0", Supported: true, Trust: apitype.TrustDSCP, HasPFC: true, PFCCap: 8, PFCEnabled: []int{3},
				DSCP: []apitype.DSCPPriority{{DSCP: 24, Priority: 3}, {DSCP: 26, Priority: 3}, {DSCP: 26, Priority: 5}, {DSCP: 48, Priority: 6}},
				ETS: &apitype.ETS{Cap: 8, PrioTC: []int{0, 0, 0, 1, 0, 0, 2, 0}, TCs: []apitype.TrafficClass{
					{TC: 0, TSA: "ets", Bandwidth: 50}, {TC: 1, TSA: "ets", Bandwidth: 50}, {TC: 2, TSA: "strict"}}}},
			{Netdev: "eth0", Device: "rxe0", Error: "no DCB: the driver of eth0 has no dcbnl support"},
		},
		Bandwidth: &apitype.BandwidthStatus{Enabled: true, Served: 3, Refused: map[string]uint64{"busy": 1, "disabled": 0},
			Last: &apitype.BandwidthResult{Peer: "192.0.2.17", Op: "write", Size: 65536, Gbps: 97.5, MsgRate: 186000, Time: t0.Add(2 * time.Minute)}},
		Components: map[string]apitype.Component{
			"config":    {State: apitype.Error, Error: "configuration rejected", Since: t0},
			"inventory": {State: apitype.OK, Since: t0},
			"dbus":      {State: apitype.Unavailable, Error: "no system bus", Since: t0},
		},
		KernelFaults: []apitype.KernelFault{{Device: "mlx5_0", Pattern: "link-down", Class: apitype.KernelNonFatal, Netdev: "ens1f0np0", Line: "mlx5_core 0000:03:00.0 ens1f0np0: Link down", Count: 1},
			{Device: "mlx5_0", Pattern: "mlx5-health", Line: "mlx5_core 0000:03:00.0: health compromised", Count: 3}},
		// Two conditions of each status are enough for the three series
		// of rdmad_health_condition (the daemon fills all of them).
		Health: apitype.Health{Status: apitype.ConditionProblem, Conditions: []apitype.Condition{
			{Type: apitype.CondConfig, Status: apitype.ConditionProblem},
			{Type: apitype.CondPortDown, Status: apitype.ConditionOK},
			{Type: apitype.CondLoopback, Status: apitype.ConditionUnknown},
		}},
	}
}

func scrape(t *testing.T, c *Collector) []byte {
	t.Helper()
	reg := NewRegistry(c, false)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// rtts returns the histogram of n RTTs of d and m of e.
func rtts(d time.Duration, n int, e time.Duration, m int) apitype.RTTHistogram {
	var h apitype.RTTHistogram
	for range n {
		h.Observe(d)
	}
	for range m {
		h.Observe(e)
	}
	return h
}

func fixtureCollector(t *testing.T) *Collector {
	snap := fixtureSnapshot(t)
	return NewCollector(Options{Snapshot: func() *apitype.Snapshot { return snap }, SysfsRoot: "testdata/netroot", GoVersion: "go1.x",
		NetStats: fixtureNetStats(t), Resources: fixtureResources,
		DBusRefused: func() map[string]uint64 { return map[string]uint64{"budget": 4963, "denied": 37, "unverified": 0} },
		Now:         steppingClock(25 * time.Millisecond)})
}

// steppingClock is a clock that moves by step at every reading: each
// scrape-time read of the fixture takes step.
func steppingClock(step time.Duration) func() time.Time {
	var mu sync.Mutex
	t := time.Unix(1_700_000_000, 0)
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		t = t.Add(step)
		return t
	}
}

// TestGolden scrapes the fixture snapshot and compares the exposition with
// testdata/roce-ib.golden (go test -update rewrites it).
func TestGolden(t *testing.T) {
	got := scrape(t, fixtureCollector(t))
	golden := filepath.Join("testdata", "roce-ib.golden")
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -update once to create it)", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("scrape of the roce-ib fixture (-want +got):\n%s", diff)
	}
}

// TestValues spells out the values the golden file must hold, so that a
// careless -update cannot bless a wrong conversion.
func TestValues(t *testing.T) {
	out := string(scrape(t, fixtureCollector(t)))
	for _, line := range []string{
		// port_rcv_data counts 4-octet words: 123456 words are 493824 bytes.
		`rdmad_infiniband_port_data_received_bytes_total{device="mlx5_0",port="1"} 493824`,
		`rdmad_infiniband_port_data_transmitted_bytes_total{device="mlx5_0",port="1"} 2.617284e+06`,
		`rdmad_infiniband_link_downed_total{device="mlx5_0",port="1"} 2`,
		// hw_counters/ files with node_exporter's names; the rest generic.
		`rdmad_infiniband_out_of_sequence_packets_received_total{device="mlx5_0",port="1"} 7`,
		`rdmad_infiniband_np_cnp_packets_sent_total{device="mlx5_0",port="1"} 42`,
		`rdmad_infiniband_packet_sequence_errors_total{device="mlx5_0",port="1"} 1`,
		`rdmad_infiniband_rp_cnp_packets_handled_total{device="mlx5_0",port="1"} 40`,
		`rdmad_infiniband_np_ecn_marked_roce_packets_received_total{device="mlx5_0",port="1"} 41`,
		`rdmad_infiniband_local_ack_timeout_errors_total{device="mlx5_0",port="1"} 3`,
		`rdmad_infiniband_rnr_nak_retry_packets_received_total{device="mlx5_0",port="1"} 4`,
		`rdmad_infiniband_out_of_buffer_drops_total{device="mlx5_0",port="1"} 5`,
		`rdmad_infiniband_duplicate_requests_packets_total{device="mlx5_0",port="1"} 6`,
		`rdmad_infiniband_req_cqes_errors_total{device="mlx5_0",port="1"} 8`,
		`rdmad_infiniband_resp_cqes_errors_total{device="mlx5_0",port="1"} 9`,
		`rdmad_infiniband_hw_stat_total{counter="req_rnr_retries_exceeded",device="mlx5_0",port="1"} 11`,
		`rdmad_infiniband_roce_slow_restart_used_total{device="mlx5_0",port="1"} 24`,
		`rdmad_infiniband_roce_slow_restart_total{device="mlx5_0",port="1"} 26`,
		`rdmad_infiniband_rx_icrc_encapsulated_errors_total{device="mlx5_0",port="1"} 30`,
		`rdmad_infiniband_vl15_dropped_total{device="mlx5_0",port="1"} 44`,
		`rdmad_infiniband_port_stat_total{counter="unknown_counter",device="mlx5_0",port="1"} 45`,
		`rdmad_infiniband_hw_stat_total{counter="sent_pkts",device="rxe0",port="1"} 100`,
		`rdmad_infiniband_hw_stat_total{counter="to_retransmits",device="bnxt_re0",port="1"} 14`,
		// lifespan is in milliseconds; gauges are gauges.
		`rdmad_infiniband_lifespan_seconds{device="mlx5_0",port="1"} 0.01`,
		`rdmad_infiniband_lifespan_seconds{device="bnxt_re0",port="1"} 1`,
		`rdmad_infiniband_hw_resources{device="bnxt_re0",port="1",resource="active_qps"} 5`,
		`rdmad_infiniband_hw_resources{device="bnxt_re0",port="1",resource="active_pds"} 2`,
		`rdmad_infiniband_hw_resources{device="bnxt_re0",port="1",resource="watermark_qps"} 12`,
		`rdmad_infiniband_hw_resources{device="bnxt_re0",port="1",resource="db_fifo_register"} 3`,
		`rdmad_infiniband_state_id{device="mlx5_0",port="2"} 1`,
		`rdmad_infiniband_physical_state_id{device="mlx5_0",port="2"} 3`,
		`rdmad_infiniband_rate_bytes_per_second{device="mlx5_0",port="1"} 1.25e+10`,
		`rdmad_infiniband_netdev_mtu_bytes{device="mlx5_0",netdev="ens1f0np0",port="1"} 9000`,
		`rdmad_infiniband_active_mtu_bytes{device="mlx5_0",port="1"} 4096`,
		`rdmad_infiniband_active_mtu_bytes{device="rxe0",port="1"} 1024`,
		`rdmad_infiniband_port_info{device="mlx5_0",link_layer="Ethernet",netdev="ens1f0np0",pci="0000:03:00.0",port="1",rate="100 Gb/sec (4X EDR)",width="4X"} 1`,
		`rdmad_infiniband_port_info{device="rxe0",link_layer="Ethernet",netdev="eth0",pci="",port="1",rate="10 Gb/sec (1X QDR)",width="1X"} 1`,
		`rdmad_port_state_transitions_total{device="mlx5_0",port="1"} 3`,
		`rdmad_port_state_transitions_total{device="mlx5_0",port="2"} 0`,
		// 100000 Mb/s are 12.5 GB/s, as a 100 Gb/s rate is.
		`rdmad_infiniband_netdev_speed_bytes_per_second{device="mlx5_0",netdev="ens1f0np0",port="1"} 1.25e+10`,
		`rdmad_pcie_link_speed_gts{device="mlx5_0",pci="0000:03:00.0"} 16`,
		`rdmad_pcie_link_width{device="mlx5_0",pci="0000:03:00.0"} 8`,
		`rdmad_pcie_link_max_speed_gts{device="mlx5_0",pci="0000:03:00.0"} 16`,
		`rdmad_pcie_link_max_width{device="mlx5_0",pci="0000:03:00.0"} 16`,
		`rdmad_pcie_link_width{device="mlx4_0",pci="0000:04:00.0"} 8`,
		`rdmad_component_up{component="config"} 0`,
		`rdmad_component_up{component="inventory"} 1`,
		`rdmad_config_generation 3`,
		`rdmad_config_last_load_failed 1`,
		`rdmad_config_load_failures_total 1`,
		`rdmad_policy_target_in_sync{kind="mtu",object="ens1f0np0",policy="fabric"} 1`,
		`rdmad_policy_target_in_sync{kind="roce",object="mlx5_0/1",policy="fabric"} 0`,
		`rdmad_policy_target_state{kind="qos",object="ens1f0np0",policy="fabric",state="unsupported"} 1`,
		`rdmad_policy_target_in_sync{kind="ecn",object="ens1f0np0",policy="fabric"} 1`,
		// Every priority of both points, 1 where enabled.
		`rdmad_ecn_enabled{netdev="ens1f0np0",point="np",priority="3"} 1`,
		`rdmad_ecn_enabled{netdev="ens1f0np0",point="np",priority="4"} 0`,
		`rdmad_ecn_enabled{netdev="ens1f0np0",point="rp",priority="4"} 1`,
		`rdmad_ecn_enabled{netdev="ens1f0np0",point="rp",priority="0"} 0`,
		`rdmad_ecn_enabled{netdev="ens1f0np0",point="rp",priority="7"} 0`,
		`rdmad_build_info{goversion="go1.x",version="1.2.3"} 1`,
		`rdmad_healthy 0`,
		`rdmad_loopback_up{device="rxe0",port="1"} 1`,
		`rdmad_loopback_rtt_seconds{device="rxe0",op="write",port="1",stat="p99"} 9e-05`,
		`rdmad_loopback_operations_total{device="rxe0",op="read",port="1"} 9`,
		`rdmad_loopback_operation_errors_total{device="rxe0",op="send",port="1"} 1`,
		`rdmad_loopback_qp_recreations_total{device="rxe0",port="1"} 1`,
		`rdmad_probe_traffic_class{port="rxe0/1",probe="loopback"} 106`,
		`rdmad_probe_traffic_class{port="rxe0/1",probe="peer"} 104`,
		`rdmad_mrpool_registered_bytes{device="rxe0"} 9.437184e+06`,
		`rdmad_mrpool_class_exhausted_total{device="rxe0",size="1MiB"} 3`,
		`rdmad_mrpool_canary_latency_seconds{device="rxe0",stat="max"} 0.003`,
		`rdmad_peer_up{group="tor-a",peer="192.0.2.17"} 1`,
		`rdmad_peer_state{group="",peer="192.0.2.18",state="down"} 1`,
		// Path metrics carry the peer's group ("" for a peer without one).
		`rdmad_peer_rtt_seconds{group="tor-a",local="rxe0/1",peer="192.0.2.17",stat="p99"} 5e-05`,
		`rdmad_peer_loss_ratio{group="tor-a",local="rxe0/1",peer="192.0.2.17"} 0.025`,
		`rdmad_peer_host_delay_p99_seconds{group="tor-a",local="rxe0/1",peer="192.0.2.17"} 5e-06`,
		`rdmad_peer_probes_sent_total{group="tor-a",local="rxe0/1",peer="192.0.2.17"} 41`,
		`rdmad_peer_probes_lost_total{group="",local="rxe0/1",peer="192.0.2.18"} 5`,
		`rdmad_peer_info{group="tor-a",node_id="5eed0017",peer="192.0.2.17"} 1`,
		`rdmad_peer_info{group="",node_id="",peer="192.0.2.18"} 1`,
		`rdmad_peer_node_info{node_id="5eed0001"} 1`,
		`rdmad_peer_control_messages_total{outcome="refused"} 2`,
		// The RoCE netdevs' pause and discard counters (ethtool).
		`rdmad_net_pause_frames_total{direction="rx",netdev="ens1f0np0"} 34`,
		`rdmad_net_pause_frames_total{direction="tx",netdev="ens1f0np0"} 12`,
		`rdmad_net_priority_pause_frames_total{direction="rx",netdev="ens1f0np0",priority="3"} 1200`,
		`rdmad_net_priority_pause_frames_total{direction="tx",netdev="ens1f0np0",priority="3"} 800`,
		`rdmad_net_priority_pause_frames_total{direction="rx",netdev="ens1f0np0",priority="0"} 0`,
		// pause_duration counts microseconds.
		`rdmad_net_priority_pause_duration_seconds_total{direction="rx",netdev="ens1f0np0",priority="3"} 2.5`,
		`rdmad_net_priority_pause_duration_seconds_total{direction="tx",netdev="ens1f0np0",priority="3"} 0.0015`,
		`rdmad_net_pause_storm_events_total{level="warning",netdev="ens1f0np0"} 2`,
		`rdmad_net_pause_storm_events_total{level="error",netdev="ens1f0np0"} 1`,
		`rdmad_net_discards_total{counter="rx_discards_phy",netdev="ens1f0np0"} 5`,
		`rdmad_net_discards_total{counter="tx_discards_phy",netdev="ens1f0np0"} 6`,
		`rdmad_net_discards_total{counter="rx_out_of_buffer",netdev="ens1f0np0"} 7`,
		`rdmad_net_discards_total{counter="rx_prio3_discards",netdev="ens1f0np0"} 8`,
		`rdmad_net_discards_total{counter="rx_prio3_buf_discard",netdev="ens1f0np0"} 9`,
		`rdmad_net_rx_buffer_passed_threshold_events_total{netdev="ens1f0np0"} 10`,
	} {
		if !strings.Contains(out, line+"\n") {
			t.Errorf("scrape lacks %s", line)
		}
	}
	// An InfiniBand port gets no RoCE-derived MTU.
	if strings.Contains(out, `rdmad_loopback_rtt_seconds{device="rxe0",op="send"`) {
		t.Error("scrape has RTTs for an operation without a successful probe")
	}
	if strings.Contains(out, `rdmad_infiniband_active_mtu_bytes{device="mlx4_0"`) {
		t.Error("scrape has a RoCE active MTU for the InfiniBand port mlx4_0/1")
	}
	// An unknown PCIe figure is left out, not exported as 0; a software
	// device has no PCIe link.
	if strings.Contains(out, `rdmad_pcie_link_speed_gts{device="mlx4_0"`) {
		t.Error("scrape has a PCIe speed for mlx4_0, whose speed is unknown")
	}
	if strings.Contains(out, `rdmad_pcie_link_width{device="rxe0"`) || strings.Contains(out, `rdmad_pcie_link_max_width{device="rxe0"`) {
		t.Error("scrape has a PCIe link for the software device rxe0")
	}
	// A counter with a metric of its own is not also in the generic
	// family, and gauges and lifespan are in no counter family.
	for _, name := range []string{"np_cnp_sent", "out_of_sequence", "rp_cnp_handled", "lifespan", "active_qps", "watermark_qps", "db_fifo_register"} {
		if strings.Contains(out, `rdmad_infiniband_hw_stat_total{counter="`+name+`"`) {
			t.Errorf("scrape has hw_counters/%s in rdmad_infiniband_hw_stat_total", name)
		}
	}
	if strings.Contains(out, `resource="lifespan"`) {
		t.Error("scrape has lifespan in rdmad_infiniband_hw_resources; it is rdmad_infiniband_lifespan_seconds")
	}
	for _, typ := range []string{
		"# TYPE rdmad_infiniband_hw_resources gauge\n",
		"# TYPE rdmad_infiniband_lifespan_seconds gauge\n",
		"# TYPE rdmad_infiniband_np_cnp_packets_sent_total counter\n",
		"# TYPE rdmad_infiniband_hw_stat_total counter\n",
	} {
		if !strings.Contains(out, typ) {
			t.Errorf("scrape lacks %q", typ)
		}
	}
}

// TestHWGaugePatterns: the documented gauges of hw_counters/ match, and
// counters that merely look alike do not.
func TestHWGaugePatterns(t *testing.T) {
	for _, name := range []string{"active_qps", "active_pds", "active_srqs", "active_cqs", "active_mrs", "active_mws", "active_ahs",
		"active_rc_qps", "active_ud_qps", "watermark_qps", "watermark_pds", "watermark_mrs", "db_fifo_register"} {
		if !isHWGauge(name) {
			t.Errorf("%s is not typed a gauge", name)
		}
	}
	for _, name := range []string{"rx_pkts", "to_retransmits", "resize_cq_cnt", "np_cnp_sent", "inactive_qps", "qp_active", "lifespan"} {
		if isHWGauge(name) {
			t.Errorf("%s is typed a gauge", name)
		}
	}
}

// TestLint runs client_golang's promlint (the linter behind promtool check
// metrics) over the scrape, including the Go runtime collectors.
func TestLint(t *testing.T) {
	reg := NewRegistry(fixtureCollector(t), true)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

// TestPromtool runs the real promtool check metrics over the scrape.
func TestPromtool(t *testing.T) {
	promtool := testenv.Tool(t, "promtool", "Debian: apt-get install prometheus; TestLint ran the same linter in-process")
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(scrape(t, fixtureCollector(t)))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

// TestServeTCP serves the fixture on a loopback TCP listener and scrapes it
// over the network, then checks that cancelling stops the server.
func TestServeTCP(t *testing.T) {
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ln, Handler(NewRegistry(fixtureCollector(t), true))) }()
	url := "http://" + ln.Addr().String()

	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Contains(body, []byte("rdmad_infiniband_state_id{")) || !bytes.Contains(body, []byte("go_goroutines ")) {
		t.Errorf("GET /metrics: %s\n%.400s", resp.Status, body)
	}
	resp, err = http.Get(url + "/v1/status")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /v1/status on the metrics port: %s, want 404 (the port serves metrics only)", resp.Status)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve after cancel: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return 5s after cancel")
	}
	if _, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err == nil {
		t.Error("the metrics port still accepts connections after Serve returned")
	}
}

// TestServeTCPOpenMetrics: the TCP listener answers OpenMetrics to a
// scraper that asks for it (as Prometheus does), and the text format to one
// that does not.
func TestServeTCPOpenMetrics(t *testing.T) {
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ln, Handler(NewRegistry(fixtureCollector(t), false))) }()
	defer func() {
		cancel()
		<-done
	}()
	get := func(accept string) (string, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, "http://"+ln.Addr().String()+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /metrics (Accept %q): %s %v", accept, resp.Status, err)
		}
		return resp.Header.Get("Content-Type"), string(body)
	}

	// What Prometheus sends when it prefers OpenMetrics.
	ct, body := get("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
	if !strings.HasPrefix(ct, "application/openmetrics-text") {
		t.Errorf("Accept: application/openmetrics-text got Content-Type %q", ct)
	}
	for _, want := range []string{
		// OpenMetrics names a counter's family without _total and ends
		// the exposition with # EOF.
		"# TYPE rdmad_config_load_failures counter\n",
		"rdmad_config_load_failures_total 1.0\n",
		"# TYPE rdmad_infiniband_hw_resources gauge\n",
		`rdmad_peer_loss_ratio{group="tor-a",local="rxe0/1",peer="192.0.2.17"} 0.025` + "\n",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("OpenMetrics scrape lacks %q", want)
		}
	}
	if !strings.HasSuffix(body, "# EOF\n") {
		t.Errorf("OpenMetrics scrape does not end with # EOF:\n...%s", body[max(0, len(body)-200):])
	}

	ct, body = get("")
	if !strings.HasPrefix(ct, "text/plain") || strings.Contains(body, "# EOF") {
		t.Errorf("without Accept: Content-Type %q, want the text format", ct)
	}
	if !strings.Contains(body, "# TYPE rdmad_config_load_failures_total counter\n") {
		t.Error("text format scrape lacks # TYPE rdmad_config_load_failures_total counter")
	}
}

func TestListenError(t *testing.T) {
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, err = Listen(ln.Addr().String())
	if err == nil || !strings.Contains(err.Error(), "metrics: listen on "+ln.Addr().String()) || !strings.Contains(err.Error(), "[metrics] listen") {
		t.Errorf("Listen on a taken port: %v; want the address, the cause and what to change", err)
	}
}
