package probe

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
)

// The resolver part looks host names up off the loop, at most four at
// once; Run waits for the lookups (wg) before it returns.
type resolver struct {
	results chan resolution
	running int
	wg      sync.WaitGroup
}

func newResolver() resolver { return resolver{results: make(chan resolution, 64)} }

type resolution struct {
	name string
	addr netip.Addr
	err  error
}

// resolve looks a host name up without blocking the loop; at most four
// lookups run at once.
func (m *Manager) resolve(ctx context.Context, p *mpeer) {
	if m.resolver.running >= 4 {
		return
	}
	m.resolver.running++
	name := p.spec.Name
	m.resolver.wg.Add(1)
	go func() {
		defer m.resolver.wg.Done()
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		ips, err := m.opts.Lookup(rctx, name)
		r := resolution{name: name, err: err}
		if err == nil && len(ips) > 0 {
			r.addr = ips[0].Unmap()
		} else if err == nil {
			r.err = errors.New("no address")
		}
		select {
		case m.resolver.results <- r:
		case <-ctx.Done():
		}
	}()
}

func (m *Manager) onResolved(r resolution) {
	m.resolver.running--
	p := m.peers.byName[r.name]
	if p == nil {
		return
	}
	now := time.Now()
	if r.err != nil {
		m.setPeerStateApart(p, apitype.PeerDown, fmt.Sprintf("cannot resolve %s: %v; fix the name or use an address", r.name, r.err), now)
		// Ask again after 1, 2, 4 ... intervals, at most every resolve
		// interval: a name that does not resolve must not cost a lookup
		// per probe interval, for every such peer.
		w := p.w()
		w.lookupFails++
		p.setDue(now.Add(min(m.cfg.Interval<<min(w.lookupFails-1, 16), max(m.cfg.Resolve, m.cfg.Interval))))
		m.sched.due.fix(p)
		return
	}
	if p.addr != r.addr {
		m.ann.stale = true // its ports go under the new address
	}
	m.peers.setAddr(p, r.addr)
	if p.rare != nil {
		p.rare.lookupFails = 0
	}
	m.control.allowStale = true
	p.setDue(time.Now())
	m.sched.due.fix(p)
}
