package wire

import (
	"encoding/binary"
	"fmt"
	"time"
)

// Bandwidth test messages (version 2 only). A node asks a peer for an RC
// bandwidth test with a request carrying its RC QP (header: QPN, LID, GID)
// and the test (the bandwidth extension: operation, size, duration, PSN,
// path MTU); the peer answers with its own RC QP and, for RDMA WRITE and
// READ, the address and rkey of the memory the test may use, or with a
// refusal saying why. A done message ends the test at the peer before its
// time is up. docs/PROBES.md, "Bandwidth tests", documents the layout.
const (
	// TypeBWRequest asks for a bandwidth test.
	TypeBWRequest = 3
	// TypeBWAnswer accepts it (BWOK) or refuses it (another status).
	TypeBWAnswer = 4
	// TypeBWDone says the requester finished: the peer frees the test's
	// QP and memory at once instead of when its time is up.
	TypeBWDone = 5
)

// ExtBandwidth is the bandwidth extension, which every bandwidth message
// carries exactly once and no other message may carry. It is critical: a
// receiver that cannot read it must not act on the message.
const ExtBandwidth = ExtCritical | 0x0003

// bwExtLen is the size of the bandwidth extension's value.
const bwExtLen = 32

// ExtBWTime is the time a bandwidth request was sent: 8 bytes, Unix time in
// milliseconds (signed). Not critical: a responder that predates it skips
// it. Covered by the tag like every extension, it lets a responder with a
// fleet key refuse a captured request replayed later (MaxBWSkew) and, with
// the nonces it remembers for that long, one replayed at once.
const ExtBWTime = 0x0004

// ExtBWQPs lists a bandwidth test's queue pairs beyond its first (the
// message's QPN and the bandwidth extension's PSN), for a test of several
// queue pairs in parallel (rdmactl bw --qps): in a request the
// requester's, in an acceptance the responder's, one for each of the
// request's and in its order, 20 bytes each: QPN (4), PSN (4), and in an
// acceptance of an RDMA WRITE or READ test the memory that QP's requests
// aim at, address (8) and rkey (4); zero otherwise. Not critical: a
// responder without it answers with one queue pair, which the requester
// takes as a refusal of the others.
const ExtBWQPs = 0x0008

// MaxBWQPs bounds a test's queue pairs, its first included.
const MaxBWQPs = 16

// bwQPLen is the size of one ExtBWQPs entry.
const bwQPLen = 20

// A BWQP is one ExtBWQPs entry.
type BWQP struct {
	QPN, PSN uint32
	Addr     uint64
	RKey     uint32
}

// BWQPsExt returns qps as an ExtBWQPs extension.
func BWQPsExt(qps []BWQP) Ext {
	v := make([]byte, 0, len(qps)*bwQPLen)
	for _, q := range qps {
		v = binary.BigEndian.AppendUint32(v, q.QPN)
		v = binary.BigEndian.AppendUint32(v, q.PSN)
		v = binary.BigEndian.AppendUint64(v, q.Addr)
		v = binary.BigEndian.AppendUint32(v, q.RKey)
	}
	return Ext{Type: ExtBWQPs, Value: v}
}

// BWQPsOf returns the queue pairs beyond the first that a decoded
// bandwidth message lists (nil: none, one queue pair).
func BWQPsOf(m Message) []BWQP {
	for _, e := range m.Ext {
		if e.Type != ExtBWQPs {
			continue
		}
		out := make([]BWQP, 0, len(e.Value)/bwQPLen)
		for v := e.Value; len(v) >= bwQPLen; v = v[bwQPLen:] {
			out = append(out, BWQP{QPN: binary.BigEndian.Uint32(v), PSN: binary.BigEndian.Uint32(v[4:]),
				Addr: binary.BigEndian.Uint64(v[8:]), RKey: binary.BigEndian.Uint32(v[16:])})
		}
		return out
	}
	return nil
}

// MaxBWSkew is how far a bandwidth request's time may be from the
// responder's clock, either way: the clocks of a fleet agree far better
// (NTP), and a replay has at most this long.
const MaxBWSkew = 30 * time.Second

// BWTimeExt returns t as an ExtBWTime extension.
func BWTimeExt(t time.Time) Ext {
	return Ext{Type: ExtBWTime, Value: binary.BigEndian.AppendUint64(make([]byte, 0, 8), uint64(t.UnixMilli()))}
}

// BWTimeOf returns the time a bandwidth message carries (ok false when it
// carries none: a requester that predates it). Decode has checked it.
func BWTimeOf(m Message) (t time.Time, ok bool) {
	for _, e := range m.Ext {
		if e.Type == ExtBWTime && len(e.Value) == 8 {
			return time.UnixMilli(int64(binary.BigEndian.Uint64(e.Value))), true
		}
	}
	return time.Time{}, false
}

