// Package wire is the control protocol rdmad nodes use to find each other's
// probe queue pairs: a versioned UDP message. A node asks a peer for the
// QPN, GID and qkey of one of its probe ports and tells it its own, so that
// the peer's responder will answer its probes. docs/PROBES.md documents the
// layout.
//
// Version 1 is a fixed 64-byte message. Version 2 is the same 64-byte header
// (with version 2 and a flags byte), followed by a bounded area of
// type-length-value extensions and, when the message is authenticated, a
// 32-byte HMAC-SHA256 tag over everything before it. Extensions let later
// changes carry more (a node fingerprint) without another version bump:
// a receiver skips extension types it does not know unless the type is
// marked critical.
//
// Probe messages never carry memory addresses or rkeys: UD probes need
// none, and nothing of the MR pool is reachable from the network. Only a
// bandwidth test's answer (bw.go) carries one: the address and rkey of the
// test's own memory, registered for that test and freed after it.
package wire

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
)

// Size is the size of a version-1 message and of every message's header.
const Size = 64

// MaxSize bounds a version-2 datagram: header, extensions and tag. A
// receiver reads at most this much (plus one byte to see an oversized
// datagram as such) and drops anything longer.
const MaxSize = 1024

// TagSize is the size of the HMAC-SHA256 tag of an authenticated message.
const TagSize = sha256.Size

// MaxExtBytes is the most a version-2 message's extension area can hold:
// what is left of MaxSize after the header and a tag.
const MaxExtBytes = MaxSize - Size - TagSize

// Versions.
const (
	// Version1 is the fixed 64-byte message without authentication.
	Version1 = 1
	// Version2 adds flags, extensions and an optional tag.
	Version2 = 2
	// Version is the newest version this rdmad speaks.
	Version = Version2
)

// DefaultPort is the UDP port of the control endpoint ([probe] port). Not
// 4791 (RoCE v2's own UDP port) and not 18515 (perftest's default).
const DefaultPort = 18516

var magic = [4]byte{'R', 'D', 'P', 'C'}

// Message types.
const (
	// TypeQuery asks for a probe port and admits the sender's.
	TypeQuery = 1
	// TypeAnswer returns the asked port (Count 0: the node has no
	// probing port right now).
	TypeAnswer = 2
)

// Flags of a version-2 message (byte 6).
const (
	// FlagAuthenticated says a TagSize-byte tag follows the extensions.
	FlagAuthenticated = 0x01
	// knownFlags are the flags this version understands. Others must be
	// zero: a flag changes how the message is read, and a receiver that
	// does not know it cannot read it right.
	knownFlags = FlagAuthenticated
)

// ExtCritical marks an extension type a receiver must understand: a
// message carrying a critical type it does not know is dropped rather than
// half-understood. Types without this bit are skipped when unknown.
const ExtCritical = 0x8000

// An Ext is one extension of a version-2 message. On the wire: type
// (2 bytes), length (2 bytes), value.
type Ext struct {
	Type  uint16
	Value []byte
}

// A Message is one control message.
type Message struct {
	// Version is 1 or 2; Append treats 0 as Version.
	Version uint8
	Type    uint8
	// Nonce pairs an answer with its query; the answer echoes it.
	Nonce uint64
	// Index is the port asked for (query) or given (answer), Count the
	// number of probing ports the sender has.
	Index, Count uint8
	// The sender's probe port: in a query, the port that will probe (and
	// must be answered); in an answer, the port to probe.
	QPN  uint32 // 24 bits on the wire's meaning; the top byte must be 0
	QKey uint32
	LID  uint16
	GID  [16]byte
	// NodeID identifies the sending node (a hash of its machine ID and
	// host name); it seeds peer selection and names the node in status.
	NodeID uint64
	// Ext are the extensions of a version-2 message, in wire order,
	// unknown ones included (so that a message re-encodes unchanged).
	Ext []Ext
	// Tagged reports whether the decoded message carried a tag;
	// Authenticated whether that tag verified under the key given to
	// Decode. Append ignores both: a key makes it tag the message.
	Tagged, Authenticated bool
}

