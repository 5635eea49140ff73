package probe

import (
	"cmp"
	"net/netip"
	"slices"
	"sync"

	"github.com/rdmad/rdmad/internal/gid"
)

// An AnnouncedPort is an RDMA port a peer gave in its answer to this
// node's query: its GID and LID (the QPs it probes with change with every
// restart of the peer; the ports do not).
type AnnouncedPort struct {
	GID gid.GID
	LID uint16 // InfiniBand only
}

// announced holds, per peer address, the RDMA ports the peer gave in its
// answers to this node's queries: answers come only from the exact address
// and port queried and carry this node's nonce, so an off-path spoofer
// cannot put a port here. A bandwidth test on InfiniBand, where an address
// cannot be told from a GID, connects only to a port its peer announced
// this way (verbs/bw).
//
// It is made from the peer table (the resolved paths of the selected
// peers), at the end of a pass in which a path's port or its resolution,
// a peer's address or the selection changed (stale), as one array sorted by
// address: 48 bytes a peer port, where a map of each address's list of
// endpoints took about 140 a peer (docs/PROBES.md, "Memory per peer"). The
// ports change at a peer's first answers and when its RDMA ports do, not
// with its QPs. It has its own lock: the bandwidth tests read it from other
// goroutines than Run's.
type announced struct {
	mu  sync.Mutex
	tab []annEntry // sorted by address, then GID and LID; no duplicates
	// stale: the table is made again at the end of the pass (Run's).
	stale bool
}

// An annEntry is one port of the peer at addr.
type annEntry struct {
	addr netip.Addr
	port AnnouncedPort
}

func (e annEntry) compare(f annEntry) int {
	if c := e.addr.Compare(f.addr); c != 0 {
		return c
	}
	if c := slices.Compare(e.port.GID[:], f.port.GID[:]); c != 0 {
		return c
	}
	return cmp.Compare(e.port.LID, f.port.LID)
}

// updateAnnounced makes the table again from the peer table when it is
// stale: every resolved path's port under its peer's address.
func (m *Manager) updateAnnounced() {
	if !m.ann.stale {
		return
	}
	m.ann.stale = false
	n := 0
	for _, p := range m.peers.byName {
		if p.addr.IsValid() {
			for _, pa := range p.paths {
				if pa.resolved {
					n++
				}
			}
		}
	}
	tab := make([]annEntry, 0, n)
	for _, p := range m.peers.byName {
		if !p.addr.IsValid() {
			continue
		}
		addr := p.addr.Unmap()
		for _, pa := range p.paths {
			if pa.resolved {
				tab = append(tab, annEntry{addr, AnnouncedPort{GID: pa.remote.GID, LID: pa.remote.LID}})
			}
		}
	}
	slices.SortFunc(tab, annEntry.compare)
	tab = slices.CompactFunc(tab, func(a, b annEntry) bool { return a == b })
	m.ann.mu.Lock()
	m.ann.tab = tab
	m.ann.mu.Unlock()
}

// AnnouncedPorts returns the RDMA ports the peer at addr announced in its
// answers to this node's queries (nil: none, or not a peer), as of the
// end of the manager's last pass. Safe for concurrent use.
func (m *Manager) AnnouncedPorts(addr netip.Addr) []AnnouncedPort {
	addr = addr.Unmap()
	m.ann.mu.Lock()
	defer m.ann.mu.Unlock()
	tab := m.ann.tab
	i, _ := slices.BinarySearchFunc(tab, addr, func(e annEntry, a netip.Addr) int { return e.addr.Compare(a) })
	var out []AnnouncedPort
	for ; i < len(tab) && tab[i].addr == addr; i++ {
		out = append(out, tab[i].port)
	}
	return out
}
