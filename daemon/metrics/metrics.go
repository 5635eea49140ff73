// Package metrics exports rdmad's state to Prometheus.
//
// A Collector turns the current apitype.Snapshot into metrics on every scrape;
// it does no work between scrapes. Device and port metrics follow
// node_exporter's infiniband collector, with the rdmad_infiniband_ prefix in
// place of node_infiniband_, so that dashboards built for one read the other
// with a rename. docs/METRICS.md lists every metric.
package metrics

import (
	"context"
	"maps"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/inventory/ethtool"
)

// Options configure a Collector.
type Options struct {
	// Snapshot returns the state to export. It must not block.
	Snapshot func() *apitype.Snapshot
	// Fresh, when set, is called with the scrape's context before the
	// snapshot is loaded, to make its peer figures fresh (the daemon's
	// freshPeers: the peer manager builds them only when asked); it
	// returns within a bound of its own.
	Fresh func(ctx context.Context)
	// SysfsRoot is the directory holding sys/ ("/" normally): the netdev
	// MTUs, which the snapshot does not carry, are read below it at scrape
	// time.
	SysfsRoot string
	// GoVersion is reported in rdmad_build_info; empty means
	// runtime.Version(). Tests fix it for their golden files.
	GoVersion string
	// NetStats, when set, reads the pause and discard counters of the
	// RoCE netdevs it is given (the netdevs of the snapshot's Ethernet
	// ports) at scrape time; the daemon passes an ethtool.Source's Read.
	// nil exports none of the rdmad_net_ metrics.
	NetStats func(netdevs []string) []ethtool.Counters
	// Resources, when set, reads the RDMA objects the kernel tracks at
	// scrape time (the daemon passes its inventory/rdmares reader, with a
	// timeout); a result with Error set exports none. nil exports none of
	// the rdmad_rdma_ metrics.
	Resources func() apitype.Resources
	// DBusRefused, when set, returns the D-Bus method calls rdmad refused
	// since it started, by reason (daemon/bus Counters.Refused); nil
	// exports no rdmad_dbus_calls_refused_total.
	DBusRefused func() map[string]uint64
	// Now is the clock that times the scrape-time reads
	// (rdmad_scrape_collector_duration_seconds); nil means time.Now.
	// Tests fix it for their golden files.
	Now func() time.Time
}

// A Collector is a prometheus.Collector over rdmad's snapshots.
type Collector struct {
	opts     Options
	sections []section
	// cached are the sections that are a function of the snapshot's
	// Peers alone and large (the peers): a Registry encodes them once per
	// state of the peers (cache.go). A section that reads anything else
	// of the snapshot, or anything at scrape time (sysfs, ethtool,
	// netlink, a clock), must not be one.
	cached []section
}

// A section exports one part of a snapshot. New parts of the state (probe
// results, the MR pool) become new sections; the others do not change.
type section struct {
	descs   []*prometheus.Desc
	collect func(c *Collector, s *apitype.Snapshot, ch chan<- prometheus.Metric)
}

// NewCollector returns a Collector reading snapshots from opts.Snapshot.
func NewCollector(opts Options) *Collector {
	if opts.GoVersion == "" {
		opts.GoVersion = runtime.Version()
	}
	return &Collector{opts: opts, sections: []section{daemonSection, deviceSection, ethtoolSection, policySection, ecnSection, qosSection, loopbackSection, poolSection, resourcesSection, bandwidthSection},
		cached: []section{peerSection}}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	c.describeLive(ch)
	describeSections(c.cached, ch)
}

func describeSections(secs []section, ch chan<- *prometheus.Desc) {
	for _, sec := range secs {
		for _, d := range sec.descs {
			ch <- d
		}
	}
}

// describeLive describes what collectLive collects.
func (c *Collector) describeLive(ch chan<- *prometheus.Desc) {
	describeSections(c.sections, ch)
	ch <- configFailures
	ch <- dbusRefused
	ch <- scrapeSuccess
	ch <- scrapeDuration
}