// ErrMalformed is wrapped by every decoding error except a bad tag.
var ErrMalformed = errors.New("malformed control message")

// ErrBadTag is returned for a well-formed message whose tag does not
// verify under the key: sent with another key, altered, or forged.
var ErrBadTag = errors.New("control message tag does not verify; is [probe] key_file the same on both nodes?")

// ControlKey derives the key that tags control messages from the fleet
// key, so that the control protocol and the probe payloads (which the
// verbs engine tags with the fleet key) never share a key.
func ControlKey(fleetKey []byte) []byte {
	if len(fleetKey) == 0 {
		return nil
	}
	h := hmac.New(sha256.New, fleetKey)
	h.Write([]byte("rdmad control v2"))
	return h.Sum(nil)
}

// Encode returns m's version-1 wire form, whatever m.Version says. It is
// what an answer to a version-1 query is.
func (m *Message) Encode() [Size]byte {
	var b [Size]byte
	m.putHeader(b[:], Version1, 0)
	return b
}

func (m *Message) putHeader(b []byte, version, flags uint8) {
	copy(b[0:4], magic[:])
	b[4] = version
	b[5] = m.Type
	b[6] = flags
	binary.BigEndian.PutUint64(b[8:], m.Nonce)
	b[16] = m.Index
	b[17] = m.Count
	binary.BigEndian.PutUint32(b[20:], m.QPN)
	binary.BigEndian.PutUint32(b[24:], m.QKey)
	binary.BigEndian.PutUint16(b[28:], m.LID)
	copy(b[32:48], m.GID[:])
	binary.BigEndian.PutUint64(b[48:], m.NodeID)
}

// Append appends m's wire form to dst: version 1 (64 bytes; key must be
// empty, version 1 has no tag) or version 2 with m.Ext and, when key is
// set, a tag. It fails only for a message that cannot be encoded: too many
// extension bytes, or a key on version 1.
func (m *Message) Append(dst []byte, key []byte) ([]byte, error) {
	v := m.Version
	if v == 0 {
		v = Version
	}
	switch v {
	case Version1:
		if len(key) > 0 || len(m.Ext) > 0 {
			return dst, errors.New("wire: a version-1 message has no tag and no extensions")
		}
		b := m.Encode()
		return append(dst, b[:]...), nil
	case Version2:
	default:
		return dst, fmt.Errorf("wire: cannot encode version %d", v)
	}
	n := 0
	for _, e := range m.Ext {
		if len(e.Value) > 0xffff {
			return dst, fmt.Errorf("wire: extension %#x of %d bytes", e.Type, len(e.Value))
		}
		n += 4 + len(e.Value)
	}
	if n > MaxExtBytes {
		return dst, fmt.Errorf("wire: %d bytes of extensions, at most %d fit", n, MaxExtBytes)
	}
	var flags uint8
	if len(key) > 0 {
		flags |= FlagAuthenticated
	}
	start := len(dst)
	dst = append(dst, make([]byte, Size)...)
	m.putHeader(dst[start:], Version2, flags)
	binary.BigEndian.PutUint16(dst[start+56:], uint16(n))
	for _, e := range m.Ext {
		dst = binary.BigEndian.AppendUint16(dst, e.Type)
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(e.Value)))
		dst = append(dst, e.Value...)
	}
	if len(key) > 0 {
		h := hmac.New(sha256.New, key)
		h.Write(dst[start:])
		dst = h.Sum(dst)
	}
	return dst, nil
}

// Decode parses one control message of version 1 or 2. Anything that is
// not exactly one well-formed message is an error wrapping ErrMalformed;
// the caller drops it and counts it. A tagged version-2 message is checked
// against key when key is set: a tag that does not verify is ErrBadTag.
// Without a key the tag cannot be checked and Authenticated stays false.
func Decode(b []byte, key []byte) (Message, error) {
	return DecodeKeys(b, key)
}

// DecodeKeys is Decode with the keys of a rotation ([probe] key_file with
// several keys): a tag that verifies under any of them authenticates the
// message; with none given, as Decode without a key. The first key is
// tried first (the one nodes tag with), so a fleet that rotated pays one
// HMAC per message; a wrong tag costs one per key.
func DecodeKeys(b []byte, keys ...[]byte) (Message, error) {
	return decode(b, nil, true, keys)
}

