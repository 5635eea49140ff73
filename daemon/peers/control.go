package peers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/rdmad/rdmad/daemon/peers/wire"
	"github.com/rdmad/rdmad/verbs/peer"
)

// A Control is the control endpoint: one UDP socket that answers other
// nodes' queries (only from allowed sources) and sends this node's queries,
// whose answers it hands to OnAnswer.
type Control struct {
	conn *net.UDPConn
	opts ControlOptions

	allow atomic.Pointer[allowList]

	n *ControlCounters
}

// ControlCounters count a control endpoint's messages. Endpoints that
// replace each other (a changed [probe] port) can share one.
type ControlCounters struct {
	malformed, refused, answered atomic.Uint64
}

// ControlOptions configure a Control.
type ControlOptions struct {
	// NodeID is sent in every message.
	NodeID uint64
	// Ports returns the local probe ports to advertise.
	Ports func() []peer.LocalPort
	// Admit lets a querier's port be answered by local port key.
	Admit func(local string, src peer.Endpoint, until time.Time) error
	// AdmitFor is how long an admission lasts; queriers refresh it.
	AdmitFor time.Duration
	// OnAnswer receives answers to this node's queries; it must not block.
	OnAnswer func(from netip.AddrPort, m wire.Message)
	// Counters, if set, are counted into (else the Control has its own).
	Counters *ControlCounters
}

// An allowList is who may query: configured peers' addresses and CIDRs.
type allowList struct {
	addrs map[netip.Addr]bool
	nets  []netip.Prefix
}

func (a *allowList) allows(ip netip.Addr) bool {
	ip = ip.Unmap()
	if a.addrs[ip] {
		return true
	}
	for _, p := range a.nets {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// ListenControl opens the control endpoint on addr ("[::]:18516").
func ListenControl(addr string, opts ControlOptions) (*Control, error) {
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("peers: control endpoint %s: %w", addr, err)
	}
	conn, err := net.ListenUDP("udp", ua)
	if err != nil {
		return nil, fmt.Errorf("peers: listen on control endpoint %s: %w; is another rdmad running, or change [probe] port", addr, err)
	}
	c := &Control{conn: conn, opts: opts, n: opts.Counters}
	if c.n == nil {
		c.n = &ControlCounters{}
	}
	c.allow.Store(&allowList{})
	return c, nil
}

// Addr returns the local address.
func (c *Control) Addr() netip.AddrPort { return c.conn.LocalAddr().(*net.UDPAddr).AddrPort() }

// Close closes the socket; Serve returns.
func (c *Control) Close() error { return c.conn.Close() }

// SetAllow replaces who may query.
func (c *Control) SetAllow(addrs []netip.Addr, nets []netip.Prefix) {
	a := &allowList{addrs: make(map[netip.Addr]bool, len(addrs)), nets: nets}
	for _, ip := range addrs {
		a.addrs[ip.Unmap()] = true
	}
	c.allow.Store(a)
}

// Counters returns malformed, refused and answered message counts.
func (c *Control) Counters() (malformed, refused, answered uint64) {
	return c.n.malformed.Load(), c.n.refused.Load(), c.n.answered.Load()
}

// Query sends m (a TypeQuery) to to.
func (c *Control) Query(to netip.AddrPort, m wire.Message) error {
	m.Type = wire.TypeQuery
	m.NodeID = c.opts.NodeID
	b := m.Encode()
	if _, err := c.conn.WriteToUDPAddrPort(b[:], to); err != nil {
		return fmt.Errorf("peers: query control endpoint %s: %w", to, err)
	}
	return nil
}

// Serve reads messages until ctx is done or the socket is closed. A
// malformed message, or a query from a source that is not allowed, is
// dropped and counted; nothing a peer sends can stop the loop.
func (c *Control) Serve(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { c.conn.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	// One byte more than a message, so that an oversized datagram is seen
	// as oversized rather than silently truncated into a valid one.
	buf := make([]byte, wire.Size+1)
	for {
		n, from, err := c.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("peers: read control endpoint: %w", err)
		}
		m, err := wire.Decode(buf[:n])
		if err != nil {
			c.n.malformed.Add(1)
			continue
		}
		if m.Type == wire.TypeAnswer {
			// Answers are only taken from addresses this node queried;
			// the manager matches them by nonce and source.
			if c.opts.OnAnswer != nil {
				c.opts.OnAnswer(from, m)
			}
			continue
		}
		if !c.allow.Load().allows(from.Addr()) {
			c.n.refused.Add(1)
			continue
		}
		c.answer(from, m)
	}
}

func (c *Control) answer(from netip.AddrPort, q wire.Message) {
	ports := c.opts.Ports()
	a := wire.Message{Type: wire.TypeAnswer, Nonce: q.Nonce, NodeID: c.opts.NodeID}
	if len(ports) > 0 {
		p := ports[int(q.Index)%len(ports)]
		src := peer.Endpoint{GID: q.GID, QPN: q.QPN, QKey: q.QKey, LID: q.LID}
		if err := c.opts.Admit(p.Key, src, time.Now().Add(c.opts.AdmitFor)); err != nil {
			c.n.refused.Add(1)
			return
		}
		a.Index, a.Count = uint8(int(q.Index)%len(ports)), uint8(min(len(ports), 255))
		a.QPN, a.QKey, a.LID, a.GID = p.QPN, p.QKey, p.LID, p.GID
	}
	b := a.Encode()
	if _, err := c.conn.WriteToUDPAddrPort(b[:], from); err == nil {
		c.n.answered.Add(1)
	}
}
