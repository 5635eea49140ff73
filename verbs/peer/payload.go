package peer

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"

	"github.com/rdmad/rdmad/verbs"
)

// PayloadSize is the fixed size of a probe or reply on the wire (the UD
// SEND's payload, after the 40-byte GRH the receiver finds in front of it).
// Both versions have it. docs/PROBES.md documents the layouts.
const PayloadSize = 64

// Payload versions. Version 1 is untagged and carries the sender's GID;
// version 2 carries an HMAC tag (see PayloadTag) in place of the GID, which
// the receiver takes from the packet's GRH in either version.
const (
	PayloadV1 = 1
	PayloadV2 = 2
)

// PayloadVersion is the newest payload version this rdmad speaks.
const PayloadVersion = PayloadV2

// TagSize is the size of a version-2 payload's tag: HMAC-SHA256 truncated
// to 128 bits, as RFC 2104 section 5 allows (at least half the output).
const TagSize = 16

// tagOff is where the tag starts in a version-2 payload; the tag covers
// every byte before it.
const tagOff = PayloadSize - TagSize

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
	// Version is PayloadV1 or PayloadV2; Encode writes 0 as PayloadV1.
	Version uint8
	Kind    uint8
	Seq     uint64
	// SentAt is the prober's time just before it posted the probe (t1);
	// the responder echoes it. The prober does not trust the echo: it
	// measures the round trip from its own record of the send.
	SentAt int64
	// RecvAt and ReplyAt are the responder's times at the receive
	// completion (t2) and just before it posted the reply (t3); zero in a
	// probe. ReplyAt-RecvAt is the responder's host delay, which the
	// prober subtracts from its round trip.
	RecvAt  int64
	ReplyAt int64
	// GID is the sender's GID as it claims it (version 1 only; zero in
	// version 2). Receivers ignore it: the source GID is read from the
	// GRH. It stays on the wire because older responders answer to it.
	GID verbs.GID
	// Tag is the version-2 tag as found on the wire (zero in version 1);
	// VerifyPayload checks it, SealPayload writes it.
	Tag [TagSize]byte
}

// ErrMalformed is wrapped by every payload decoding error.
var ErrMalformed = errors.New("malformed probe payload")

// Encode writes p into b, which must hold PayloadSize bytes. A version-2
// payload gets p.Tag as it is; SealPayload (or the engine) then writes the
// real tag over it.
func (p *Payload) Encode(b []byte) {
	_ = b[PayloadSize-1]
	v := p.Version
	if v == 0 {
		v = PayloadV1
	}
	copy(b[0:4], payloadMagic[:])
	b[4] = v
	b[5] = p.Kind
	b[6], b[7] = 0, 0
	binary.BigEndian.PutUint64(b[8:], p.Seq)
	binary.BigEndian.PutUint64(b[16:], uint64(p.SentAt))
	binary.BigEndian.PutUint64(b[24:], uint64(p.RecvAt))
	binary.BigEndian.PutUint64(b[32:], uint64(p.ReplyAt))
	if v == PayloadV1 {
		copy(b[40:56], p.GID[:])
		clear(b[56:64])
	} else {
		clear(b[40:tagOff])
		copy(b[tagOff:], p.Tag[:])
	}
}

