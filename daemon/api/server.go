// Package api serves rdmad's local API: HTTP/1.1 with JSON bodies over a Unix
// socket, with versioned routes under /v1. The peer's credentials
// (SO_PEERCRED) decide what it may do: see Policy.
package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rdmad/rdmad/daemon/state"
)

// Limits on what one client can make the daemon hold.
const (
	MaxConns       = 64
	MaxHeaderBytes = 16 << 10
	MaxBodyBytes   = 64 << 10
)

// A Backend is what the API serves; the daemon implements it.
type Backend interface {
	// Snapshot returns the current state. It must not block.
	Snapshot() *state.Snapshot
	// Reload loads the configuration again. A config error is reported in
	// the result, not as an error: the daemon keeps the last good config.
	Reload(ctx context.Context) (ReloadResult, error)
	// PolicyDiff returns what a policy pass would change, changing nothing.
	PolicyDiff(ctx context.Context) ([]state.Change, error)
	// PolicyApply runs a full policy pass now.
	PolicyApply(ctx context.Context) (ApplyResult, error)
	// Probe probes a configured peer now (a one-shot peer probe).
	Probe(ctx context.Context, peer string) (state.Peer, error)
}

// ApplyResult is the answer of POST /v1/policy/apply.
type ApplyResult struct {
	// Changes lists the differences the pass found (and, for policies in
	// enforce mode, applied).
	Changes []state.Change `json:"changes"`
	// Policy is the policy state after the pass.
	Policy state.Policy `json:"policy"`
}

// DiffResult is the answer of GET /v1/policy/diff.
type DiffResult struct {
	Changes []state.Change `json:"changes"`
}

// ReloadResult is the answer of POST /v1/reload.
type ReloadResult struct {
	// OK reports whether the configuration loaded.
	OK         bool   `json:"ok"`
	Generation uint64 `json:"generation"`
	Error      string `json:"error,omitempty"`
}

// ErrorBody is the JSON body of every 4xx and 5xx answer.
type ErrorBody struct {
	Error string `json:"error"`
}

type access int

const (
	read access = iota
	write
)

type route struct {
	method string
	access access
	serve  func(s *Server, w http.ResponseWriter, r *http.Request)
}

// routes is the whole API. Keep docs/API.md in step with it.
var routes = map[string]route{
	"/v1/status":       {http.MethodGet, read, (*Server).serveStatus},
	"/v1/reload":       {http.MethodPost, write, (*Server).serveReload},
	"/v1/policy/diff":  {http.MethodGet, read, (*Server).servePolicyDiff},
	"/v1/policy/apply": {http.MethodPost, write, (*Server).servePolicyApply},
	"/v1/probe":        {http.MethodPost, read, (*Server).serveProbe},
}

// A Server is the local API.
type Server struct {
	backend Backend
	policy  atomic.Pointer[Policy]
	extra   map[string]route
}

// NewServer returns a Server for b with access policy p.
func NewServer(b Backend, p Policy) *Server {
	s := &Server{backend: b, extra: map[string]route{}}
	s.policy.Store(&p)
	return s
}

// SetPolicy replaces the access policy (after a reload changed the groups).
func (s *Server) SetPolicy(p Policy) { s.policy.Store(&p) }

// Handle adds a route served by h (for parts of the daemon that own their
// routes, such as metrics). It must be called before Serve.
func (s *Server) Handle(path, method string, writeAccess bool, h http.Handler) {
	a := read
	if writeAccess {
		a = write
	}
	s.extra[path] = route{method, a, func(_ *Server, w http.ResponseWriter, r *http.Request) { h.ServeHTTP(w, r) }}
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rt, ok := routes[r.URL.Path]
	if !ok {
		rt, ok = s.extra[r.URL.Path]
	}
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no route %s; see docs/API.md (routes: %s)", r.URL.Path, s.routeList()))
		return
	}
	if r.Method != rt.method && !(rt.method == http.MethodGet && r.Method == http.MethodHead) {
		w.Header().Set("Allow", rt.method)
		writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s %s is not allowed; use %s", r.Method, r.URL.Path, rt.method))
		return
	}
	peer := PeerFrom(r.Context())
	pol := s.policy.Load()
	switch {
	case rt.access == read && !pol.CanRead(peer):
		writeError(w, http.StatusForbidden, fmt.Sprintf("uid %d may not read rdmad's state; ask an admin to add you to the socket group ([daemon] socket_group) or use sudo", peer.UID))
		return
	case rt.access == write && !pol.CanWrite(peer):
		writeError(w, http.StatusForbidden, fmt.Sprintf("uid %d may not change rdmad's state (%s); run it as root or as a member of [daemon] admin_group", peer.UID, r.URL.Path))
		return
	}
	if r.Body != nil {
		r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
	}
	rt.serve(s, w, r)
}

func (s *Server) routeList() string {
	var names []string
	for p, rt := range routes {
		names = append(names, rt.method+" "+p)
	}
	for p, rt := range s.extra {
		names = append(names, rt.method+" "+p)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

func (s *Server) serveStatus(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.backend.Snapshot())
}

func (s *Server) serveReload(w http.ResponseWriter, r *http.Request) {
	res, err := s.backend.Reload(r.Context())
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	code := http.StatusOK
	if !res.OK {
		code = http.StatusUnprocessableEntity
	}
	writeJSON(w, code, res)
}

func (s *Server) servePolicyDiff(w http.ResponseWriter, r *http.Request) {
	cs, err := s.backend.PolicyDiff(r.Context())
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	if cs == nil {
		cs = []state.Change{}
	}
	writeJSON(w, http.StatusOK, DiffResult{Changes: cs})
}

func (s *Server) servePolicyApply(w http.ResponseWriter, r *http.Request) {
	res, err := s.backend.PolicyApply(r.Context())
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	if res.Changes == nil {
		res.Changes = []state.Change{}
	}
	writeJSON(w, http.StatusOK, res)
}

// serveProbe probes ?peer= once. Reading access suffices: the probe
// changes nothing, and the one-shot queue of the daemon is bounded.
func (s *Server) serveProbe(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("peer")
	if name == "" {
		writeError(w, http.StatusBadRequest, "say which peer: POST /v1/probe?peer=ADDRESS (a configured peer)")
		return
	}
	p, err := s.backend.Probe(r.Context(), name)
	if err != nil {
		writeError(w, http.StatusUnprocessableEntity, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, p)
}

// Serve serves the API on ln until ctx is cancelled, then shuts down,
// giving open requests until the deadline of grace.
func (s *Server) Serve(ctx context.Context, ln net.Listener, grace time.Duration) error {
	srv := &http.Server{
		Handler:           s,
		ConnContext:       ConnContext,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    MaxHeaderBytes,
		ErrorLog:          nil,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(newLimitListener(ln, MaxConns)) }()
	select {
	case err := <-errc:
		return fmt.Errorf("api: serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, ErrorBody{Error: msg})
}
