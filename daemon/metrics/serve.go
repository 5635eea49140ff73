package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// NewRegistry returns a registry with c and, when runtime is true, the Go
// runtime and process collectors (go_*, process_*).
func NewRegistry(c *Collector, runtime bool) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	if runtime {
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	return reg
}

// MaxScrapes bounds concurrent scrapes; more get 503.
const MaxScrapes = 4

// Handler returns the GET /metrics handler for reg, on the socket and the
// TCP listener alike. It answers the Prometheus text format, and
// OpenMetrics to a scraper that asks for it (Accept:
// application/openmetrics-text).
func Handler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		// A metric that fails (a duplicate label set from a broken
		// snapshot) must not hide the others.
		ErrorHandling:       promhttp.ContinueOnError,
		EnableOpenMetrics:   true,
		MaxRequestsInFlight: MaxScrapes,
		Timeout:             10 * time.Second,
	})
}

// Listen opens the TCP listener of [metrics] listen.
func Listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listen on %s: %w; free the port or change [metrics] listen", addr, err)
	}
	return ln, nil
}

// Serve serves h as GET /metrics (and nothing else) on ln until ctx is
// cancelled. It closes ln.
func Serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    16 << 10,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("metrics: serve on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("metrics: serve on %s: %w", ln.Addr(), err)
	}
	return nil
}
