// Package api serves rdmad's local API: HTTP/1.1 with JSON bodies over a Unix
// socket, with versioned routes under /v1. The peer's credentials, as the
// kernel captured them at connect (SO_PEERCRED, SO_PEERGROUPS), decide what
// it may do, through the access table of daemon/access.
package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon/access"
	"github.com/rdmad/rdmad/daemon/service"
	"github.com/rdmad/rdmad/internal/inflight"
)

// Limits on what one client can make the daemon hold.
const (
	// MaxConns is the general pool of connections, open to every peer.
	MaxConns = 64
	// ReservedConns more are kept for root, rdmad's own user and the admin
	// group, so that readers filling the general pool never lock them out.
	// Admins use them first, so root's own connections leave readers' be.
	ReservedConns = 16
	// MaxConnsPerUID bounds one uid outside the admin group: a quarter of
	// the general pool, so one reader account (or a runaway script) cannot
	// take it, while honest use stays far below: rdmactl holds one
	// connection per command (two with watch) and a monitoring agent a few.
	MaxConnsPerUID = 16
	// LimitedConnMaxAge recycles a non-admin's keep-alive connection (its
	// next answer closes it), so that it cannot be kept forever by sending
	// a request before each IdleTimeout.
	LimitedConnMaxAge = time.Minute
	// LimitedWriteTimeout bounds writing one answer to a non-admin that
	// does not read it. Admins' answers (a policy apply may take long) are
	// not bounded; the watch stream bounds each line itself.
	LimitedWriteTimeout = 30 * time.Second
	MaxHeaderBytes      = 16 << 10
	MaxBodyBytes        = 64 << 10
)

type route struct {
	method string
	// op names the route in the access table (daemon/access), which
	// decides who may use it, for the socket and D-Bus alike.
	op    access.Op
	serve func(s *Server, w http.ResponseWriter, r *http.Request)
}

// routes is the whole API. Keep docs/API.md in step with it.
var routes = map[string]route{
	"/v1/status":       {http.MethodGet, access.Status, (*Server).serveStatus},
	"/v1/health":       {http.MethodGet, access.Health, (*Server).serveHealth},
	"/v1/reload":       {http.MethodPost, access.Reload, (*Server).serveReload},
	"/v1/policy/diff":  {http.MethodGet, access.PolicyDiff, (*Server).servePolicyDiff},
	"/v1/policy/apply": {http.MethodPost, access.PolicyApply, (*Server).servePolicyApply},
	"/v1/probe":        {http.MethodPost, access.Probe, (*Server).serveProbe},
	"/v1/bw":           {http.MethodPost, access.Bandwidth, (*Server).serveBandwidth},
	"/v1/doctor":       {http.MethodGet, access.Doctor, (*Server).serveDoctor},
	"/v1/resources":    {http.MethodGet, access.Resources, (*Server).serveResources},
}

// A Server is the local API.
type Server struct {
	backend service.Backend // the operations, the same as D-Bus serves
	policy  atomic.Pointer[access.Roles]
	extra   map[string]route
	log     *slog.Logger // for the connection limits; see SetLogger
	status  encodedCache // GET /v1/status, encoded once per snapshot
	// fresh, when set, makes the snapshot's peer figures fresh before
	// GET /v1/status serves it; see SetFresh.
	fresh func(ctx context.Context)
}

// NewServer returns a Server for b with access roles p.
func NewServer(b service.Backend, p access.Roles) *Server {
	s := &Server{backend: b, extra: map[string]route{}}
	s.policy.Store(&p)
	return s
}

// SetFresh makes GET /v1/status call f with the request's context before
// it loads the snapshot: the daemon's peer manager builds its figures only
// when a reader asks for them (issue #29 item 2), and f returns once the
// snapshot holds figures no older than its publish period, or within a
// bound of its own. It must be called before Serve.
func (s *Server) SetFresh(f func(ctx context.Context)) { s.fresh = f }