// DecodeAlias is DecodeKeys without allocating: the message's extensions
// are appended to exts[:0] (grown only when it is short) and their values
// are b's own bytes, not copies. The message is valid only while neither
// b nor exts is used again: a receive loop that reads the next datagram
// into b must first copy what it keeps (Message.Clone, or the values
// themselves).
func DecodeAlias(b []byte, exts []Ext, keys ...[]byte) (Message, error) {
	return decode(b, exts[:0], false, keys)
}

// Clone returns m with extensions of its own: a copy that outlives the
// buffers a DecodeAlias message aliases.
func (m Message) Clone() Message {
	if len(m.Ext) == 0 {
		return m
	}
	total := 0
	for _, e := range m.Ext {
		total += len(e.Value)
	}
	exts := make([]Ext, len(m.Ext))
	vals := make([]byte, 0, total)
	for i, e := range m.Ext {
		exts[i].Type = e.Type
		if len(e.Value) > 0 {
			at := len(vals)
			vals = append(vals, e.Value...)
			exts[i].Value = vals[at:len(vals):len(vals)]
		}
	}
	m.Ext = exts
	return m
}

// decode is DecodeKeys (copy: the extensions' values are copies, in a
// slice made for them) and DecodeAlias (exts is appended to, the values
// alias b).
func decode(b []byte, exts []Ext, copyValues bool, keys [][]byte) (Message, error) {
	var m Message
	if len(b) < Size {
		return m, fmt.Errorf("%w: %d bytes, want at least %d", ErrMalformed, len(b), Size)
	}
	if [4]byte(b[0:4]) != magic {
		return m, fmt.Errorf("%w: bad magic %x", ErrMalformed, b[0:4])
	}
	m.Version = b[4]
	switch m.Version {
	case Version1:
		if len(b) != Size {
			return m, fmt.Errorf("%w: %d bytes, a version-1 message has %d", ErrMalformed, len(b), Size)
		}
		if b[6] != 0 || b[7] != 0 {
			return m, fmt.Errorf("%w: reserved bytes set", ErrMalformed)
		}
		if err := checkZero(b[56:64]); err != nil {
			return m, err
		}
	case Version2:
		if len(b) > MaxSize {
			return m, fmt.Errorf("%w: %d bytes, at most %d", ErrMalformed, len(b), MaxSize)
		}
		flags := b[6]
		if flags&^knownFlags != 0 || b[7] != 0 {
			return m, fmt.Errorf("%w: unknown flags %#x", ErrMalformed, flags&^knownFlags)
		}
		if err := checkZero(b[58:64]); err != nil {
			return m, err
		}
		extLen := int(binary.BigEndian.Uint16(b[56:]))
		m.Tagged = flags&FlagAuthenticated != 0
		want := Size + extLen
		if m.Tagged {
			want += TagSize
		}
		if len(b) != want {
			return m, fmt.Errorf("%w: %d bytes, header says %d", ErrMalformed, len(b), want)
		}
		exts, err := decodeExt(b[Size:Size+extLen], exts, copyValues)
		if err != nil {
			return m, err
		}
		m.Ext = exts
	default:
		return m, fmt.Errorf("%w: version %d, this rdmad speaks 1 and 2", ErrMalformed, m.Version)
	}
	m.Type = b[5]
	if m.Type != TypeQuery && m.Type != TypeAnswer && !IsBW(m.Type) {
		return m, fmt.Errorf("%w: type %d", ErrMalformed, m.Type)
	}
	if b[18] != 0 || b[19] != 0 || b[30] != 0 || b[31] != 0 {
		return m, fmt.Errorf("%w: reserved bytes set", ErrMalformed)
	}
	m.Nonce = binary.BigEndian.Uint64(b[8:])
	m.Index, m.Count = b[16], b[17]
	m.QPN = binary.BigEndian.Uint32(b[20:])
	m.QKey = binary.BigEndian.Uint32(b[24:])
	m.LID = binary.BigEndian.Uint16(b[28:])
	copy(m.GID[:], b[32:48])
	m.NodeID = binary.BigEndian.Uint64(b[48:])
	switch {
	case m.QPN > 0xffffff:
		return m, fmt.Errorf("%w: QPN %#x has more than 24 bits", ErrMalformed, m.QPN)
	case m.Type == TypeAnswer && m.Count > 0 && m.Index >= m.Count:
		return m, fmt.Errorf("%w: port %d of %d", ErrMalformed, m.Index, m.Count)
	case IsBW(m.Type):
		// checkBW (below) judges the bandwidth messages' header.
	case m.Type == TypeQuery && m.Count == 0:
		return m, fmt.Errorf("%w: query from a node without a probe port", ErrMalformed)
	case (m.Type == TypeQuery || m.Count > 0) && (m.QPN == 0 || m.QKey&0x80000000 != 0):
		return m, fmt.Errorf("%w: QPN %#x qkey %#x cannot be a probe QP", ErrMalformed, m.QPN, m.QKey)
	}
	if err := checkBW(&m); err != nil {
		return m, err
	}
	// A fingerprint is judged with the message: one with a string that is
	// not printable text makes the whole message malformed, so that it is
	// counted as such and nothing of it is kept.
	for _, e := range m.Ext {
		if e.Type == ExtFingerprint {
			if err := CheckFingerprint(e.Value); err != nil {
				return m, err
			}
		}
	}
	if err := checkFlows(&m); err != nil {
		return m, err
	}
	if !m.Tagged {
		return m, nil
	}
	tried := false
	body := b[:len(b)-TagSize]
	for _, key := range keys {
		if len(key) == 0 {
			continue
		}
		tried = true
		h := hmac.New(sha256.New, key)
		h.Write(body)
		if hmac.Equal(h.Sum(nil), b[len(body):]) {
			m.Authenticated = true
			return m, nil
		}
	}
	if tried {
		return m, ErrBadTag
	}
	return m, nil
}

