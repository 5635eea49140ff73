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

// newBandwidth makes the bandwidth tests of the peer runner r. Its node
// shares the daemon's test slot with the loopback tests.
func newBandwidth(d *Daemon, r *peerRunner) *bandwidthParts {
	b := &bandwidthParts{}
	b.node = bw.New(bw.Config{NodeID: nodeID(), TrafficClass: r.class.of, Logger: d.log.With("component", "peers"), Slot: d.bwSlot,
		// On InfiniBand a test connects only to a port the peer
		// announced in its answers (r.mgr is set before anything can
		// ask: before the control endpoint runs and the API finds r).
		PeerPorts: func(a netip.Addr) []bw.PeerPort {
			ports := r.mgr.AnnouncedPorts(a)
			out := make([]bw.PeerPort, 0, len(ports))
			for _, e := range ports {
				out = append(out, bw.PeerPort{GID: e.GID, LID: e.LID})
			}
			return out
		},
		OnChange: func() {
			// Keyed: a burst of refusals is one update of the state.
			d.mail.post("bandwidth", func(s *apitype.Snapshot) { s.Bandwidth = d.bandwidthStatus(b.node) })
		}})
	return b
}

// A loopbackTests is the daemon's loopback bandwidth tests (rdmactl bw
// --loopback): a node of its own, which runs whether or not the peer
// probes do and keeps each port's last result for the verdict, in the
// daemon's one test slot (bwSlot) with the peer runner's tests.
type loopbackTests struct {
	node *bw.Node
}

// newLoopbackTests makes d's loopback tests; d.bwSlot is set.
func newLoopbackTests(d *Daemon) *loopbackTests {
	l := &loopbackTests{}
	l.node = bw.New(bw.Config{NodeID: nodeID(), Logger: d.log.With("component", "bandwidth"), Slot: d.bwSlot,
		// The peer probes' traffic class of the port while they run,
		// so that a loopback test measures the class the jobs use.
		TrafficClass: func(dev string, port int) uint8 {
			if r := d.peers.Load(); r != nil {
				return r.class.of(dev, port)
			}
			return 0
		},
		OnChange: func() {
			d.mail.post("bandwidth", func(s *apitype.Snapshot) {
				var peers *bw.Node
				if r := d.peers.Load(); r != nil && r.bw != nil {
					peers = r.bw.node
				}
				s.Bandwidth = d.bandwidthStatus(peers)
			})
		}})
	return l
}

// bandwidthStatus is the status's bandwidth part: peers' (the peer
// runner's node, nil while the peer probes do not run) with the loopback
// results. Nil while neither has anything to say, as before loopback
// tests: the part is absent without peer probes.
func (d *Daemon) bandwidthStatus(peers *bw.Node) *apitype.BandwidthStatus {
	var st apitype.BandwidthStatus
	if peers != nil {
		st = peers.Status()
	}
	if d.loopback != nil {
		st.Loopback = d.loopback.node.Status().Loopback
	}
	if peers == nil && len(st.Loopback) == 0 {
		return nil
	}
	if st.Refused == nil {
		st.Refused = map[string]uint64{}
	}
	return &st
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
	if req.Loopback {
		return b.loopbackBandwidth(ctx, req)
	}
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
	res, err := r.bw.node.Run(ctx, bw.Request{Peer: netip.AddrPortFrom(addr, uint16(conf.port)), Name: req.Peer,
		Op: op, Size: req.Size, Duration: req.Duration, QPs: req.QPs, ControlKey: conf.key, OtherKeys: conf.others})
	return res, clockHint(err, b.d.store.Load(), addr, req.Peer)
}

// clockHint adds to a peer's refusal of a test as stale what the probes
// measured of its clock (docs/PROBES.md, "Clock offset"): with a fleet key
// a request's time must be within wire.MaxBWSkew of the responder's clock,
// and the refusal alone says neither which clock is off nor by how much (a
// clock stepped an hour: the tagged clock step drill, docs/TESTING.md).
// Other errors, a peer whose clock was not measured and one measured
// within the window are returned as they are.
func clockHint(err error, s *apitype.Snapshot, addr netip.Addr, name string) error {
	var re *bw.RefusedError
	if !errors.As(err, &re) || re.Status != wire.BWStale || s == nil {
		return err
	}
	for _, p := range s.Peers.Peers {
		if (p.Name != name && p.Address != addr.String()) || p.ClockSamples == 0 {
			continue
		}
		off, dir := p.ClockOffset, "ahead of"
		if off < 0 {
			off, dir = -off, "behind"
		}
		// An offset within the window says nothing: the probes measure
		// it every 15 s, so a clock stepped just now still reads as it
		// was.
		if off-p.ClockOffsetError <= wire.MaxBWSkew {
			return err
		}
		return fmt.Errorf("%w; the probes measure its clock %v %s this node's (±%v): set the wrong one right (NTP) and test again", err, off.Round(time.Millisecond), dir, p.ClockOffsetError.Round(time.Millisecond))
	}
	return err
}

// loopbackBandwidth runs a loopback test of one of this node's ports
// (POST /v1/bw?loopback=), and says whether it reached the port's
// threshold ([health] min_loopback_gbps, min_loopback_share).
func (b backend) loopbackBandwidth(ctx context.Context, req service.BandwidthRequest) (apitype.BandwidthResult, error) {
	l := b.d.loopback
	if l == nil {
		return apitype.BandwidthResult{}, errors.New("loopback bandwidth tests are not set up yet; try again in a moment")
	}
	op, err := wire.ParseBWOp(req.Op)
	if err != nil {
		return apitype.BandwidthResult{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, req.Duration+30*time.Second)
	defer cancel()
	res, err := l.node.RunLoopback(ctx, bw.LoopbackRequest{Device: req.Device, Port: req.Port, Op: op, Size: req.Size,
		Duration: req.Duration, QPs: req.QPs})
	if err != nil {
		return res, err
	}
	if s := b.d.store.Load(); s != nil {
		for _, dev := range s.Devices {
			for _, p := range dev.Ports {
				if portKey(dev.Name, p.Port) == res.Local {
					res.MinGbps = b.d.health.loopbackThreshold(p)
				}
			}
		}
	}
	res.Low = res.MinGbps > 0 && res.Gbps < res.MinGbps
	return res, nil
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
