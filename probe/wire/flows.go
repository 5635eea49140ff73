package wire

import (
	"encoding/binary"
	"fmt"
)

// ExtFlows lists a query sender's further probe flows and, in the answer,
// how many of them the responder admitted (non-critical: an rdmad that
// predates flows skips it, admits only the header's QPN and answers
// without it, so the querier probes that peer on its first flow only).
//
// In a query: the QPNs of the sender's flows 1, 2, ... of the queried
// port (flow 0 is the header's QPN), 3 bytes each, big-endian, at most
// MaxFlowQPNs, none 0, none the header's QPN, no two alike. In an answer:
// one byte, how many of the query's QPNs, from the first on, the
// responder admitted. At most once in a message; anything else makes the
// message malformed.
const ExtFlows = 0x0006

// MaxFlowQPNs bounds the further flows a query may name: [probe] flows is
// at most 16, flow 0 being the header's.
const MaxFlowQPNs = 15

// FlowsExt returns the query extension naming qpns (flows 1 on).
func FlowsExt(qpns []uint32) Ext {
	v := make([]byte, 0, 3*len(qpns))
	for _, q := range qpns {
		v = AppendFlowQPN(v, q)
	}
	return Ext{Type: ExtFlows, Value: v}
}

// AppendFlowQPN appends the wire form of one QPN of a query's flows
// extension to b (FlowsExt's value, one QPN at a time, for a value in a
// buffer of the caller's).
func AppendFlowQPN(b []byte, qpn uint32) []byte {
	return append(b, byte(qpn>>16), byte(qpn>>8), byte(qpn))
}

// FlowsAcceptedExt returns the answer extension saying that n flows of the
// query were admitted.
func FlowsAcceptedExt(n int) Ext {
	return Ext{Type: ExtFlows, Value: []byte{FlowsAcceptedValue(n)}}
}

// FlowsAcceptedValue is the one byte of FlowsAcceptedExt's value.
func FlowsAcceptedValue(n int) byte { return byte(min(max(n, 0), MaxFlowQPNs)) }

// QueryFlows returns the further flows' QPNs a query names (none: nil).
// The message passed Decode, which checked them.
func QueryFlows(m Message) []uint32 {
	if _, ok := AppendQueryFlows(nil, m); !ok {
		return nil
	}
	out, _ := AppendQueryFlows(make([]uint32, 0, MaxFlowQPNs), m)
	return out
}

// AppendQueryFlows appends the further flows' QPNs a query names to dst
// and reports whether it names any (QueryFlows into the caller's room).
func AppendQueryFlows(dst []uint32, m Message) ([]uint32, bool) {
	for _, e := range m.Ext {
		if e.Type == ExtFlows {
			for b := e.Value; len(b) >= 3; b = b[3:] {
				dst = append(dst, uint32(b[0])<<16|uint32(b[1])<<8|uint32(b[2]))
			}
			return dst, true
		}
	}
	return dst, false
}

// FlowsAccepted returns how many further flows an answer says were
// admitted, and false when it does not say (an rdmad that predates flows,
// or a version-1 answer): then none were.
func FlowsAccepted(m Message) (int, bool) {
	for _, e := range m.Ext {
		if e.Type == ExtFlows && len(e.Value) == 1 {
			return int(e.Value[0]), true
		}
	}
	return 0, false
}

// checkFlows judges a decoded message's flows extension (see ExtFlows).
func checkFlows(m *Message) error {
	seen := false
	for _, e := range m.Ext {
		if e.Type != ExtFlows {
			continue
		}
		if seen {
			return fmt.Errorf("%w: flows extension twice", ErrMalformed)
		}
		seen = true
		switch m.Type {
		case TypeQuery:
			n := len(e.Value) / 3
			if len(e.Value)%3 != 0 || n == 0 || n > MaxFlowQPNs {
				return fmt.Errorf("%w: flows extension of %d bytes: want 3 per QPN, 1 to %d QPNs", ErrMalformed, len(e.Value), MaxFlowQPNs)
			}
			var qpns [MaxFlowQPNs]uint32
			for i := range n {
				q := uint32(e.Value[3*i])<<16 | uint32(binary.BigEndian.Uint16(e.Value[3*i+1:]))
				if q == 0 || q == m.QPN {
					return fmt.Errorf("%w: flow QPN %#x", ErrMalformed, q)
				}
				for _, o := range qpns[:i] {
					if o == q {
						return fmt.Errorf("%w: flow QPN %#x twice", ErrMalformed, q)
					}
				}
				qpns[i] = q
			}
		case TypeAnswer:
			if len(e.Value) != 1 || e.Value[0] > MaxFlowQPNs {
				return fmt.Errorf("%w: flows answer of %d bytes", ErrMalformed, len(e.Value))
			}
		default:
			return fmt.Errorf("%w: flows extension in a message of type %d", ErrMalformed, m.Type)
		}
	}
	return nil
}