// DecodePayload parses a probe payload. It rejects anything that is not
// exactly one well-formed version-1 or version-2 probe or reply: a wrong
// size, magic, version or kind, non-zero reserved bytes, or reply times
// that run backwards. It does not check a version-2 tag: that needs the
// key and the GIDs of the packet (VerifyPayload).
func DecodePayload(b []byte) (Payload, error) {
	var p Payload
	if len(b) != PayloadSize {
		return p, fmt.Errorf("%w: %d bytes, want %d", ErrMalformed, len(b), PayloadSize)
	}
	if [4]byte(b[0:4]) != payloadMagic {
		return p, fmt.Errorf("%w: bad magic %x", ErrMalformed, b[0:4])
	}
	p.Version = b[4]
	if p.Version != PayloadV1 && p.Version != PayloadV2 {
		return p, fmt.Errorf("%w: version %d, this rdmad speaks %d and %d", ErrMalformed, b[4], PayloadV1, PayloadV2)
	}
	p.Kind = b[5]
	if p.Kind != KindProbe && p.Kind != KindReply {
		return p, fmt.Errorf("%w: kind %d", ErrMalformed, p.Kind)
	}
	if b[6] != 0 || b[7] != 0 {
		return p, fmt.Errorf("%w: reserved flags set", ErrMalformed)
	}
	reserved := b[56:64]
	if p.Version == PayloadV2 {
		reserved = b[40:tagOff]
	}
	for _, c := range reserved {
		if c != 0 {
			return p, fmt.Errorf("%w: reserved bytes set", ErrMalformed)
		}
	}
	p.Seq = binary.BigEndian.Uint64(b[8:])
	p.SentAt = int64(binary.BigEndian.Uint64(b[16:]))
	p.RecvAt = int64(binary.BigEndian.Uint64(b[24:]))
	p.ReplyAt = int64(binary.BigEndian.Uint64(b[32:]))
	if p.Version == PayloadV1 {
		copy(p.GID[:], b[40:56])
	} else {
		copy(p.Tag[:], b[tagOff:])
	}
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

// A tagger computes version-2 tags with one key. It reuses its HMAC state,
// input and output buffers, so tagging allocates nothing (slices of the
// caller's stack would escape through the hash.Hash interface; its own
// buffers are on the heap already). It is not safe for concurrent use: a
// port uses its own under its lock.
type tagger struct {
	mac hash.Hash
	in  [len(tagDomain) + 2*len(verbs.GID{}) + tagOff]byte
	sum [sha256.Size]byte
}

// tagDomain separates probe tags from any other use of the fleet key (the
// control endpoint's HMAC, say): the same key never tags two kinds of
// message with one input layout.
const tagDomain = "rdmad peer probe v2\x00"

func newTagger(key []byte) *tagger { return &tagger{mac: hmac.New(sha256.New, key)} }

// tag returns the tag of the version-2 payload b (PayloadSize bytes) sent
// from the port with GID src to the port with GID dst. The MAC covers both
// GIDs, so a captured payload is worthless from another source or towards
// another destination, and bytes 0..47: magic, version, kind, sequence
// number and all three times. The result aliases t's buffer.
func (t *tagger) tag(b []byte, src, dst verbs.GID) []byte {
	_ = b[PayloadSize-1]
	n := copy(t.in[:], tagDomain)
	n += copy(t.in[n:], src[:])
	n += copy(t.in[n:], dst[:])
	copy(t.in[n:], b[:tagOff])
	t.mac.Reset()
	t.mac.Write(t.in[:])
	return t.mac.Sum(t.sum[:0])[:TagSize]
}

// seal writes the tag of b into b.
func (t *tagger) seal(b []byte, src, dst verbs.GID) { copy(b[tagOff:PayloadSize], t.tag(b, src, dst)) }

// verify reports whether b carries its correct tag, in constant time.
func (t *tagger) verify(b []byte, src, dst verbs.GID) bool {
	return hmac.Equal(t.tag(b, src, dst), b[tagOff:PayloadSize])
}

// PayloadTag returns the tag of the encoded version-2 payload b
// (PayloadSize bytes; its tag bytes are ignored) sent from the port whose
// GID is src to the port whose GID is dst, under key: the first TagSize
// bytes of HMAC-SHA256(key, "rdmad peer probe v2\x00" || src || dst ||
// b[0:48]). The receiver takes src from the packet's GRH and dst is its own
// GID, never what the payload claims.
func PayloadTag(key, b []byte, src, dst verbs.GID) [TagSize]byte {
	return [TagSize]byte(newTagger(key).tag(b, src, dst))
}

// SealPayload writes PayloadTag(key, b, src, dst) into b's tag bytes.
func SealPayload(key, b []byte, src, dst verbs.GID) { newTagger(key).seal(b, src, dst) }

// VerifyPayload reports whether the version-2 payload b carries the tag
// key gives it from src to dst. It compares in constant time.
func VerifyPayload(key, b []byte, src, dst verbs.GID) bool {
	return newTagger(key).verify(b, src, dst)
}
