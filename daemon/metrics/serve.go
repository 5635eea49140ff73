package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rdmad/rdmad/client/apitype"
)

// A ConfigTracker counts failed configuration loads by watching snapshots:
// the snapshot carries only the last load's error, so a failure is a change
// of Config.Error to a new non-empty text. Two failures in a row with the
// same error text count once.
type ConfigTracker struct {
	mu       sync.Mutex
	lastErr  string
	failures uint64
}

// Observe looks at one published snapshot. Call it for snapshots in
// publishing order; skipped snapshots only lose repeated failures.
func (t *ConfigTracker) Observe(s *apitype.Snapshot) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s.Config.Error != "" && s.Config.Error != t.lastErr {
		t.failures++
	}
	t.lastErr = s.Config.Error
}

// Failures returns the number of failed loads seen.
func (t *ConfigTracker) Failures() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failures
}

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

// Handler returns the GET /metrics handler for reg.
func Handler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		// A metric that fails (a duplicate label set from a broken
		// snapshot) must not hide the others.
		ErrorHandling:       promhttp.ContinueOnError,
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
