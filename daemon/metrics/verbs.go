package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/internal/size"
)

// --- loopback probe ---------------------------------------------------------

var (
	loopbackUp = prometheus.NewDesc("rdmad_loopback_up",
		"1 when the port's last loopback round (RDMA WRITE, READ and SEND/RECV) succeeded, else 0.", []string{"device", "port"}, nil)
	loopbackState = prometheus.NewDesc("rdmad_loopback_state",
		"1 for the loopback probe's current state of the port: ok, paused, failed or unavailable.", []string{"device", "port", "state"}, nil)
	loopbackRTT = prometheus.NewDesc("rdmad_loopback_rtt_seconds",
		"Round-trip time of the operation over the probe's window: stat p50, p99, max or last.", []string{"device", "port", "op", "stat"}, nil)
	loopbackOps = prometheus.NewDesc("rdmad_loopback_operations_total",
		"Loopback operations that completed with the right data.", []string{"device", "port", "op"}, nil)
	loopbackOpErrors = prometheus.NewDesc("rdmad_loopback_operation_errors_total",
		"Loopback operations that failed.", []string{"device", "port", "op"}, nil)
	loopbackRounds = prometheus.NewDesc("rdmad_loopback_rounds_total",
		"Loopback rounds attempted on the ACTIVE port.", []string{"device", "port"}, nil)
	loopbackFailures = prometheus.NewDesc("rdmad_loopback_round_failures_total",
		"Loopback rounds that failed.", []string{"device", "port"}, nil)
	loopbackRecreated = prometheus.NewDesc("rdmad_loopback_qp_recreations_total",
		"Times the probe's QP pair was rebuilt after an error.", []string{"device", "port"}, nil)
	probeTrafficClass = prometheus.NewDesc("rdmad_probe_traffic_class",
		"GRH traffic class (RoCE v2: IP ToS byte, DSCP*4 + ECN) the probe sends with from the port: probe loopback or peer.", []string{"probe", "port"}, nil)
)

var loopbackStates = []string{"ok", "paused", "failed", "unavailable"}

var loopbackSection = section{
	descs: []*prometheus.Desc{loopbackUp, loopbackState, loopbackRTT, loopbackOps, loopbackOpErrors, loopbackRounds, loopbackFailures, loopbackRecreated,
		probeTrafficClass, loopbackRTTHist},
	collect: func(c *Collector, s *apitype.Snapshot, ch chan<- prometheus.Metric) {
		for _, p := range s.Peers.Ports {
			ch <- gauge(probeTrafficClass, float64(p.TrafficClass), "peer", p.Key)
		}
		for _, p := range s.Loopback {
			l := []string{p.Device, strconv.Itoa(p.Port)}
			if p.GID != "" { // it has run a round: the class is the QPs'
				ch <- gauge(probeTrafficClass, float64(p.TrafficClass), "loopback", p.Device+"/"+strconv.Itoa(p.Port))
			}
			ch <- gauge(loopbackUp, b2f(p.State == "ok"), l...)
			for _, st := range loopbackStates {
				ch <- gauge(loopbackState, b2f(p.State == st), append(l, st)...)
			}
			for _, op := range []struct {
				name string
				s    apitype.OpStats
			}{{"write", p.Write}, {"read", p.Read}, {"send", p.Send}, {"warmup", p.Warmup}} {
				ol := append(l[:2:2], op.name)
				if op.s.Count > 0 {
					for _, st := range []struct {
						name string
						v    float64
					}{{"p50", op.s.P50.Seconds()}, {"p99", op.s.P99.Seconds()}, {"max", op.s.Max.Seconds()}, {"last", op.s.LastRTT.Seconds()}} {
						ch <- gauge(loopbackRTT, st.v, append(ol[:3:3], st.name)...)
					}
				}
				ch <- rttHist(loopbackRTTHist, &op.s.RTTHist, ol...)
				ch <- counter(loopbackOps, float64(op.s.Count), ol...)
				ch <- counter(loopbackOpErrors, float64(op.s.Errors), ol...)
			}
			ch <- counter(loopbackRounds, float64(p.Rounds), l...)
			ch <- counter(loopbackFailures, float64(p.Failures), l...)
			ch <- counter(loopbackRecreated, float64(p.QPRecreated), l...)
		}
	},
}

