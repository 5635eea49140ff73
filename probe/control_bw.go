package probe

import (
	"net/netip"
	"time"

	"github.com/rdmad/rdmad/probe/wire"
)

// serveBW admits a bandwidth test message and hands it to the Bandwidth
// handler, whose answer it sends. A bandwidth test makes the node allocate
// a QP and memory and carry traffic, so the message must come from an
// allowed source, and when the node has a fleet key it must carry a valid
// tag whatever [probe] auth says (prefer is for probes during a rollout,
// not for tests); then it takes a token of its source's admission rate.
// An answer (which only a requester's own socket expects) is refused
// here. out is the buffer to encode the answer in; serveBW returns it.
func (c *Control) serveBW(out []byte, from netip.AddrPort, m wire.Message, a *Auth) []byte {
	switch {
	case m.Type == wire.TypeBWAnswer || c.opts.Bandwidth == nil:
		c.n.refused.Add(1)
		return out
	case !c.allow.Load().allows(from.Addr()):
		c.n.refused.Add(1)
		return out
	case len(a.control) > 0 && !m.Authenticated:
		c.n.unauthenticated.Add(1)
		return out
	case !c.rate.allow(from.Addr(), time.Now()):
		c.n.rateLimited.Add(1)
		return out
	}
	ans, ok := c.opts.Bandwidth(from, m)
	if !ok {
		return out
	}
	// The answer is a bandwidth message of the request's size: the
	// endpoint amplifies nothing.
	ans.Version = wire.Version2
	out, err := ans.Append(out, a.control)
	if err != nil {
		return out[:0]
	}
	if err := c.sock.sendTo(out, from); err == nil {
		c.n.answered.Add(1)
	}
	return out
}
