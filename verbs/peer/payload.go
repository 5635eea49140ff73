package peer

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/rdmad/rdmad/verbs"
)

// PayloadSize is the fixed size of a probe or reply on the wire (the UD
// SEND's payload, after the 40-byte GRH the receiver finds in front of it).
// docs/PROBES.md documents the layout.
const PayloadSize = 64

// PayloadVersion is the version of the probe payload layout.
const PayloadVersion = 1

// payloadMagic starts every probe payload: "RDPP".
var payloadMagic = [4]byte{'R', 'D', 'P', 'P'}

// Payload kinds.
const (
	KindProbe = 1 // prober -> responder
	KindReply = 2 // responder -> prober
)

// A Payload is one probe or reply. Times are nanoseconds on the clock of
// the host that wrote them (monotonic, since that process started): only
// differences of times from one host are meaningful, so the prober never
// compares its clock with the responder's.
type Payload struct {
	Kind uint8
	Seq  uint64
	// SentAt is the prober's time just before it posted the probe (t1);
	// the responder echoes it.
	SentAt int64
	// RecvAt and ReplyAt are the responder's times at the receive
	// completion (t2) and just before it posted the reply (t3); zero in a
	// probe. ReplyAt-RecvAt is the responder's host delay, which the
	// prober subtracts from its round trip.
	RecvAt  int64
	ReplyAt int64
	// GID is the sender's source GID: the responder replies to it (if the
	// sender was admitted through the control endpoint).
	GID verbs.GID
}

// ErrMalformed is wrapped by every payload decoding error.
var ErrMalformed = errors.New("malformed probe payload")

// Encode writes p into b, which must hold PayloadSize bytes.
func (p *Payload) Encode(b []byte) {
	_ = b[PayloadSize-1]
	copy(b[0:4], payloadMagic[:])
	b[4] = PayloadVersion
	b[5] = p.Kind
	b[6], b[7] = 0, 0
	binary.BigEndian.PutUint64(b[8:], p.Seq)
	binary.BigEndian.PutUint64(b[16:], uint64(p.SentAt))
	binary.BigEndian.PutUint64(b[24:], uint64(p.RecvAt))
	binary.BigEndian.PutUint64(b[32:], uint64(p.ReplyAt))
	copy(b[40:56], p.GID[:])
	clear(b[56:64])
}

// DecodePayload parses a probe payload. It rejects anything that is not
// exactly one well-formed version-1 probe or reply: a wrong size, magic,
// version or kind, non-zero reserved bytes, or reply times that run
// backwards.
func DecodePayload(b []byte) (Payload, error) {
	var p Payload
	if len(b) != PayloadSize {
		return p, fmt.Errorf("%w: %d bytes, want %d", ErrMalformed, len(b), PayloadSize)
	}
	if [4]byte(b[0:4]) != payloadMagic {
		return p, fmt.Errorf("%w: bad magic %x", ErrMalformed, b[0:4])
	}
	if b[4] != PayloadVersion {
		return p, fmt.Errorf("%w: version %d, this rdmad speaks %d", ErrMalformed, b[4], PayloadVersion)
	}
	p.Kind = b[5]
	if p.Kind != KindProbe && p.Kind != KindReply {
		return p, fmt.Errorf("%w: kind %d", ErrMalformed, p.Kind)
	}
	if b[6] != 0 || b[7] != 0 {
		return p, fmt.Errorf("%w: reserved flags set", ErrMalformed)
	}
	for _, c := range b[56:64] {
		if c != 0 {
			return p, fmt.Errorf("%w: reserved bytes set", ErrMalformed)
		}
	}
	p.Seq = binary.BigEndian.Uint64(b[8:])
	p.SentAt = int64(binary.BigEndian.Uint64(b[16:]))
	p.RecvAt = int64(binary.BigEndian.Uint64(b[24:]))
	p.ReplyAt = int64(binary.BigEndian.Uint64(b[32:]))
	copy(p.GID[:], b[40:56])
	if p.Kind == KindProbe && (p.RecvAt != 0 || p.ReplyAt != 0) {
		return p, fmt.Errorf("%w: probe carries responder times", ErrMalformed)
	}
	if p.Kind == KindReply && (p.ReplyAt < p.RecvAt || p.ReplyAt-p.RecvAt > maxResponderDelay) {
		return p, fmt.Errorf("%w: responder times %d..%d", ErrMalformed, p.RecvAt, p.ReplyAt)
	}
	return p, nil
}

// maxResponderDelay bounds a believable responder host delay; a reply that
// claims more is garbage, not a slow host (probes time out long before).
const maxResponderDelay = int64(10e9)