// SetRoles replaces the access roles (after a reload changed the groups).
func (s *Server) SetRoles(p access.Roles) { s.policy.Store(&p) }

// Roles returns the access roles in force. D-Bus decides with the same
// one, so that a reload changes both transports at once.
func (s *Server) Roles() access.Roles { return *s.policy.Load() }

// isAdmin reports whether peer may do admin-level operations (reload,
// apply, probe) under the current policy. The connection limits use it at
// accept time to keep slots for admins.
func (s *Server) isAdmin(p Peer) bool {
	return s.policy.Load().LevelFor(p.Caller()) >= access.Admin
}

// Handle adds a route served by h (for parts of the daemon that own their
// routes, such as metrics), guarded like every route by op's entry in the
// access table. It must be called before Serve.
func (s *Server) Handle(path, method string, op access.Op, h http.Handler) {
	s.extra[path] = route{method, op, func(_ *Server, w http.ResponseWriter, r *http.Request) { h.ServeHTTP(w, r) }}
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
	if err := s.policy.Load().Decide(PeerFrom(r.Context()).Caller(), rt.op); err != nil {
		var d *access.Denied
		if errors.As(err, &d) {
			d.Target = r.URL.Path
		}
		writeError(w, http.StatusForbidden, err.Error())
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

// serveStatus answers the current snapshot. A published snapshot never
// changes and every caller allowed to read it gets the same answer (the
// access table has no per-caller view of it), so it is encoded once, by
// the first request that sees it, and the bytes served to every request
// after: at 1,000 peers an encoding is 1.4 MB and 14 MB allocated. The
// peer figures in it are made fresh first: the peer manager builds them
// only when a reader asks (SetFresh).
func (s *Server) serveStatus(w http.ResponseWriter, r *http.Request) {
	if s.fresh != nil {
		s.fresh(r.Context())
	}
	snap := s.backend.Snapshot()
	if snap == nil {
		writeJSON(w, http.StatusOK, snap)
		return
	}
	writeBody(w, http.StatusOK, s.status.get(snap))
}

// An encodedCache holds the JSON of the last snapshot a route encoded.
type encodedCache struct {
	mu  sync.Mutex // one encoding at a time: concurrent first requests wait for it rather than each make their own
	cur atomic.Pointer[encodedSnapshot]
}

type encodedSnapshot struct {
	snap *apitype.Snapshot
	body []byte
}

// get returns snap's JSON, as writeJSON writes it.
func (c *encodedCache) get(snap *apitype.Snapshot) []byte {
	if e := c.cur.Load(); e != nil && e.snap == snap {
		return e.body
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.cur.Load(); e != nil && e.snap == snap {
		return e.body
	}
	body := encodeJSON(snap)
	c.cur.Store(&encodedSnapshot{snap: snap, body: body})
	return body
}

// serveHealth answers the verdict of the current snapshot, 200 whatever it
// says: the body is the answer (docs/HEALTH.md), and a 503 would read as
// "rdmad cannot answer" to a client that checks the status code only.
func (s *Server) serveHealth(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.backend.Snapshot().Health)
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
		cs = []apitype.Change{}
	}
	res := apitype.DiffResult{Changes: cs, Policies: []string{}, Unmatched: []string{}, Overridden: []apitype.Override{}}
	if snap := s.backend.Snapshot(); snap != nil {
		res.Policies, res.Unmatched = apitype.DiffPolicies(snap.Policy.Policies)
		res.Overridden = append(res.Overridden, snap.Policy.Overridden...)
	}
	writeJSON(w, http.StatusOK, res)
}

func (s *Server) servePolicyApply(w http.ResponseWriter, r *http.Request) {
	res, err := s.backend.PolicyApply(r.Context())
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	if res.Changes == nil {
		res.Changes = []apitype.Change{}
	}
	writeJSON(w, http.StatusOK, res)
}

// serveProbe probes ?peer= once. It is admin level in the access table:
// it changes no state, but it makes the node send traffic on demand.
func (s *Server) serveProbe(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("peer")
	if name == "" {
		writeError(w, http.StatusBadRequest, "say which peer: POST /v1/probe?peer=ADDRESS (a configured peer)")
		return
	}
	if !service.ValidPeerName(name) {
		// Not even the shape of an address or host name: never a
		// configured peer, and text (a NUL, say) that must not travel on
		// into the backend's messages and the answer.
		writeError(w, http.StatusBadRequest, fmt.Sprintf("peer %.64q is not an IP address or host name; use a name rdmactl peers lists", name))
		return
	}
	p, err := s.backend.Probe(r.Context(), name)
	if err != nil {
		writeError(w, http.StatusUnprocessableEntity, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, p)
}

// serveDoctor runs the troubleshooting table: ?interval= (a Go duration,
// 0 to service.MaxDoctorInterval, default service.DefaultDoctorInterval)
// is the wait between the counter reads.
func (s *Server) serveDoctor(w http.ResponseWriter, r *http.Request) {
	interval := service.DefaultDoctorInterval
	if v := r.URL.Query().Get("interval"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || !service.ValidDoctorInterval(d) {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("interval %.40q is not a duration from 0 to %s; use e.g. ?interval=2s (0 skips the rising-counter checks)", v, service.MaxDoctorInterval))
			return
		}
		interval = d
	}
	// The caller goes along for the backend's bounds per caller.
	rep, err := s.backend.Doctor(access.WithCaller(r.Context(), PeerFrom(r.Context()).Caller()), interval)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, rep)
}