// The reads a scrape makes itself, beyond the snapshot (ethtool's pause
// and discard counters, the RDMA objects over RDMA netlink), report their
// own outcome and time, as node_exporter's collectors do
// (node_scrape_collector_success): a read that fails or is slow is seen
// as such, not as series that vanish.
var (
	scrapeSuccess = prometheus.NewDesc("rdmad_scrape_collector_success",
		"1 when the scrape-time read of the collector succeeded, 0 when it failed (its series are missing from this scrape): ethtool (pause and discard counters of the RoCE netdevs), rdma_netlink (the RDMA objects per device).",
		[]string{"collector"}, nil)
	scrapeDuration = prometheus.NewDesc("rdmad_scrape_collector_duration_seconds",
		"How long the scrape-time read of the collector took, in seconds.",
		[]string{"collector"}, nil)
)

// Collectors of the scrape-time reads, the values of the collector label.
const (
	collectorEthtool     = "ethtool"
	collectorRDMANetlink = "rdma_netlink"
)

// timed runs read, one scrape-time read of collector, and exports whether
// it succeeded and how long it took.
func (c *Collector) timed(collector string, ch chan<- prometheus.Metric, read func() bool) {
	now := c.opts.Now
	if now == nil {
		now = time.Now
	}
	start := now()
	ok := read()
	ch <- gauge(scrapeDuration, now().Sub(start).Seconds(), collector)
	ch <- gauge(scrapeSuccess, b2f(ok), collector)
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.opts.Snapshot()
	c.collectLive(s, ch)
	c.collectSections(c.cached, s, ch)
}

func (c *Collector) collectSections(secs []section, s *apitype.Snapshot, ch chan<- prometheus.Metric) {
	for _, sec := range secs {
		sec.collect(c, s, ch)
	}
}

// collectLive collects s but for the cached sections, and what a scrape
// reads beyond the snapshot.
func (c *Collector) collectLive(s *apitype.Snapshot, ch chan<- prometheus.Metric) {
	c.collectSections(c.sections, s, ch)
	ch <- prometheus.MustNewConstMetric(configFailures, prometheus.CounterValue, float64(s.Config.Failures))
	if c.opts.DBusRefused != nil {
		refused := c.opts.DBusRefused()
		for _, reason := range slices.Sorted(maps.Keys(refused)) {
			ch <- counter(dbusRefused, float64(refused[reason]), reason)
		}
	}
}

// dbusRefused is not in the snapshot: the D-Bus service counts its
// refusals itself (a flood of them must not publish snapshots).
var dbusRefused = prometheus.NewDesc("rdmad_dbus_calls_refused_total",
	"D-Bus method calls rdmad refused since it started, by reason: denied (the access table), budget (the caller's uid over its call budget), unverified (the bus could not say who called), undecodable (a message godbus cannot decode, dropped before it could close the connection).",
	[]string{"reason"}, nil)

