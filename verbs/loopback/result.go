package loopback

import (
	"time"

	"github.com/rdmad/rdmad/client/apitype"
)

// A State is the health of one port as the loopback probe sees it.
type State string

// Port states.
const (
	// StateOK: the last round of WRITE, READ and SEND/RECV succeeded and
	// the data matched.
	StateOK State = "ok"
	// StatePaused: the port is not ACTIVE; probing waits for it, which is
	// not a failure of the probe.
	StatePaused State = "paused"
	// StateFailed: the last round failed (see LastError and ErrorKind).
	StateFailed State = "failed"
	// StateUnavailable: the device is gone or verbs cannot be used.
	StateUnavailable State = "unavailable"
)

// An ErrorKind classifies the last failure of a port.
type ErrorKind string

// Error kinds.
const (
	KindTimeout      ErrorKind = "timeout"       // no completion within Config.Timeout
	KindQPError      ErrorKind = "qp_error"      // a QP went to the error state; it is recreated
	KindCompletion   ErrorKind = "completion"    // a work completion carried an error status
	KindDataMismatch ErrorKind = "data_mismatch" // the bytes that arrived are not the bytes sent
	KindSetup        ErrorKind = "setup"         // creating the QPs, CQ or MR failed
	KindDeviceGone   ErrorKind = "device_gone"   // the device was removed
	KindVerbs        ErrorKind = "verbs"         // any other verb failed
)

// OpStats are the latencies of one operation (RDMA WRITE, RDMA READ or
// SEND/RECV) on one port: round-trip times from posting the request to its
// completion, over the last Config.Window successful probes.
type OpStats struct {
	LastRTT time.Duration `json:"last_rtt_ns"`
	P50     time.Duration `json:"p50_ns"`
	P99     time.Duration `json:"p99_ns"`
	Max     time.Duration `json:"max_ns"`
	Count   uint64        `json:"count"`  // successful probes since start
	Errors  uint64        `json:"errors"` // failed probes since start
	// RTTHist counts every successful probe's RTT since start (Count of
	// them), for the metrics' histograms.
	RTTHist apitype.RTTHistogram `json:"-"`
}

// A PortResult is the latest loopback probe result of one port. Counters
// run from the Runner's start and survive QP recreation and device
// removal.
type PortResult struct {
	Device    string `json:"device"`
	Port      int    `json:"port"`
	State     State  `json:"state"`
	PortState string `json:"port_state,omitempty"` // verbs port state, e.g. ACTIVE, DOWN
	GID       string `json:"gid,omitempty"`        // source GID the probe uses
	GIDIndex  int    `json:"gid_index"`
	GIDType   string `json:"gid_type,omitempty"`
	// TrafficClass is the GRH traffic class (RoCE v2: IP ToS) of the QPs
	// the last round ran on.
	TrafficClass uint8 `json:"traffic_class"`
	// Poll is how the probe waits for its completions (Config.Poll).
	Poll  PollMode `json:"poll,omitempty"`
	Write OpStats  `json:"write"`
	Read  OpStats  `json:"read"`
	Send  OpStats  `json:"send"`
	// Warmup is the round's first operation, an RDMA WRITE after the probe
	// slept: its RTT includes waking the host's path, which the operations
	// above, run right after it, do not pay.
	Warmup      OpStats   `json:"warmup"`
	Rounds      uint64    `json:"rounds"`       // rounds attempted on an ACTIVE port
	Failures    uint64    `json:"failures"`     // rounds that failed
	QPRecreated uint64    `json:"qp_recreated"` // QP pairs rebuilt after a failure
	LastError   string    `json:"last_error,omitempty"`
	ErrorKind   ErrorKind `json:"error_kind,omitempty"`
	UpdatedAt   time.Time `json:"updated_at"`
}

// A Snapshot is the latest result of every port the Runner has seen.
type Snapshot struct {
	// Unavailable is set while verbs cannot be used at all (no cgo, no
	// uverbs, no device), with the reason.
	Unavailable string       `json:"unavailable,omitempty"`
	Ports       []PortResult `json:"ports"`
}
