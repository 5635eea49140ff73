package probe

import (
	"net/netip"
	"slices"
	"sync"

	"github.com/rdmad/rdmad/probe/ud"
)

// maxAnnounced bounds the addresses announced holds: far more than
// max_peers ever selects; past it the table starts again (the peers'
// next answers fill it).
const maxAnnounced = 1 << 16

// announced holds, per peer address, the RDMA ports (GID and LID) the
// peer gave in its answers to this node's queries: answers come only from
// the exact address and port queried and carry this node's nonce, so an
// off-path spoofer cannot put a port here. A bandwidth test on
// InfiniBand, where an address cannot be told from a GID, connects only
// to a port its peer announced this way (verbs/bw). It has its own lock:
// the bandwidth tests read it from other goroutines than Run's.
type announced struct {
	mu sync.Mutex
	by map[netip.Addr][]ud.Endpoint
	// buf is where announce gathers a peer's ports (Run's goroutine).
	buf []ud.Endpoint
}

func (a *announced) set(addr netip.Addr, eps []ud.Endpoint) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(eps) == 0 {
		delete(a.by, addr)
		return
	}
	if a.by == nil || len(a.by) >= maxAnnounced {
		a.by = map[netip.Addr][]ud.Endpoint{}
	}
	a.by[addr] = eps
}

// announce records the ports p's resolved paths probe, under the
// address its answers come from.
func (m *Manager) announce(p *mpeer, from netip.Addr) {
	eps := m.ann.buf[:0]
	for _, pa := range p.paths {
		if pa.resolved && !slices.Contains(eps, pa.remote) {
			eps = append(eps, pa.remote)
		}
	}
	m.ann.buf = eps
	m.ann.update(from.Unmap(), eps)
}

// update is set with a copy of eps, unless addr has those ports already:
// every control answer announces its peer's ports, which almost never
// change.
func (a *announced) update(addr netip.Addr, eps []ud.Endpoint) {
	a.mu.Lock()
	old, ok := a.by[addr]
	same := ok && len(eps) > 0 && slices.Equal(old, eps) && len(a.by) < maxAnnounced
	a.mu.Unlock()
	if !same {
		a.set(addr, slices.Clone(eps))
	}
}

// AnnouncedPorts returns the RDMA ports the peer at addr announced in its
// answers to this node's queries (nil: none, or not a peer). Safe for
// concurrent use.
func (m *Manager) AnnouncedPorts(addr netip.Addr) []ud.Endpoint {
	m.ann.mu.Lock()
	defer m.ann.mu.Unlock()
	return slices.Clone(m.ann.by[addr.Unmap()])
}