// Bounds of a bandwidth test: a responder refuses anything outside them
// (BWBadRequest) and tears its side down when the duration and BWGrace
// have passed, whatever the requester does.
const (
	MaxBWSize     = 1 << 20
	MinBWDuration = 100 * time.Millisecond
	MaxBWDuration = 30 * time.Second
	// BWGrace is the time a responder gives a test beyond its duration
	// (connection setup, draining the last messages) before it tears
	// the test down.
	BWGrace = 5 * time.Second
)

// A BWOp is the operation a bandwidth test moves data with.
type BWOp uint8

// Bandwidth test operations.
const (
	BWWrite BWOp = 1 // RDMA WRITE into the responder's memory
	BWRead  BWOp = 2 // RDMA READ of the responder's memory
	BWSend  BWOp = 3 // SEND into the responder's posted receives
)

func (o BWOp) String() string {
	switch o {
	case BWWrite:
		return "write"
	case BWRead:
		return "read"
	case BWSend:
		return "send"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// ParseBWOp parses "write", "read" or "send".
func ParseBWOp(s string) (BWOp, error) {
	for _, o := range []BWOp{BWWrite, BWRead, BWSend} {
		if s == o.String() {
			return o, nil
		}
	}
	return 0, fmt.Errorf("bandwidth test operation %.32q: use write, read or send", s)
}

// A BWStatus is a responder's verdict on a bandwidth request.
type BWStatus uint8

// Bandwidth answer statuses. Every refusal names its reason, so that the
// requester can tell the operator what to change.
const (
	BWOK          BWStatus = 0
	BWDisabled    BWStatus = 1 // [probe] bandwidth is false there
	BWBusy        BWStatus = 2 // a test runs there already
	BWBadRequest  BWStatus = 3 // size or duration out of bounds
	BWUnavailable BWStatus = 4 // no ACTIVE port, or verbs failed there
	// BWStale: with a fleet key, a request without a time, with one more
	// than MaxBWSkew from the responder's clock, or whose nonce the
	// responder saw already (a replay).
	BWStale BWStatus = 5
	// BWBadAddress: the request's GID (LID on InfiniBand) is not the
	// requester's own (see docs/PROBES.md, "Bandwidth tests").
	BWBadAddress BWStatus = 6
	maxBWStatus           = BWBadAddress
)

// Reason returns what a refusal means for the operator.
func (s BWStatus) Reason() string {
	switch s {
	case BWOK:
		return "accepted"
	case BWDisabled:
		return "bandwidth tests are disabled there; set [probe] bandwidth = true in its rdmad.toml and reload it"
	case BWBusy:
		return "a bandwidth test is running there already (one at a time per node); try again when it ends"
	case BWBadRequest:
		return fmt.Sprintf("it refused the parameters; the size must be 1 byte to %d KiB and the duration %s to %s", MaxBWSize>>10, MinBWDuration, MaxBWDuration)
	case BWUnavailable:
		return "it has no ACTIVE RDMA port it can test from (see rdmactl status and its journal there)"
	case BWStale:
		return fmt.Sprintf("it took the request for a stale or replayed one; the clocks of both nodes must agree within %s (check NTP), and with a fleet key both nodes need an rdmad that sends the request's time", MaxBWSkew)
	case BWBadAddress:
		return "the request's RDMA address is not this node's control address there: on RoCE the GID must be this node's IP address the request comes from (use a GID of the address it sends control messages from), on InfiniBand a port this node announced to it in its probe queries and answers"
	}
	return fmt.Sprintf("status %d", uint8(s))
}

// BW is the bandwidth extension's content.
type BW struct {
	Op     BWOp
	Status BWStatus // answers; 0 in requests and done messages
	// MTU is the sender's active path MTU code (1: 256 ... 5: 4096
	// bytes); the connection uses the smaller of both sides'.
	MTU uint8
	// PSN is the first packet sequence number the sender's QP sends with
	// (24 bits).
	PSN uint32
	// Size is the bytes of one message.
	Size uint32
	// Duration is how long the requester sends (milliseconds on the
	// wire).
	Duration time.Duration
	// Addr and RKey are the responder's memory for RDMA WRITE and READ
	// (answers only; zero otherwise).
	Addr uint64
	RKey uint32
}

// Ext returns b as an extension.
func (b BW) Ext() Ext {
	v := make([]byte, bwExtLen)
	v[0] = byte(b.Op)
	v[1] = byte(b.Status)
	v[2] = b.MTU
	binary.BigEndian.PutUint32(v[4:], b.PSN)
	binary.BigEndian.PutUint32(v[8:], b.Size)
	binary.BigEndian.PutUint32(v[12:], uint32(min(max(b.Duration.Milliseconds(), 0), 1<<32-1)))
	binary.BigEndian.PutUint64(v[16:], b.Addr)
	binary.BigEndian.PutUint32(v[24:], b.RKey)
	return Ext{Type: ExtBandwidth, Value: v}
}

// IsBW reports whether t is a bandwidth message type.
func IsBW(t uint8) bool { return t == TypeBWRequest || t == TypeBWAnswer || t == TypeBWDone }

// BWOf returns the bandwidth extension of a decoded bandwidth message.
// Decode has checked it, so it fails only for a message that did not come
// from Decode.
func BWOf(m Message) (BW, error) {
	var (
		b     BW
		found bool
	)
	for _, e := range m.Ext {
		if e.Type != ExtBandwidth {
			continue
		}
		if found {
			return b, fmt.Errorf("%w: two bandwidth extensions", ErrMalformed)
		}
		found = true
		v := e.Value
		if len(v) != bwExtLen {
			return b, fmt.Errorf("%w: bandwidth extension of %d bytes, want %d", ErrMalformed, len(v), bwExtLen)
		}
		if v[3] != 0 || binary.BigEndian.Uint32(v[28:]) != 0 {
			return b, fmt.Errorf("%w: reserved bytes set in the bandwidth extension", ErrMalformed)
		}
		b = BW{Op: BWOp(v[0]), Status: BWStatus(v[1]), MTU: v[2], PSN: binary.BigEndian.Uint32(v[4:]),
			Size: binary.BigEndian.Uint32(v[8:]), Duration: time.Duration(binary.BigEndian.Uint32(v[12:])) * time.Millisecond,
			Addr: binary.BigEndian.Uint64(v[16:]), RKey: binary.BigEndian.Uint32(v[24:])}
	}
	if !found {
		return b, fmt.Errorf("%w: bandwidth message without its extension", ErrMalformed)
	}
	return b, nil
}

// checkBW checks the parts of a decoded message that concern bandwidth
// tests: a bandwidth extension exactly in bandwidth messages, and in those
// only what a test can be. Values a responder judges (size, duration) are
// left to it, so that its answer can say why it refused.
func checkBW(m *Message) error {
	if !IsBW(m.Type) {
		for _, e := range m.Ext {
			if e.Type == ExtBandwidth || e.Type == ExtBWTime || e.Type == ExtBWQPs {
				return fmt.Errorf("%w: bandwidth extension in a message of type %d (extension %#x)", ErrMalformed, m.Type, e.Type)
			}
		}
		return nil
	}
	times := 0
	for _, e := range m.Ext {
		if e.Type != ExtBWTime {
			continue
		}
		if times++; times > 1 || len(e.Value) != 8 || m.Type != TypeBWRequest {
			return fmt.Errorf("%w: a bandwidth request carries at most one time of 8 bytes, other messages none", ErrMalformed)
		}
	}
	lists := 0
	for _, e := range m.Ext {
		if e.Type != ExtBWQPs {
			continue
		}
		n := len(e.Value) / bwQPLen
		if lists++; lists > 1 || m.Type == TypeBWDone || len(e.Value)%bwQPLen != 0 || n < 1 || n > MaxBWQPs-1 {
			return fmt.Errorf("%w: a bandwidth request or answer lists at most one set of 1 to %d more queue pairs, 20 bytes each; a done message none", ErrMalformed, MaxBWQPs-1)
		}
		for _, q := range BWQPsOf(Message{Ext: []Ext{e}}) {
			if q.QPN == 0 || q.PSN > 0xffffff || (m.Type == TypeBWRequest && (q.Addr != 0 || q.RKey != 0)) {
				return fmt.Errorf("%w: a listed queue pair has a QPN and a 24-bit PSN, and in a request no address or rkey", ErrMalformed)
			}
		}
	}
	if m.Version != Version2 {
		return fmt.Errorf("%w: bandwidth messages are version 2", ErrMalformed)
	}
	if m.Index != 0 || m.Count != 0 || m.QKey != 0 {
		return fmt.Errorf("%w: index, count and qkey are 0 in a bandwidth message", ErrMalformed)
	}
	b, err := BWOf(*m)
	if err != nil {
		return err
	}
	if b.Op < BWWrite || b.Op > BWSend {
		return fmt.Errorf("%w: bandwidth operation %d", ErrMalformed, b.Op)
	}
	if b.PSN > 0xffffff {
		return fmt.Errorf("%w: PSN %#x has more than 24 bits", ErrMalformed, b.PSN)
	}
	switch m.Type {
	case TypeBWRequest:
		if b.Status != BWOK || b.Addr != 0 || b.RKey != 0 || m.QPN == 0 {
			return fmt.Errorf("%w: a bandwidth request has a QP, no status, address or rkey", ErrMalformed)
		}
	case TypeBWAnswer:
		if b.Status > maxBWStatus {
			return fmt.Errorf("%w: bandwidth status %d", ErrMalformed, b.Status)
		}
		if b.Status == BWOK && m.QPN == 0 {
			return fmt.Errorf("%w: an accepted bandwidth test without a QP", ErrMalformed)
		}
	case TypeBWDone:
		if b.Status != BWOK || b.Addr != 0 || b.RKey != 0 {
			return fmt.Errorf("%w: a done message has no status, address or rkey", ErrMalformed)
		}
	}
	return nil
}
