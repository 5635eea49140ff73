// Package ud holds the values the probe control plane (probe) and the
// probe engine on RDMA hardware (verbs/peer) exchange: the unreliable
// datagram (UD) endpoints probes go between, the local ports, a batch's
// targets, the replies and the engine's counters. It is a leaf that
// imports no verbs binding, so that probe, which decides whom to probe and
// when, builds and is tested without cgo; verbs/peer implements
// probe.Transport with these types.
package ud

import (
	"errors"
	"time"

	"github.com/rdmad/rdmad/internal/gid"
)

// ErrBusy is returned (in a Target's Err) when every send slot of the port
// is in flight: the caller counts the probe as not sent rather than
// queueing it.
var ErrBusy = errors.New("all probe send slots are in flight")

// An Endpoint is a UD QP on the fabric: where probes go.
type Endpoint struct {
	GID  gid.GID
	QPN  uint32
	QKey uint32
	LID  uint16 // InfiniBand only
}

// MaxFlows bounds the probe flows of a port ([probe] flows): each flow is
// a QP of its own, so a UDP source port of its own on RoCE v2.
const MaxFlows = 16

// A Flow is one of a port's probe QPs. On RoCE v2 the fabric hashes a
// packet onto one of its equal-cost paths by the UDP source port, which
// the provider derives from the sending QP: each flow is one path of the
// fabric.
type Flow struct {
	QPN uint32
	// SourcePort is the UDP source port of the flow's packets as the
	// provider computes it, 0 when it cannot be known from here (every
	// provider but Soft-RoCE, whose formula of the QPN is public).
	SourcePort uint16
}

// A LocalPort is a port the engine probes from and answers on.
type LocalPort struct {
	Key       string // "rxe0/1"
	Device    string
	Port      int
	GIDIndex  int
	LinkLayer string
	// TrafficClass is the GRH traffic class of the port's probes and
	// answers.
	TrafficClass uint8
	Endpoint
	// Flows are the port's probe QPs, Flows[0] being Endpoint's (the
	// one that answers other nodes); a Target's Flow indexes them.
	Flows []Flow
}

// A Reply is an answered probe. It matched a probe this port sent and has
// not been answered before: same sequence number, from the QPN and GID the
// probe went to, in the probe's payload version.
type Reply struct {
	Local string // the port key that sent the probe
	// Flow is the index of the port's flow (LocalPort.Flows) that sent
	// the probe and received the reply.
	Flow uint8
	// From is the responder's GID (from the packet's GRH) and QPN (from
	// the adapter), which are those the probe was sent to.
	From Endpoint
	Seq  uint64
	// RTT is the prober's time from just before posting the probe (its
	// own record, not the time the reply echoes) to polling the reply's
	// completion. It includes the responder's host delay, which
	// ResponderDelay claims (the peer's word; the health verdict never
	// subtracts it).
	RTT time.Duration
	// ResponderDelay is what the responder says it held the probe; a
	// reply claiming more than RTT is dropped.
	ResponderDelay time.Duration
	At             time.Time
	// Authenticated is true when the reply carried a valid version-2 tag
	// (and so did its probe).
	Authenticated bool
}

// Stats are the engine's counters since it started.
type Stats struct {
	Sent        uint64 `json:"sent"`         // probes posted
	Replies     uint64 `json:"replies"`      // replies accepted: matched a probe in flight
	Answered    uint64 `json:"answered"`     // probes of other nodes answered
	Malformed   uint64 `json:"malformed"`    // received packets dropped as malformed (bad payload, no GRH, impossible responder delay)
	Unadmitted  uint64 `json:"unadmitted"`   // probes dropped: sender not admitted by the control endpoint
	ReplyErrors uint64 `json:"reply_errors"` // answers that could not be posted
	SendErrors  uint64 `json:"send_errors"`  // send completions with an error status
	Rebuilds    uint64 `json:"rebuilds"`     // ports rebuilt after their QP failed
	Unsolicited uint64 `json:"unsolicited"`  // replies dropped: no probe in flight with that seq, source QPN and GID
	BadTag      uint64 `json:"bad_tag"`      // version-2 probes and replies dropped: wrong tag, or no key to check it
	Untagged    uint64 `json:"untagged"`     // version-1 probes and replies dropped because tags are required
}

// A Target is one probe of a batch: where it goes, its sequence number,
// whether it is tagged, and, after ProbeBatch, why it was not sent (nil
// when it was).
type Target struct {
	Dst Endpoint
	Seq uint64
	// Auth sends a version-2 probe tagged with the SetAuth key (the
	// responder must know the key and speak version 2); false sends an
	// untagged version-1 probe, which every rdmad answers.
	Auth bool
	// Flow is the index of the local port's flow to send from
	// (LocalPort.Flows); one the port does not have is refused in Err.
	Flow uint8
	Err  error
}
