package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon/access"
	"github.com/rdmad/rdmad/daemon/api"
	"github.com/rdmad/rdmad/daemon/metrics"
	"github.com/rdmad/rdmad/daemon/state"
	"github.com/rdmad/rdmad/daemon/watch"
	"github.com/rdmad/rdmad/inventory/ethtool"
)

// addSinks registers GET /metrics and GET /v1/watch on the API, starts the
// watch hub and, when [metrics] listen is set, the TCP metrics listener.
// Both run as parts of the daemon (supervise.go). It must run before
// the API serves.
//
// The TCP listener follows [metrics] listen on every reload
// (setMetricsListen).
func (d *Daemon) addSinks() {
	hub := watch.NewHub(d.store, watch.Options{Logger: d.log.With("component", "watch"), Identify: watcherOf})
	opts := metrics.Options{Snapshot: d.store.Load, Fresh: d.freshPeers, SysfsRoot: d.opts.SysfsRoot, DBusRefused: d.busRefused.Refused}
	if root := d.opts.SysfsRoot; root == "" || root == "/" {
		// The pause and discard counters of the RoCE netdevs, read at
		// scrape time (a netdev without them is logged once); not for a
		// fixture tree, whose netdevs are not this host's.
		netStats := &ethtool.Source{Log: d.log.With("component", apitype.ComponentMetrics)}
		opts.NetStats = netStats.Read
	}
	if d.resources != nil {
		// The RDMA objects per device, read at scrape time (bounded, one
		// dump at a time with the API's reads).
		opts.Resources = d.scrapeResources
	}
	col := metrics.NewCollector(opts)
	h, tcp := metrics.Handlers(metrics.NewRegistry(col, true))
	d.api.Handle("/metrics", http.MethodGet, access.Metrics, h)
	d.api.Handle("/v1/watch", http.MethodGet, access.Watch, hub)

	d.parts.Go(hub.Run)

	d.metrics.handler = tcp
	if d.cfg.Metrics.Listen == "" {
		d.setComponent(apitype.ComponentMetrics, apitype.OK, nil)
		return
	}
	d.setMetricsListen(d.cfg.Metrics.Listen)
}

// watcherOf is who sent a GET /v1/watch, for the hub's bounds: the peer's
// credentials and class as the API's listener recorded them at connect.
func watcherOf(r *http.Request) watch.Watcher {
	p := api.PeerFrom(r.Context())
	return watch.Watcher{UID: p.UID, Known: p.Known, PID: p.PID, Admin: api.ClassFrom(r.Context()) == api.ClassAdmin}
}

// metricsTCP is the TCP listener of [metrics] listen. Owned by the main
// loop.
type metricsTCP struct {
	handler http.Handler
	// addr is the configured address of the listener that serves, bound
	// where it listens; both empty when none serves.
	addr, bound string
	// stop stops the serving part (nil when none was started); done is
	// closed when it returned, also after a failure.
	stop func()
	done chan struct{}
	// gen counts the listeners started: a failure reported by an older
	// one is stale and does not touch the component.
	gen uint64
}

// serving reports whether a listener serves.
func (m *metricsTCP) serving() bool {
	if m.stop == nil {
		return false
	}
	select {
	case <-m.done:
		return false
	default:
		return true
	}
}

// stopServing closes the listener and waits for its part to return.
func (m *metricsTCP) stopServing() {
	if m.stop != nil {
		m.stop()
	}
	m.stop, m.addr, m.bound = nil, "", ""
}

// setMetricsListen makes the TCP metrics listener serve on addr ("" for
// none). The new address is bound before the old listener is closed: when
// it cannot be bound, the old one keeps serving and the metrics component
// and the log say why. Runs on the main loop.
func (d *Daemon) setMetricsListen(addr string) {
	m := &d.metrics
	if addr != "" && addr == m.addr && m.serving() {
		// It serves what is configured (again, after a failed move).
		d.setComponent(apitype.ComponentMetrics, apitype.OK, nil)
		return
	}
	if addr == "" {
		if m.serving() {
			d.log.Info("metrics listener closed: [metrics] listen is empty", "address", m.bound)
		}
		m.stopServing()
		d.setComponent(apitype.ComponentMetrics, apitype.OK, nil)
		return
	}
	old := m.bound
	ln, err := metrics.Listen(addr)
	if err != nil && m.serving() && samePort(addr, m.bound) && errors.Is(err, syscall.EADDRINUSE) {
		// The new address overlaps the one in use (127.0.0.1:10879 to
		// 0.0.0.0:10879): it can only be bound once the old listener is
		// closed. If it still cannot, the old address is taken back.
		oldAddr, oldBound := m.addr, m.bound
		m.stopServing()
		if ln, err = metrics.Listen(addr); err != nil {
			if back, berr := net.Listen("tcp", oldBound); berr == nil {
				d.serveMetrics(oldAddr, back)
			} else {
				err = fmt.Errorf("%w; the old address %s could not be taken back either: %v", err, oldBound, berr)
			}
		}
	}
	if err != nil {
		if m.serving() {
			err = fmt.Errorf("%w; metrics are still served on %s (the previous [metrics] listen)", err, m.bound)
		}
		d.log.Error("metrics listener not opened", "address", addr, "err", err)
		d.setComponent(apitype.ComponentMetrics, apitype.Error, err)
		return
	}
	m.stopServing()
	d.serveMetrics(addr, ln)
	if old != "" {
		d.log.Info("serving metrics", "address", m.bound, "previous", old)
	} else {
		d.log.Info("serving metrics", "address", m.bound)
	}
	d.setComponent(apitype.ComponentMetrics, apitype.OK, nil)
}

// serveMetrics serves ln as the listener of the configured address addr,
// as a part a later reload can stop alone.
func (d *Daemon) serveMetrics(addr string, ln net.Listener) {
	m := &d.metrics
	m.gen++
	gen, h, bound := m.gen, m.handler, ln.Addr().String()
	done := make(chan struct{})
	m.addr, m.bound, m.done = addr, bound, done
	m.stop = d.parts.Start(func(ctx context.Context) {
		defer close(done)
		if err := metrics.Serve(ctx, ln, h); err != nil {
			d.log.Error("metrics listener stopped", "address", bound, "err", err)
			now := time.Now()
			d.mail.post("component/"+apitype.ComponentMetrics, func(s *apitype.Snapshot) {
				if d.metrics.gen == gen { // the main loop's field, read on the main loop
					state.SetComponent(s, apitype.ComponentMetrics, apitype.Error, err, now)
				}
			})
		}
	})
}

// samePort reports whether the host:port addresses a and b have the same
// (non-zero) port.
func samePort(a, b string) bool {
	_, pa, err1 := net.SplitHostPort(a)
	_, pb, err2 := net.SplitHostPort(b)
	return err1 == nil && err2 == nil && pa == pb && pa != "0"
}
