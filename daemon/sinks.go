package daemon

import (
	"context"
	"net/http"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon/access"
	"github.com/rdmad/rdmad/daemon/metrics"
	"github.com/rdmad/rdmad/daemon/watch"
)

// addSinks registers GET /metrics and GET /v1/watch on the API, starts the
// watch hub and, when [metrics] listen is set, the TCP metrics listener.
// Both run as parts of the daemon (supervise.go). It must run before
// the API serves.
//
// The TCP listener follows the configuration at start only: a reload that
// changes [metrics] listen is logged, and takes effect at the next restart.
func (d *Daemon) addSinks() {
	hub := watch.NewHub(d.store, watch.Options{Logger: d.log.With("component", "watch")})
	col := metrics.NewCollector(metrics.Options{Snapshot: d.store.Load, SysfsRoot: d.opts.SysfsRoot})
	h := metrics.Handler(metrics.NewRegistry(col, true))
	d.api.Handle("/metrics", http.MethodGet, access.Metrics, h)
	d.api.Handle("/v1/watch", http.MethodGet, access.Watch, hub)

	d.parts.Go(hub.Run)

	addr := d.cfg.Metrics.Listen
	if addr == "" {
		d.setComponent(apitype.ComponentMetrics, apitype.OK, nil)
		return
	}
	ln, err := metrics.Listen(addr)
	if err != nil {
		d.log.Error("metrics listener", "err", err)
		d.setComponent(apitype.ComponentMetrics, apitype.Error, err)
		return
	}
	d.log.Info("serving metrics", "address", ln.Addr().String())
	d.setComponent(apitype.ComponentMetrics, apitype.OK, nil)
	d.parts.Go(func(ctx context.Context) {
		if err := metrics.Serve(ctx, ln, h); err != nil {
			d.log.Error("metrics listener", "err", err)
			d.report(apitype.ComponentMetrics, apitype.Error, err)
		}
	})
}