// --- MR pool ----------------------------------------------------------------

var (
	poolRegistered = prometheus.NewDesc("rdmad_mrpool_registered",
		"1 when the device's pool is registered, else 0 (see rdmactl status for the error).", []string{"device"}, nil)
	poolBytes = prometheus.NewDesc("rdmad_mrpool_registered_bytes",
		"Memory the device's pool has registered (and pinned).", []string{"device"}, nil)
	poolInUseBytes = prometheus.NewDesc("rdmad_mrpool_in_use_bytes",
		"Pool memory held by users.", []string{"device"}, nil)
	poolHighWater = prometheus.NewDesc("rdmad_mrpool_high_water_bytes",
		"Most pool memory held at once, summed over the size classes.", []string{"device"}, nil)
	poolGetFailures = prometheus.NewDesc("rdmad_mrpool_get_failures_total",
		"Requests for a buffer the pool could not serve.", []string{"device"}, nil)
	poolClassBuffers = prometheus.NewDesc("rdmad_mrpool_class_buffers",
		"Buffers of the size class.", []string{"device", "size"}, nil)
	poolClassInUse = prometheus.NewDesc("rdmad_mrpool_class_buffers_in_use",
		"Buffers of the size class held by users.", []string{"device", "size"}, nil)
	poolClassExhausted = prometheus.NewDesc("rdmad_mrpool_class_exhausted_total",
		"Requests that found the size class empty.", []string{"device", "size"}, nil)
	canaryRegs = prometheus.NewDesc("rdmad_mrpool_canary_registrations_total",
		"Registrations of the canary buffer that succeeded.", []string{"device"}, nil)
	canaryFailures = prometheus.NewDesc("rdmad_mrpool_canary_failures_total",
		"Registrations of the canary buffer that failed (memlock, permissions, device).", []string{"device"}, nil)
	canaryLatency = prometheus.NewDesc("rdmad_mrpool_canary_latency_seconds",
		"Time of ibv_reg_mr plus ibv_dereg_mr of the canary buffer: stat last or max.", []string{"device", "stat"}, nil)
)

var poolSection = section{
	descs: []*prometheus.Desc{poolRegistered, poolBytes, poolInUseBytes, poolHighWater, poolGetFailures,
		poolClassBuffers, poolClassInUse, poolClassExhausted, canaryRegs, canaryFailures, canaryLatency},
	collect: func(c *Collector, s *apitype.Snapshot, ch chan<- prometheus.Metric) {
		for _, d := range s.MRPool {
			ch <- gauge(poolRegistered, b2f(d.Registered), d.Device)
			ch <- gauge(poolBytes, float64(d.RegisteredBytes), d.Device)
			ch <- gauge(poolInUseBytes, float64(d.InUseBytes), d.Device)
			ch <- gauge(poolHighWater, float64(d.HighWaterBytes), d.Device)
			ch <- counter(poolGetFailures, float64(d.Failures), d.Device)
			for _, cl := range d.Classes {
				sz := size.Size(cl.Size).String()
				ch <- gauge(poolClassBuffers, float64(cl.Count), d.Device, sz)
				ch <- gauge(poolClassInUse, float64(cl.InUse), d.Device, sz)
				ch <- counter(poolClassExhausted, float64(cl.Exhausted), d.Device, sz)
			}
			ch <- counter(canaryRegs, float64(d.Canary.Registrations), d.Device)
			ch <- counter(canaryFailures, float64(d.Canary.Failures), d.Device)
			if d.Canary.Registrations > 0 {
				ch <- gauge(canaryLatency, d.Canary.LastLatency.Seconds(), d.Device, "last")
				ch <- gauge(canaryLatency, d.Canary.MaxLatency.Seconds(), d.Device, "max")
			}
		}
	},
}
