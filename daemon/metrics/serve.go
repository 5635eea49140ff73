package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// MaxScrapes bounds concurrent scrapes of one handler; more get 503. The
// socket and the TCP listener each have their own (Handlers), so that
// scrapers on the network never starve the socket's.
const MaxScrapes = 4

// Handlers returns the GET /metrics handlers of the socket and of the TCP
// listener for reg, each with its own bound of MaxScrapes: four scrapers
// looping over TCP made 17 of 40 socket scrapes fail with 503 when they
// shared one. Both share reg's cache of encoded snapshots.
func Handlers(reg prometheus.Gatherer) (socket, tcp http.Handler) {
	return Handler(reg), Handler(reg)
}

// Handler returns a GET /metrics handler for reg with a bound of its own.
// It answers the Prometheus text format, and OpenMetrics to a scraper that
// asks for it (Accept: application/openmetrics-text), gzip-compressed when
// the scraper accepts it. A *Registry is served from its cache of encoded
// snapshots (cache.go), any other Gatherer by promhttp.
func Handler(reg prometheus.Gatherer) http.Handler {
	if r, ok := reg.(*Registry); ok {
		return newScrapeHandler(r)
	}
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		// A metric that fails (a duplicate label set from a broken
		// snapshot) must not hide the others.
		ErrorHandling:       promhttp.ContinueOnError,
		EnableOpenMetrics:   true,
		MaxRequestsInFlight: MaxScrapes,
		Timeout:             scrapeTimeout,
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
// cancelled, at most MaxTCPConns connections at once and MaxTCPConnsPerAddr
// of one client address, a new connection closing the oldest one that is
// not in a scrape (listener.go). It closes ln.
func Serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	ln = newConnTracker(ln, MaxTCPConns, MaxTCPConnsPerAddr)
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	srv := &http.Server{
		Handler:     markBusy(mux),
		ConnContext: connContext,
		ConnState:   connState,
		// A connection that sends nothing, or half a header, is closed
		// after ReadHeaderTimeout, and sooner when a new connection
		// needs its place.
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
