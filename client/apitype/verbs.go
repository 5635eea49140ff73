package apitype

import "time"

// The types in this file are the status of rdmad's verbs parts. They mirror
// verbs/loopback and verbs/mrpool on purpose: this package is the API
// contract and must not pull cgo into every client.

// A LoopbackPort is the loopback probe's latest result on one port: RDMA
// WRITE, RDMA READ and SEND/RECV round trips between two RC QPs of the port.
type LoopbackPort struct {
	Device string `json:"device"`
	Port   int    `json:"port"`
	// State is ok, paused (the port is not ACTIVE: not a failure),
	// failed (see LastError and ErrorKind) or unavailable (device gone).
	State     string `json:"state"`
	PortState string `json:"port_state,omitempty"`
	GID       string `json:"gid,omitempty"`
	GIDIndex  int    `json:"gid_index"`
	GIDType   string `json:"gid_type,omitempty"`
	// TrafficClass is the GRH traffic class (RoCE v2: the IP ToS byte) of
	// the probe's QPs: [probe] traffic_class, else the port's
	// [policy.roce] tos, else 0.
	TrafficClass uint8 `json:"traffic_class"`
	// Poll is how the probe waits for its completions ([probe] poll):
	// "event" (sleeps on the completion channel after a 1 ms spin) or
	// "busy" (polls until the completion, holding a core meanwhile).
	Poll  string  `json:"poll,omitempty"`
	Write OpStats `json:"write"`
	Read  OpStats `json:"read"`
	Send  OpStats `json:"send"`
	// Warmup is the round's first operation, an RDMA WRITE after the probe
	// slept. Its RTT includes waking the host (interrupts, scheduler,
	// Soft-RoCE's tasks); Write, Read and Send follow it back to back and
	// measure the device path. A warm-up far slower than Write points at
	// the host, not the fabric.
	Warmup      OpStats   `json:"warmup"`
	Rounds      uint64    `json:"rounds"`
	Failures    uint64    `json:"failures"`
	QPRecreated uint64    `json:"qp_recreated"`
	LastError   string    `json:"last_error,omitempty"`
	ErrorKind   string    `json:"error_kind,omitempty"` // timeout, qp_error, completion, data_mismatch, setup, device_gone, verbs
	UpdatedAt   time.Time `json:"updated_at"`
}

// OpStats are the round-trip times of one operation over the probe's window.
type OpStats struct {
	LastRTT time.Duration `json:"last_rtt_ns"`
	P50     time.Duration `json:"p50_ns"`
	P99     time.Duration `json:"p99_ns"`
	Max     time.Duration `json:"max_ns"`
	Count   uint64        `json:"count"`
	Errors  uint64        `json:"errors"`
	// RTTHist counts every successful operation's RTT since the probe
	// started (Count of them); not in the JSON, for the metrics.
	RTTHist RTTHistogram `json:"-"`
}

// A PoolDevice is the memory registration pool of one device.
type PoolDevice struct {
	Device          string      `json:"device"`
	Registered      bool        `json:"registered"`
	RegisteredBytes int64       `json:"registered_bytes"`
	InUse           int64       `json:"in_use"`
	InUseBytes      int64       `json:"in_use_bytes"`
	HighWaterBytes  int64       `json:"high_water_bytes"`
	Failures        uint64      `json:"failures"`
	LastError       string      `json:"last_error,omitempty"`
	Classes         []PoolClass `json:"classes"`
	Canary          Canary      `json:"canary"`
}

// A PoolClass is one size class of a PoolDevice.
type PoolClass struct {
	Size      int64  `json:"size"`
	Count     int    `json:"count"`
	InUse     int64  `json:"in_use"`
	HighWater int64  `json:"high_water"`
	Gets      uint64 `json:"gets"`
	Exhausted uint64 `json:"exhausted"`
}

// Canary is what the registration canary saw: it registers and deregisters
// a buffer periodically to time registration and catch memlock or
// permission trouble before a user does.
type Canary struct {
	Registrations uint64        `json:"registrations"`
	Failures      uint64        `json:"failures"`
	LastLatency   time.Duration `json:"last_latency_ns"`
	MaxLatency    time.Duration `json:"max_latency_ns"`
	LastError     string        `json:"last_error,omitempty"`
	LastAt        time.Time     `json:"last_at"`
}
