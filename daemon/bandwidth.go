package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/service"
	"github.com/rdmad/rdmad/probe"
	"github.com/rdmad/rdmad/probe/wire"
	"github.com/rdmad/rdmad/verbs/bw"
)

// bwConf is what a bandwidth test this node runs needs of the
// configuration: the peers' control port and the control key. The main
// loop sets it; API requests read it.
type bwConf struct {
	port int
	key  []byte
	// others are the control keys of the rotation's other keys: an
	// answer tagged with one is taken too.
	others [][]byte
}

// bandwidthParts are the peer runner's bandwidth tests: the node (its one
// test slot, the responder the control endpoint hands requests to) and the
// configuration in force.
type bandwidthParts struct {
	node *bw.Node
	conf atomic.Pointer[bwConf]
}

// newBandwidth makes the bandwidth tests of the peer runner r.
func newBandwidth(d *Daemon, r *peerRunner) *bandwidthParts {
	b := &bandwidthParts{}
	b.node = bw.New(bw.Config{NodeID: nodeID(), TrafficClass: r.class.of, Logger: d.log.With("component", "peers"),
		// On InfiniBand a test connects only to a port the peer
		// announced in its answers (r.mgr is set before anything can
		// ask: before the control endpoint runs and the API finds r).
		PeerPorts: func(a netip.Addr) []bw.PeerPort {
			eps := r.mgr.AnnouncedPorts(a)
			out := make([]bw.PeerPort, 0, len(eps))
			for _, e := range eps {
				out = append(out, bw.PeerPort{GID: e.GID, LID: e.LID})
			}
			return out
		},
		OnChange: func() {
			// Keyed: a burst of refusals is one update of the state.
			d.mail.post("bandwidth", func(s *apitype.Snapshot) {
				st := b.node.Status()
				s.Bandwidth = &st
			})
		}})
	return b
}

// set puts [probe] bandwidth, port and the fleet key in force (at start and
// at every reload). Runs on the main loop.
func (b *bandwidthParts) set(cfg *config.Config, auth probe.Auth) {
	b.node.SetEnabled(cfg.Probe.Bandwidth)
	c := &bwConf{port: cfg.Probe.Port, key: wire.ControlKey(auth.Key)}
	if len(auth.Key) > 0 {
		for _, k := range auth.Others {
			c.others = append(c.others, wire.ControlKey(k))
		}
	}
	b.conf.Store(c)
}

// Bandwidth serves POST /v1/bw and D-Bus Bandwidth: an RC bandwidth test
// from this node to another rdmad node, through its control endpoint.
func (b backend) Bandwidth(ctx context.Context, req service.BandwidthRequest) (apitype.BandwidthResult, error) {
	r := b.d.peers.Load()
	if r == nil || r.bw == nil {
		return apitype.BandwidthResult{}, errors.New("bandwidth tests go through the peer probes' control endpoint, which is not running; configure [[peer]] entries with [probe] peers = true and check `rdmactl status` for the peers component")
	}
	conf := r.bw.conf.Load()
	if conf == nil {
		return apitype.BandwidthResult{}, errors.New("bandwidth tests are not set up yet; try again in a moment")
	}
	op, err := wire.ParseBWOp(req.Op)
	if err != nil {
		return apitype.BandwidthResult{}, err
	}
	addr, err := resolvePeer(ctx, req.Peer)
	if err != nil {
		return apitype.BandwidthResult{}, err
	}
	// The test takes its duration, the connection's setup and the
	// drain; the caller's deadline bounds it too.
	ctx, cancel := context.WithTimeout(ctx, req.Duration+30*time.Second)
	defer cancel()
	return r.bw.node.Run(ctx, bw.Request{Peer: netip.AddrPortFrom(addr, uint16(conf.port)), Name: req.Peer,
		Op: op, Size: req.Size, Duration: req.Duration, ControlKey: conf.key, OtherKeys: conf.others})
}

// resolvePeer returns the address of name (an IP address or a host name).
func resolvePeer(ctx context.Context, name string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(name); err == nil {
		return a.Unmap(), nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", name)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("bandwidth test: cannot resolve %s: %w; give its address", name, err)
	}
	if len(ips) == 0 {
		return netip.Addr{}, fmt.Errorf("bandwidth test: %s has no address; give its address", name)
	}
	return ips[0].Unmap(), nil
}
