// Package wire is the control protocol rdmad nodes use to find each other's
// probe queue pairs: a fixed-size, versioned UDP message. A node asks a peer
// for the QPN, GID and qkey of one of its probe ports and tells it its own,
// so that the peer's responder will answer its probes. docs/PROBES.md
// documents the layout.
//
// Messages never carry memory addresses or rkeys: UD probes need none, and
// nothing of the MR pool is reachable from the network.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Size is the fixed size of every control message.
const Size = 64

// Version is the protocol version this rdmad speaks.
const Version = 1

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

// A Message is one control message.
type Message struct {
	Type uint8
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
}

// ErrMalformed is wrapped by every decoding error.
var ErrMalformed = errors.New("malformed control message")

// Encode returns m's wire form.
func (m *Message) Encode() [Size]byte {
	var b [Size]byte
	copy(b[0:4], magic[:])
	b[4] = Version
	b[5] = m.Type
	binary.BigEndian.PutUint64(b[8:], m.Nonce)
	b[16] = m.Index
	b[17] = m.Count
	binary.BigEndian.PutUint32(b[20:], m.QPN)
	binary.BigEndian.PutUint32(b[24:], m.QKey)
	binary.BigEndian.PutUint16(b[28:], m.LID)
	copy(b[32:48], m.GID[:])
	binary.BigEndian.PutUint64(b[48:], m.NodeID)
	return b
}

// Decode parses one control message. Anything that is not exactly a
// well-formed version-1 message is an error wrapping ErrMalformed; the
// caller drops it and counts it.
func Decode(b []byte) (Message, error) {
	var m Message
	if len(b) != Size {
		return m, fmt.Errorf("%w: %d bytes, want %d", ErrMalformed, len(b), Size)
	}
	if [4]byte(b[0:4]) != magic {
		return m, fmt.Errorf("%w: bad magic %x", ErrMalformed, b[0:4])
	}
	if b[4] != Version {
		return m, fmt.Errorf("%w: version %d, this rdmad speaks %d", ErrMalformed, b[4], Version)
	}
	m.Type = b[5]
	if m.Type != TypeQuery && m.Type != TypeAnswer {
		return m, fmt.Errorf("%w: type %d", ErrMalformed, m.Type)
	}
	if b[6] != 0 || b[7] != 0 || b[18] != 0 || b[19] != 0 || b[30] != 0 || b[31] != 0 {
		return m, fmt.Errorf("%w: reserved bytes set", ErrMalformed)
	}
	for _, c := range b[56:64] {
		if c != 0 {
			return m, fmt.Errorf("%w: reserved bytes set", ErrMalformed)
		}
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
	case m.Type == TypeQuery && m.Count == 0:
		return m, fmt.Errorf("%w: query from a node without a probe port", ErrMalformed)
	case (m.Type == TypeQuery || m.Count > 0) && (m.QPN == 0 || m.QKey&0x80000000 != 0):
		return m, fmt.Errorf("%w: QPN %#x qkey %#x cannot be a probe QP", ErrMalformed, m.QPN, m.QKey)
	}
	return m, nil
}