func checkZero(b []byte) error {
	for _, c := range b {
		if c != 0 {
			return fmt.Errorf("%w: reserved bytes set", ErrMalformed)
		}
	}
	return nil
}

// decodeExt parses the extension area. Every extension must fit exactly;
// a critical type is refused unless this version knows it (ExtBandwidth,
// which checkBW allows only in bandwidth messages). The area is checked and
// counted first, so that the extensions take one slice and their values
// one more, whatever their number (copyValues: the message is kept, so
// the values are copies, each capped to its own length). Without
// copyValues the extensions are appended to out and the values are b's
// bytes (DecodeAlias): nothing is allocated while out has room.
func decodeExt(b []byte, out []Ext, copyValues bool) ([]Ext, error) {
	count, total := 0, 0
	for rest := b; len(rest) > 0; {
		if len(rest) < 4 {
			return nil, fmt.Errorf("%w: %d stray bytes after the extensions", ErrMalformed, len(rest))
		}
		t := binary.BigEndian.Uint16(rest)
		n := int(binary.BigEndian.Uint16(rest[2:]))
		if 4+n > len(rest) {
			return nil, fmt.Errorf("%w: extension %#x of %d bytes overruns the area", ErrMalformed, t, n)
		}
		if t&ExtCritical != 0 && t != ExtBandwidth {
			return nil, fmt.Errorf("%w: critical extension %#x is unknown to this rdmad; upgrade it", ErrMalformed, t)
		}
		count, total = count+1, total+n
		rest = rest[4+n:]
	}
	if count == 0 {
		return nil, nil
	}
	var vals []byte
	if copyValues {
		out = make([]Ext, 0, count)
		vals = make([]byte, 0, total)
	}
	for len(b) > 0 {
		t := binary.BigEndian.Uint16(b)
		n := int(binary.BigEndian.Uint16(b[2:]))
		var v []byte
		switch {
		case n > 0 && copyValues:
			at := len(vals)
			vals = append(vals, b[4:4+n]...)
			v = vals[at : at+n : at+n]
		case n > 0:
			v = b[4 : 4+n : 4+n]
		}
		out = append(out, Ext{Type: t, Value: v})
		b = b[4+n:]
	}
	return out, nil
}
