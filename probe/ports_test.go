package probe

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/rdmad/rdmad/probe/ud"
)

// portsTransport is a transport whose local ports a test sets.
type portsTransport struct {
	mu    sync.Mutex
	ports []ud.LocalPort
}

func (p *portsTransport) Ports() ([]ud.LocalPort, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ports, nil
}

func (p *portsTransport) set(ports []ud.LocalPort) {
	p.mu.Lock()
	p.ports = ports
	p.mu.Unlock()
}

func (*portsTransport) ProbeBatch(string, []ud.Target) int { return 0 }

func (*portsTransport) Admit(string, ud.Endpoint, netip.Addr, bool, time.Time) error { return nil }

// TestPortsChanged: the transport's ports change (a probe port reopened
// with a new QP when its link came back) and it says so: the next pass
// reads them, though the next publish, which reads them too, is a second
// away. Until then the control endpoint would answer peers' queries with
// the QP of before, and a peer waiting for this node's new QP would wait
// that long (the partition drill, docs/TESTING.md).
func TestPortsChanged(t *testing.T) {
	tr := &portsTransport{}
	old := []ud.LocalPort{{Key: "rxe0/1", Endpoint: ud.Endpoint{QPN: 0x11, QKey: 5}}}
	tr.set(old)
	m, err := New(Options{Transport: tr}, Settings{Interval: time.Second, Timeout: 500 * time.Millisecond, Rotate: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	m.peers.epoch = uint64(now.UnixNano()) / uint64(m.cfg.Rotate) // no reselection: no endpoint here
	m.tick(context.Background(), now)                             // the first publish reads the ports
	if len(m.local) != 1 || m.local[0].QPN != 0x11 {
		t.Fatalf("after the first pass the manager has ports %+v, want the transport's", m.local)
	}
	reopened := []ud.LocalPort{{Key: "rxe0/1", Endpoint: ud.Endpoint{QPN: 0x22, QKey: 5}}}
	tr.set(reopened)
	// Not said: the manager reads them at its next publish only.
	m.tick(context.Background(), now.Add(10*time.Millisecond))
	if m.local[0].QPN != 0x11 {
		t.Fatalf("the ports were read before the next publish without PortsChanged: %+v", m.local)
	}
	m.PortsChanged()
	select {
	case <-m.in.kick:
	default:
		t.Fatalf("PortsChanged did not wake the manager")
	}
	gen := m.localGen
	m.tick(context.Background(), now.Add(20*time.Millisecond))
	if len(m.local) != 1 || m.local[0].QPN != 0x22 || m.localGen == gen || !m.pub.changed {
		t.Fatalf("the pass after PortsChanged: ports %+v (generation %d, was %d), publish pending %v; want the reopened port, a new generation, published", m.local, m.localGen, gen, m.pub.changed)
	}
	if m.in.ports.Load() {
		t.Errorf("the change is still pending after the pass that read it")
	}
}