func gauge(d *prometheus.Desc, v float64, labels ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func counter(d *prometheus.Desc, v float64, labels ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// --- daemon -----------------------------------------------------------------

var (
	buildInfo = prometheus.NewDesc("rdmad_build_info",
		"rdmad's version and the Go version it was built with; always 1.", []string{"version", "goversion"}, nil)
	startTime = prometheus.NewDesc("rdmad_start_time_seconds",
		"When rdmad started, in seconds since the Unix epoch.", nil, nil)
	healthy = prometheus.NewDesc("rdmad_healthy",
		"1 when the health verdict is ok (GET /v1/health, rdmactl check exit 0: every condition ok), else 0.", nil, nil)
	healthCond = prometheus.NewDesc("rdmad_health_condition",
		"1 for the current status (ok, unknown, problem) of each condition of the health verdict (docs/HEALTH.md), 0 for the others.", []string{"type", "status"}, nil)
	kernelFault = prometheus.NewDesc("rdmad_kernel_fault_messages",
		"Kernel log messages of one fault of an RDMA device (device, pattern, its class fatal or nonfatal, and the netdev of a per-port pattern: docs/HEALTH.md) within its window; the series goes when the fault's window ends.", []string{"device", "pattern", "class", "netdev"}, nil)
	snapshotSeq = prometheus.NewDesc("rdmad_state_updates_total",
		"State snapshots rdmad has published (the seq of GET /v1/status).", nil, nil)
	daemonState = prometheus.NewDesc("rdmad_state",
		"rdmad's state: 1 for the current one of starting, running, degraded, reloading, stopping.", []string{"state"}, nil)
	configGen = prometheus.NewDesc("rdmad_config_generation",
		"Generation of the configuration in force; it grows with every successful load.", nil, nil)
	configError = prometheus.NewDesc("rdmad_config_last_load_failed",
		"1 when the last configuration load failed (the previous configuration stays in force), else 0.", nil, nil)
	configLoaded = prometheus.NewDesc("rdmad_config_last_load_success_timestamp_seconds",
		"When the configuration in force was loaded, in seconds since the Unix epoch.", nil, nil)
	configFailures = prometheus.NewDesc("rdmad_config_load_failures_total",
		"Configuration loads that failed since rdmad started (status: config.failures).", nil, nil)
	componentUp = prometheus.NewDesc("rdmad_component_up",
		"1 when the component is ok, 0 when it is in error, unavailable or disabled (see rdmad_component_state).", []string{"component"}, nil)
	componentState = prometheus.NewDesc("rdmad_component_state",
		"1 for the component's current state: ok, error, unavailable or disabled.", []string{"component", "state"}, nil)
)

var daemonStates = []string{apitype.Starting, apitype.Running, apitype.Degraded, apitype.Reloading, apitype.Stopping}
var conditionStatuses = []string{apitype.ConditionOK, apitype.ConditionUnknown, apitype.ConditionProblem}
var componentStates = []string{apitype.OK, apitype.Error, apitype.Unavailable, apitype.Disabled}

var daemonSection = section{
	descs: []*prometheus.Desc{buildInfo, startTime, healthy, healthCond, kernelFault, snapshotSeq, daemonState, configGen, configError, configLoaded, componentUp, componentState},
	collect: func(c *Collector, s *apitype.Snapshot, ch chan<- prometheus.Metric) {
		ch <- gauge(buildInfo, 1, s.Version, c.opts.GoVersion)
		ch <- gauge(startTime, float64(s.StartedAt.UnixNano())/1e9)
		ch <- gauge(healthy, b2f(s.Healthy()))
		for _, f := range s.KernelFaults {
			class := apitype.KernelFatal
			if !f.Fatal() {
				class = apitype.KernelNonFatal
			}
			ch <- gauge(kernelFault, float64(f.Count), f.Device, f.Pattern, class, f.Netdev)
		}
		for _, cond := range s.Health.Conditions {
			for _, st := range conditionStatuses {
				ch <- gauge(healthCond, b2f(cond.Status == st), cond.Type, st)
			}
		}
		ch <- counter(snapshotSeq, float64(s.Seq))
		for _, st := range daemonStates {
			ch <- gauge(daemonState, b2f(s.State == st), st)
		}
		ch <- gauge(configGen, float64(s.Config.Generation))
		ch <- gauge(configError, b2f(s.Config.Error != ""))
		if !s.Config.LoadedAt.IsZero() {
			ch <- gauge(configLoaded, float64(s.Config.LoadedAt.UnixNano())/1e9)
		}
		for name, comp := range s.Components {
			ch <- gauge(componentUp, b2f(comp.State == apitype.OK), name)
			for _, st := range componentStates {
				ch <- gauge(componentState, b2f(comp.State == st), name, st)
			}
		}
	},
}

// --- devices and ports ------------------------------------------------------

var (
	devInfo = prometheus.NewDesc("rdmad_infiniband_info",
		"Non-numeric data of an RDMA device; always 1.",
		[]string{"device", "board_id", "firmware_version", "hca_type", "node_guid"}, nil)
	portInfo = prometheus.NewDesc("rdmad_infiniband_port_info",
		"Non-numeric data of an RDMA port: its rate and width as sysfs says them, the PCI function whose link its device uses (rdmad_pcie_link_*'s pci); always 1.",
		[]string{"device", "port", "link_layer", "netdev", "rate", "width", "pci"}, nil)
	portTransitions = prometheus.NewDesc("rdmad_port_state_transitions_total",
		"Times the port went into or out of ACTIVE since rdmad started.", []string{"device", "port"}, nil)
	netdevSpeed = prometheus.NewDesc("rdmad_infiniband_netdev_speed_bytes_per_second",
		"Speed of a RoCE port's network device in bytes per second (/sys/class/net/<netdev>/speed); absent while unknown (link down).",
		[]string{"device", "port", "netdev"}, nil)
	pcieSpeed = prometheus.NewDesc("rdmad_pcie_link_speed_gts",
		"Speed the PCIe link of the RDMA device's PCI function trained at, in GT/s (a VF's is its PF's); absent while unknown.", []string{"device", "pci"}, nil)
	pcieWidth = prometheus.NewDesc("rdmad_pcie_link_width",
		"Lanes the PCIe link of the RDMA device's PCI function trained at; absent while unknown.", []string{"device", "pci"}, nil)
	pcieMaxSpeed = prometheus.NewDesc("rdmad_pcie_link_max_speed_gts",
		"Most the PCIe link can train to, in GT/s: the smallest maximum of the function and every bridge up to the root port.", []string{"device", "pci"}, nil)
	pcieMaxWidth = prometheus.NewDesc("rdmad_pcie_link_max_width",
		"Most lanes the PCIe link can train to: the smallest maximum of the function and every bridge up to the root port.", []string{"device", "pci"}, nil)
	portState = prometheus.NewDesc("rdmad_infiniband_state_id",
		"State of the port: 1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE, 5 ACTIVE_DEFER (0 unknown).", []string{"device", "port"}, nil)
	portPhys = prometheus.NewDesc("rdmad_infiniband_physical_state_id",
		"Physical state of the port: 1 Sleep, 2 Polling, 3 Disabled, 4 PortConfigurationTraining, 5 LinkUp, 6 LinkErrorRecovery, 7 Phy Test (0 unknown).",
		[]string{"device", "port"}, nil)
	portRate = prometheus.NewDesc("rdmad_infiniband_rate_bytes_per_second",
		"Signalling rate of the port in bytes per second.", []string{"device", "port"}, nil)
	netdevMTU = prometheus.NewDesc("rdmad_infiniband_netdev_mtu_bytes",
		"MTU of the port's network device (the RoCE netdev or the IPoIB interface).", []string{"device", "port", "netdev"}, nil)
	activeMTU = prometheus.NewDesc("rdmad_infiniband_active_mtu_bytes",
		"RDMA path MTU of a RoCE port: the largest of 256..4096 that fits the netdev MTU with RoCE v2 headers, as the kernel derives it.",
		[]string{"device", "port"}, nil)
	hwCounter = prometheus.NewDesc("rdmad_infiniband_hw_stat_total",
		"A driver-specific counter of the port (sysfs hw_counters/) without a metric of its own, named by the counter label.", []string{"device", "port", "counter"}, nil)
	hwResources = prometheus.NewDesc("rdmad_infiniband_hw_resources",
		"A driver-specific gauge of the port (sysfs hw_counters/): resources in use such as bnxt_re's active_qps, their high-water marks (watermark_qps) or a FIFO's fill, named by the resource label.", []string{"device", "port", "resource"}, nil)
	hwLifespan = prometheus.NewDesc("rdmad_infiniband_lifespan_seconds",
		"How long the kernel caches the port's hw_counters/ values: two reads within it may return the same values.", []string{"device", "port"}, nil)
	otherCounter = prometheus.NewDesc("rdmad_infiniband_port_stat_total",
		"A port counter (sysfs counters/) without a dedicated metric, named by the counter label.", []string{"device", "port", "counter"}, nil)
)

// portCounters maps sysfs counters/ files to metrics, as node_exporter's
// infiniband collector names them. scale converts the unit: port_rcv_data
// and port_xmit_data count 4-octet words.
var portCounters = map[string]struct {
	desc  *prometheus.Desc
	scale float64
}{}

func init() {
	for _, pc := range []struct{ file, name, help string }{
		{"excessive_buffer_overrun_errors", "excessive_buffer_overrun_errors_total", "Number of times that OverrunErrors consecutive flow control update periods occurred, each having at least one overrun error."},
		{"link_downed", "link_downed_total", "Number of times the link failed to recover from an error state and went down."},
		{"link_error_recovery", "link_error_recovery_total", "Number of times the link successfully recovered from an error state."},
		{"local_link_integrity_errors", "local_link_integrity_errors_total", "Number of times that the count of local physical errors exceeded the threshold."},
		{"multicast_rcv_packets", "multicast_packets_received_total", "Number of multicast packets received (including errors)."},
		{"multicast_xmit_packets", "multicast_packets_transmitted_total", "Number of multicast packets transmitted (including errors)."},
		{"port_rcv_constraint_errors", "port_constraint_errors_received_total", "Number of packets received on the switch physical port that are discarded."},
		{"port_xmit_constraint_errors", "port_constraint_errors_transmitted_total", "Number of packets not transmitted from the switch physical port."},
		{"port_rcv_data", "port_data_received_bytes_total", "Number of data octets received on all links."},
		{"port_xmit_data", "port_data_transmitted_bytes_total", "Number of data octets transmitted on all links."},
		{"port_rcv_discards", "port_discards_received_total", "Number of inbound packets discarded by the port because the port is down or congested."},
		{"port_xmit_discards", "port_discards_transmitted_total", "Number of outbound packets discarded by the port because the port is down or congested."},
		{"port_rcv_errors", "port_errors_received_total", "Number of packets containing an error that were received on this port."},
		{"port_rcv_packets", "port_packets_received_total", "Number of packets received on all VLs by this port (including errors)."},
		{"port_xmit_packets", "port_packets_transmitted_total", "Number of packets transmitted on all VLs from this port (including errors)."},
		{"port_xmit_wait", "port_transmit_wait_total", "Number of ticks during which the port had data to transmit but no data was sent during the entire tick."},
		{"port_rcv_remote_physical_errors", "port_receive_remote_physical_errors_total", "Number of packets marked with the EBP delimiter received on the port."},
		{"port_rcv_switch_relay_errors", "port_receive_switch_relay_errors_total", "Number of packets that could not be forwarded by the switch."},
		{"symbol_error", "symbol_error_total", "Number of minor link errors detected on one or more physical lanes."},
		{"unicast_rcv_packets", "unicast_packets_received_total", "Number of unicast packets received (including errors)."},
		{"unicast_xmit_packets", "unicast_packets_transmitted_total", "Number of unicast packets transmitted (including errors)."},
		{"VL15_dropped", "vl15_dropped_total", "Number of incoming VL15 packets dropped due to resource limitations."},
	} {
		scale := 1.0
		if pc.file == "port_rcv_data" || pc.file == "port_xmit_data" {
			scale = 4
		}
		portCounters[pc.file] = struct {
			desc  *prometheus.Desc
			scale float64
		}{prometheus.NewDesc("rdmad_infiniband_"+pc.name, pc.help, []string{"device", "port"}, nil), scale}
	}
	for _, hc := range []struct{ file, name, help string }{
		{"duplicate_request", "duplicate_requests_packets_total", "Number of received packets that repeat a request already executed (hw_counters/duplicate_request)."},
		{"implied_nak_seq_err", "implied_nak_seq_errors_total", "Number of times the requester decided an ACK with a PSN larger than expected for an RDMA READ or response (hw_counters/implied_nak_seq_err)."},
		{"local_ack_timeout_err", "local_ack_timeout_errors_total", "Number of times a QP's ACK timer expired at the sender side, within the retry limit (hw_counters/local_ack_timeout_err)."},
		{"np_cnp_sent", "np_cnp_packets_sent_total", "Number of CNPs the notification point sent on congestion marked in the RoCEv2 IP header (hw_counters/np_cnp_sent)."},
		{"np_ecn_marked_roce_packets", "np_ecn_marked_roce_packets_received_total", "Number of RoCEv2 packets the notification point received marked for congestion (ECN 11) (hw_counters/np_ecn_marked_roce_packets)."},
		{"out_of_buffer", "out_of_buffer_drops_total", "Number of drops for lack of a receive WQE on the QP (hw_counters/out_of_buffer)."},
		{"out_of_sequence", "out_of_sequence_packets_received_total", "Number of out of sequence packets received (hw_counters/out_of_sequence)."},
		{"packet_seq_err", "packet_sequence_errors_total", "Number of NAK sequence error packets received, within the retry limit (hw_counters/packet_seq_err)."},
		{"req_cqe_error", "req_cqes_errors_total", "Number of requester CQEs completed with an error (hw_counters/req_cqe_error)."},
		{"req_cqe_flush_error", "req_cqes_flush_errors_total", "Number of requester CQEs completed with a flush error (hw_counters/req_cqe_flush_error)."},
		{"req_remote_access_errors", "req_remote_access_errors_total", "Number of remote access errors the requester detected (hw_counters/req_remote_access_errors)."},
		{"req_remote_invalid_request", "req_remote_invalid_request_errors_total", "Number of remote invalid request errors the requester detected (hw_counters/req_remote_invalid_request)."},
		{"resp_cqe_error", "resp_cqes_errors_total", "Number of responder CQEs completed with an error (hw_counters/resp_cqe_error)."},
		{"resp_cqe_flush_error", "resp_cqes_flush_errors_total", "Number of responder CQEs completed with a flush error (hw_counters/resp_cqe_flush_error)."},
		{"resp_local_length_error", "resp_local_length_errors_total", "Number of local length errors the responder detected (hw_counters/resp_local_length_error)."},
		{"resp_remote_access_errors", "resp_remote_access_errors_total", "Number of remote access errors the responder detected (hw_counters/resp_remote_access_errors)."},
		{"rnr_nak_retry_err", "rnr_nak_retry_packets_received_total", "Number of RNR NAK packets received, within the retry limit (hw_counters/rnr_nak_retry_err)."},
		{"roce_adp_retrans", "roce_adp_retransmits_total", "Number of adaptive retransmissions of RoCE traffic (hw_counters/roce_adp_retrans)."},
		{"roce_adp_retrans_to", "roce_adp_retransmits_timeout_total", "Number of times RoCE traffic reached a timeout of adaptive retransmission (hw_counters/roce_adp_retrans_to)."},
		{"roce_slow_restart", "roce_slow_restart_used_total", "Number of times RoCE slow restart was used (hw_counters/roce_slow_restart)."},
		{"roce_slow_restart_cnps", "roce_slow_restart_cnps_total", "Number of CNPs RoCE slow restart generated (hw_counters/roce_slow_restart_cnps)."},
		{"roce_slow_restart_trans", "roce_slow_restart_total", "Number of times RoCE slow restart changed state to slow restart (hw_counters/roce_slow_restart_trans)."},
		{"rp_cnp_handled", "rp_cnp_packets_handled_total", "Number of CNPs the reaction point handled to throttle its transmission rate (hw_counters/rp_cnp_handled)."},
		{"rp_cnp_ignored", "rp_cnp_ignored_packets_received_total", "Number of CNPs the reaction point received and ignored (hw_counters/rp_cnp_ignored)."},
		{"rx_atomic_requests", "rx_atomic_requests_total", "Number of ATOMIC requests received for the port's QPs (hw_counters/rx_atomic_requests)."},
		{"rx_dct_connect", "rx_dct_connect_requests_total", "Number of connection requests received for the port's DCTs (hw_counters/rx_dct_connect)."},
		{"rx_icrc_encapsulated", "rx_icrc_encapsulated_errors_total", "Number of RoCE packets received with an ICRC error (hw_counters/rx_icrc_encapsulated)."},
		{"rx_read_requests", "rx_read_requests_total", "Number of RDMA READ requests received for the port's QPs (hw_counters/rx_read_requests)."},
		{"rx_write_requests", "rx_write_requests_total", "Number of RDMA WRITE requests received for the port's QPs (hw_counters/rx_write_requests)."},
	} {
		hwCounters[hc.file] = prometheus.NewDesc("rdmad_infiniband_"+hc.name, hc.help, []string{"device", "port"}, nil)
	}
	var descs []*prometheus.Desc
	for _, f := range slices.Sorted(maps.Keys(portCounters)) {
		descs = append(descs, portCounters[f].desc)
	}
	for _, f := range slices.Sorted(maps.Keys(hwCounters)) {
		descs = append(descs, hwCounters[f])
	}
	deviceSection.descs = append(deviceSection.descs, descs...)
}

// hwCounters maps hw_counters/ files to metrics, as node_exporter's
// infiniband collector names them (its names come from the mlx5 counters;
// other drivers that use the same file name, such as rxe's
// duplicate_request, mean the same). Files not listed here are exported as
// rdmad_infiniband_hw_stat_total{counter}, or as gauges (hwGaugePatterns).
// docs/METRICS.md has the table.
var hwCounters = map[string]*prometheus.Desc{}

// hwGaugePatterns match the hw_counters/ files that are not counters but
// gauges: the resources a driver has in use and their high-water marks
// (bnxt_re: active_qps, active_pds, active_srqs, active_cqs, active_mrs,
// active_mws, active_ahs, active_rc_qps, active_ud_qps, watermark_qps, ...)
// and bnxt_re's doorbell FIFO register read. They are exported as
// rdmad_infiniband_hw_resources{resource}. lifespan, which every driver's
// hw_counters/ has, is rdmad_infiniband_lifespan_seconds.
var hwGaugePatterns = []string{"active_*", "watermark_*", "db_fifo_register"}

// isHWGauge reports whether the hw_counters/ file name is a gauge.
func isHWGauge(name string) bool {
	for _, p := range hwGaugePatterns {
		if ok, _ := path.Match(p, name); ok {
			return true
		}
	}
	return false
}

var portStateIDs = map[string]int{"DOWN": 1, "INIT": 2, "ARMED": 3, "ACTIVE": 4, "ACTIVE_DEFER": 5}
var physStateIDs = map[string]int{"Sleep": 1, "Polling": 2, "Disabled": 3, "PortConfigurationTraining": 4,
	"LinkUp": 5, "LinkErrorRecovery": 6, "Phy Test": 7}

var deviceSection = section{
	descs: []*prometheus.Desc{devInfo, portInfo, portState, portPhys, portRate, portTransitions, netdevMTU, netdevSpeed, activeMTU,
		hwCounter, hwResources, hwLifespan, otherCounter, pcieSpeed, pcieWidth, pcieMaxSpeed, pcieMaxWidth},
	collect: func(c *Collector, s *apitype.Snapshot, ch chan<- prometheus.Metric) {
		for _, d := range s.Devices {
			ch <- gauge(devInfo, 1, d.Name, d.BoardID, d.FWVer, d.HCAType, d.NodeGUID)
			collectPCIe(d, ch)
			for _, p := range d.Ports {
				c.collectPort(d, p, ch)
			}
		}
	},
}

// collectPCIe exports the PCIe link of d's function. Unknown figures (0)
// are left out rather than exported as 0, so that a comparison of the
// trained link with the path's maximum never flags what sysfs did not say.
func collectPCIe(d apitype.Device, ch chan<- prometheus.Metric) {
	l := d.PCIe
	if l == nil {
		return
	}
	for _, m := range []struct {
		desc *prometheus.Desc
		v    float64
	}{{pcieSpeed, l.Speed}, {pcieWidth, float64(l.Width)}, {pcieMaxSpeed, l.PathMaxSpeed}, {pcieMaxWidth, float64(l.PathMaxWidth)}} {
		if m.v > 0 {
			ch <- gauge(m.desc, m.v, d.Name, l.Address)
		}
	}
}

func (c *Collector) collectPort(d apitype.Device, p apitype.Port, ch chan<- prometheus.Metric) {
	port := strconv.Itoa(p.Port)
	pci := ""
	if d.PCIe != nil {
		pci = d.PCIe.Address
	}
	ch <- gauge(portInfo, 1, d.Name, port, p.LinkLayer, p.Netdev, p.Rate, p.Width, pci)
	ch <- gauge(portState, float64(portStateIDs[p.State]), d.Name, port)
	ch <- gauge(portPhys, float64(physStateIDs[p.PhysState]), d.Name, port)
	ch <- counter(portTransitions, float64(p.Transitions), d.Name, port)
	if p.RateGbps > 0 {
		ch <- gauge(portRate, p.RateGbps*1e9/8, d.Name, port)
	}
	if p.NetdevSpeedMbps > 0 && p.Netdev != "" {
		ch <- gauge(netdevSpeed, float64(p.NetdevSpeedMbps)*1e6/8, d.Name, port, p.Netdev)
	}
	if p.Netdev != "" {
		if mtu, ok := readMTU(c.opts.SysfsRoot, p.Netdev); ok {
			ch <- gauge(netdevMTU, float64(mtu), d.Name, port, p.Netdev)
			if p.LinkLayer == "Ethernet" {
				if a := apitype.RoCEActiveMTU(mtu); a > 0 {
					ch <- gauge(activeMTU, float64(a), d.Name, port)
				}
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(p.Counters)) {
		v := p.Counters[name]
		if pc, ok := portCounters[name]; ok {
			ch <- counter(pc.desc, float64(v)*pc.scale, d.Name, port)
		} else {
			ch <- counter(otherCounter, float64(v), d.Name, port, name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(p.HWCounters)) {
		v := float64(p.HWCounters[name])
		switch desc, ok := hwCounters[name]; {
		case ok:
			ch <- counter(desc, v, d.Name, port)
		case name == "lifespan": // milliseconds
			ch <- gauge(hwLifespan, v/1000, d.Name, port)
		case isHWGauge(name):
			ch <- gauge(hwResources, v, d.Name, port, name)
		default:
			ch <- counter(hwCounter, v, d.Name, port, name)
		}
	}
}

// readMTU reads /sys/class/net/<netdev>/mtu below root.
func readMTU(root, netdev string) (int, bool) {
	if root == "" {
		root = "/"
	}
	if strings.ContainsAny(netdev, "/\x00") || netdev == ".." || netdev == "." {
		return 0, false
	}
	b, err := os.ReadFile(filepath.Join(root, "sys/class/net", netdev, "mtu"))
	if err != nil {
		return 0, false
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return v, err == nil
}

// --- policy -----------------------------------------------------------------

var (
	targetInSync = prometheus.NewDesc("rdmad_policy_target_in_sync",
		"1 when the target matches its policy (in-sync, or applied by the last pass), else 0.", []string{"policy", "kind", "object"}, nil)
	targetState = prometheus.NewDesc("rdmad_policy_target_state",
		"1 for the target's current state: in-sync, drifted, applied, unsupported or error.", []string{"policy", "kind", "object", "state"}, nil)
	targetApplies = prometheus.NewDesc("rdmad_policy_target_applies_total",
		"Times rdmad changed the target to match its policy.", []string{"policy", "kind", "object"}, nil)
	targetDrifts = prometheus.NewDesc("rdmad_policy_target_drifts_total",
		"Drift events of the target: corrections applied, and times it began to differ from its policy (a target still drifted counts once).", []string{"policy", "kind", "object"}, nil)
	targetLastChange = prometheus.NewDesc("rdmad_policy_target_last_change_timestamp_seconds",
		"When the target's state last changed, in seconds since the Unix epoch.", []string{"policy", "kind", "object"}, nil)
)

var targetStates = []string{apitype.InSync, apitype.Drifted, apitype.Applied, apitype.Unsupported, apitype.TargetError}

var policySection = section{
	descs: []*prometheus.Desc{targetInSync, targetState, targetApplies, targetDrifts, targetLastChange},
	collect: func(c *Collector, s *apitype.Snapshot, ch chan<- prometheus.Metric) {
		for _, p := range s.Policy.Policies {
			for _, t := range p.Targets {
				l := []string{p.Name, t.Kind, t.Object}
				ch <- gauge(targetInSync, b2f(t.State == apitype.InSync || t.State == apitype.Applied), l...)
				for _, st := range targetStates {
					ch <- gauge(targetState, b2f(t.State == st), append(l, st)...)
				}
				ch <- counter(targetApplies, float64(t.Applies), l...)
				ch <- counter(targetDrifts, float64(t.Drifts), l...)
				if !t.LastChange.IsZero() {
					ch <- gauge(targetLastChange, float64(t.LastChange.UnixNano())/1e9, l...)
				}
			}
		}
	},
}