// serveResources reads the RDMA objects the kernel tracks (RDMA netlink)
// and counts them per process and device.
func (s *Server) serveResources(w http.ResponseWriter, r *http.Request) {
	res, err := service.ReadResources(r.Context(), s.backend)
	if errors.Is(err, errors.ErrUnsupported) {
		writeError(w, http.StatusNotImplemented, "this rdmad does not read the kernel's RDMA resources (it runs on a fixture sysfs tree, not this host's); rdmactl resources reads them from the kernel itself")
		return
	}
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// Serve serves the API on ln until ctx is cancelled, then shuts down,
// giving open requests until the deadline of grace. Connections are bounded
// per peer (see MaxConns and limitListener): a peer beyond its bound is
// answered 503 and closed at once, and the accept loop never waits.
func (s *Server) Serve(ctx context.Context, ln net.Listener, grace time.Duration) error {
	return s.serve(ctx, ln, grace, defaultLimits())
}

func (s *Server) serve(ctx context.Context, ln net.Listener, grace time.Duration, lim limits) error {
	lln := newLimitListener(ln, lim, s.classify, s.log)
	// net/http runs each connection on a goroutine of its own: serve
	// waits for the handlers in progress before it returns (their
	// request's context ends when Close cuts the connection).
	var calls inflight.Group
	h := lln.limitHandler(s)
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !calls.Enter() {
				writeError(w, http.StatusServiceUnavailable, "rdmad is stopping")
				return
			}
			defer calls.Leave()
			h.ServeHTTP(w, r)
		}),
		ConnContext: connContext,
		ConnState:   connState,
		// Slow senders are cut: the headers within 5 s, the whole request
		// (body included) within 10 s. Streams lift the read deadline.
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    MaxHeaderBytes,
		ErrorLog:          nil,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lln) }()
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
	calls.Drain()
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

// encodeJSON returns v as writeJSON writes it.
func encodeJSON(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.Encode(v) // the API's types always encode, as in writeJSON
	return buf.Bytes()
}

// writeBody writes body, JSON encoded already, with its length.
func writeBody(w http.ResponseWriter, code int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(code)
	w.Write(body)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, apitype.ErrorBody{Error: msg})
}
