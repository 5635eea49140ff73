package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon/access"
	"github.com/rdmad/rdmad/daemon/service/servicetest"
)

// The fuzz targets of the API play every kind of caller against
// (*Server).ServeHTTP with a backend that records what it was asked, and
// check, whatever the request:
//   - no panic;
//   - every 4xx and 5xx answer is JSON with a non-empty "error";
//   - a 5xx only when the backend failed (bad client input is a 4xx);
//   - the status is what the route table and the access table say: 404 for
//     no route, 405 with Allow for the wrong method, 403 for a caller below
//     the route's level, and then the route's own answer;
//   - a caller below admin never reaches Reload, PolicyApply, Probe or
//     Bandwidth, a caller below read (a stranger, root's group, unknown
//     credentials) never reaches the backend or a handler at all, and an
//     allowed request reaches exactly its own backend methods, once each;
//   - a probe or bandwidth test whose arguments are out of bounds is a 400
//     and reaches nothing.
//
// The oracle's tables (fzRoutes, from servicetest.Operations, the table of
// the D-Bus fuzz targets too, and servicetest.Backend's methods) are kept in
// step with the server's by TestFuzzRoutesKnowServer and servicetest's
// TestBackendKnowsEveryMethod, so that a new route or backend method fails
// a test until the oracle knows it.

// fzRoles is the access roles of the fuzz targets.
var fzRoles = access.Roles{SelfUID: 1000, ReadGID: access.GID(500), AdminGID: access.GID(600)}

// fzCallers are the callers, one per kind, with the level fzRoles gives.
var fzCallers = []struct {
	name  string
	peer  Peer
	level access.Level
}{
	{"root", Peer{PID: 1, UID: 0, GID: 0, Known: true}, access.Admin},
	{"self", Peer{PID: 2, UID: 1000, GID: 1000, Known: true}, access.Admin},
	{"admin", Peer{PID: 3, UID: 1002, GID: 600, Known: true}, access.Admin},
	{"admin-supplementary", Peer{PID: 4, UID: 1012, GID: 1012, Groups: []uint32{20, 600}, Known: true}, access.Admin},
	{"socket-group", Peer{PID: 5, UID: 1001, GID: 1001, Groups: []uint32{20, 500}, Known: true}, access.Read},
	{"socket-group-primary", Peer{PID: 6, UID: 1011, GID: 500, Known: true}, access.Read},
	{"stranger", Peer{PID: 7, UID: 1003, GID: 1003, Groups: []uint32{20}, Known: true}, 0},
	{"wheel", Peer{PID: 8, UID: 1004, GID: 0, Groups: []uint32{0}, Known: true}, 0},
	{"nogroup", Peer{PID: 9, UID: 65534, GID: access.NoGID, Known: true}, 0},
	{"unknown", Peer{}, 0},
	// Credentials not from the kernel must not count, whatever they say.
	{"unknown-root", Peer{UID: 0, GID: 0, Groups: []uint32{600}, Known: false}, 0},
}

// fzRoute is what the fuzz targets expect of a path: its method, the
// access table's operation, the level the oracle expects and the backend
// calls an allowed request makes, in order.
type fzRoute struct {
	method string
	op     access.Op
	level  access.Level
	calls  []string
}

// fzRoutes are the operations of the service contract as the socket serves
// them (servicetest.Operations, the table the D-Bus fuzz targets read
// too), and the routes the daemon adds with Handle.
var fzRoutes = func() map[string]fzRoute {
	m := map[string]fzRoute{
		// Handle's routes, as the daemon adds them (daemon/sinks.go);
		// fzServe adds every route here that server.go's table lacks, its
		// handler recording the call named here.
		"/metrics":  {http.MethodGet, access.Metrics, access.Read, []string{"metrics"}},
		"/v1/watch": {http.MethodGet, access.Watch, access.Read, []string{"watch"}},
	}
	for _, o := range servicetest.Operations {
		m[o.Path] = fzRoute{o.Method, o.Op, o.Level, o.Calls}
	}
	return m
}()

// bandwidthQueryOK is the oracle of POST /v1/bw's query: the parameters
// servicetest.BandwidthOK takes, with size a number of bytes and duration a
// Go duration, each absent for the default, never 0 or below (which the
// query cannot mean as the default). The first value of each counts.
func bandwidthQueryOK(q url.Values) bool {
	size := 0
	if v := q.Get("size"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return false
		}
		size = n
	}
	var d time.Duration
	if v := q.Get("duration"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil || d <= 0 {
			return false
		}
	}
	return servicetest.BandwidthOK(q.Get("peer"), q.Get("op"), size, d)
}

// doctorQueryOK is the oracle of GET /v1/doctor's query: interval absent,
// or a Go duration servicetest.DoctorIntervalOK takes.
func doctorQueryOK(q url.Values) bool {
	v := q.Get("interval")
	if v == "" {
		return true
	}
	d, err := time.ParseDuration(v)
	return err == nil && servicetest.DoctorIntervalOK(d)
}

// adminCalls are the backend methods only an admin may reach: those of the
// admin routes of fzRoutes (Reload, PolicyApply, Probe, Bandwidth), unless
// a read route makes them too.
var adminCalls = func() map[string]bool {
	m := map[string]bool{}
	for _, rt := range fzRoutes {
		for _, c := range rt.calls {
			if rt.level >= access.Admin {
				m[c] = true
			}
		}
	}
	for _, rt := range fzRoutes {
		for _, c := range rt.calls {
			if rt.level < access.Admin {
				delete(m, c)
			}
		}
	}
	return m
}()

// fzServe serves r as caller number who on a fresh server and checks the
// answer. It returns the answer's status.
func fzServe(t *testing.T, who uint8, mode uint8, r *http.Request) int {
	t.Helper()
	caller := fzCallers[int(who)%len(fzCallers)]
	b := &servicetest.Backend{Fail: mode%3 == 1}
	reject := mode%3 == 2
	if reject {
		b.SetReject("rdmad.toml:1: fuzz")
	}
	s := NewServer(b, fzRoles)
	// The routes the daemon adds with Handle, each with a handler that
	// records its name (ServeHTTP runs it on this goroutine).
	var handled []string
	for path, rt := range fzRoutes {
		if _, ok := routes[path]; ok {
			continue
		}
		s.Handle(path, rt.method, rt.op, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			handled = append(handled, rt.calls[0])
			if rt.calls[0] == "metrics" {
				io.WriteString(w, "# metrics\n")
				return
			}
			writeJSON(w, http.StatusOK, struct{}{})
		}))
	}
	r = r.WithContext(context.WithValue(r.Context(), peerKey{}, caller.peer))
	desc := fmt.Sprintf("%s %s %q (path %q, query %q) as %s", r.Method, r.URL.Path, r.RequestURI, r.URL.Path, r.URL.RawQuery, caller.name)

	w := httptest.NewRecorder()
	s.ServeHTTP(w, r)

	calls := append(b.Calls(), handled...)
	peers := b.Asked()

	// Privileges first: what the caller made the daemon do.
	for _, c := range calls {
		if caller.level < access.Read {
			t.Fatalf("%s: a caller without access reached %s (calls %q)", desc, c, calls)
		}
		if adminCalls[c] && caller.level < access.Admin {
			t.Fatalf("%s: a caller below admin reached %s (calls %q)", desc, c, calls)
		}
	}

	// The answer.
	code := w.Code
	body := w.Body.Bytes()
	if code < 100 || code > 599 {
		t.Fatalf("%s: status %d", desc, code)
	}
	if code >= 400 {
		if ct := w.Header().Get("Content-Type"); ct != "application/json" {
			t.Fatalf("%s: %d with Content-Type %q, want application/json", desc, code, ct)
		}
		// apitype.ErrorBody, or a apitype.ReloadResult (422: the configuration was
		// rejected), which carries the error in the same field.
		var eb apitype.ErrorBody
		if err := json.Unmarshal(body, &eb); err != nil || eb.Error == "" {
			t.Fatalf("%s: %d with body %q, want JSON with a non-empty \"error\" (%v)", desc, code, body, err)
		}
	}
	if code >= 500 && !b.Fail {
		t.Fatalf("%s: %d although the backend did not fail: %s", desc, code, body)
	}

	// The status the route and access tables call for.
	rt, ok := fzRoutes[r.URL.Path]
	want := 0
	switch {
	case !ok:
		want = http.StatusNotFound
	case r.Method != rt.method && !(rt.method == http.MethodGet && r.Method == http.MethodHead):
		want = http.StatusMethodNotAllowed
		if allow := w.Header().Get("Allow"); allow != rt.method {
			t.Fatalf("%s: 405 with Allow %q, want %q", desc, allow, rt.method)
		}
	case caller.level < rt.level:
		want = http.StatusForbidden
	}
	if want != 0 {
		if code != want {
			t.Fatalf("%s: status %d, want %d; body %s", desc, code, want, body)
		}
		if len(calls) != 0 {
			t.Fatalf("%s: answered %d but made the calls %q", desc, code, calls)
		}
		return code
	}
	// Allowed: the route's own calls, once each, and nothing else.
	call := rt.calls[0]
	if call == "Probe" && !servicetest.PeerShaped(r.URL.Query().Get("peer")) {
		if code != http.StatusBadRequest || len(calls) != 0 {
			t.Fatalf("%s: probe without a peer, or of a name without the shape of one: %d, calls %q; want 400 and no call", desc, code, calls)
		}
		return code
	}
	if call == "Bandwidth" && !bandwidthQueryOK(r.URL.Query()) {
		if code != http.StatusBadRequest || len(calls) != 0 {
			t.Fatalf("%s: bandwidth test with a query out of bounds: %d, calls %q; want 400 and no call", desc, code, calls)
		}
		return code
	}
	if call == "Doctor" && !doctorQueryOK(r.URL.Query()) {
		if code != http.StatusBadRequest || len(calls) != 0 {
			t.Fatalf("%s: doctor with an interval out of bounds: %d, calls %q; want 400 and no call", desc, code, calls)
		}
		return code
	}
	// A backend that fails ends the request at the failing call.
	if want := rt.calls; !slices.Equal(calls, want) && !(b.Fail && len(calls) > 0 && slices.Equal(calls, want[:min(len(calls), len(want))])) {
		t.Fatalf("%s: calls %q, want exactly %q (or a start of it when the backend fails)", desc, calls, want)
	}
	if (call == "Probe" || call == "Bandwidth") && (len(peers) != 1 || peers[0] != r.URL.Query().Get("peer")) {
		t.Fatalf("%s: asked the backend about %q, want %q", desc, peers, r.URL.Query().Get("peer"))
	}
	if !b.Fail && !(reject && call == "Reload") && code != http.StatusOK {
		t.Fatalf("%s: %d from a backend that did not fail, want 200: %s", desc, code, body)
	}
	if code < 400 && call != "metrics" && !json.Valid(body) {
		t.Fatalf("%s: %d with a body that is not JSON: %q", desc, code, body)
	}
	return code
}

// FuzzAPI builds requests from its input: method, request target (escapes,
// NULs, "..", any bytes), a raw query (peer=...), one header and a body,
// and serves them as each kind of caller.
func FuzzAPI(f *testing.F) {
	f.Add(uint8(0), uint8(0), "GET", "/v1/status", "", "", "", []byte(nil))
	f.Add(uint8(0), uint8(0), "GET", "/v1/health", "", "", "", []byte(nil))
	f.Add(uint8(4), uint8(0), "POST", "/v1/reload", "", "Content-Type", "application/json", []byte("{}"))
	f.Add(uint8(4), uint8(0), "POST", "/v1/probe", "peer=192.0.2.17", "", "", []byte(nil))
	f.Add(uint8(2), uint8(1), "POST", "/v1/probe", "peer=%00expire%20x", "", "", []byte(nil))
	f.Add(uint8(6), uint8(0), "HEAD", "/v1/status", "", "", "", []byte(nil))
	f.Add(uint8(9), uint8(0), "GET", "/v1/../v1/status", "", "", "", []byte(nil))
	f.Add(uint8(1), uint8(2), "POST", "/v1/policy/apply", "", "Transfer-Encoding", "chunked", []byte("0\r\n\r\n"))
	f.Add(uint8(5), uint8(0), "GET", "/v1%2fstatus", "", "", "", []byte(nil))
	f.Add(uint8(7), uint8(0), "GET", "/metrics", "", "X-Forwarded-For", "127.0.0.1", []byte(nil))
	f.Add(uint8(10), uint8(0), "POST", "/v1/reload\x00", "", "", "", []byte(nil))
	// Bandwidth (admin) and resources (read) as a reader (socket-group,
	// 4) and a stranger (6), then as an admin with good and bad arguments
	// and a backend that fails.
	f.Add(uint8(4), uint8(0), "POST", "/v1/bw", "peer=192.0.2.17", "", "", []byte(nil))
	f.Add(uint8(6), uint8(0), "POST", "/v1/bw", "peer=192.0.2.17&op=read&size=4096&duration=2s", "", "", []byte(nil))
	f.Add(uint8(4), uint8(0), "GET", "/v1/resources", "", "", "", []byte(nil))
	f.Add(uint8(6), uint8(0), "GET", "/v1/resources", "", "", "", []byte(nil))
	f.Add(uint8(3), uint8(0), "POST", "/v1/bw", "peer=192.0.2.17&op=send&size=1048576&duration=30s", "", "", []byte(nil))
	f.Add(uint8(2), uint8(1), "POST", "/v1/bw", "peer=192.0.2.17&duration=2500ms", "", "", []byte(nil))
	f.Add(uint8(0), uint8(0), "POST", "/v1/bw", "peer=-x&op=fill&size=2097152&duration=1h", "", "", []byte(nil))
	f.Add(uint8(1), uint8(0), "POST", "/v1/bw", "peer=192.0.2.17&duration=100500us", "", "", []byte(nil))
	f.Add(uint8(5), uint8(1), "GET", "/v1/resources", "", "", "", []byte(nil))
	f.Add(uint8(4), uint8(0), "GET", "/v1/bw", "peer=192.0.2.17", "", "", []byte(nil))
	// The other read routes as a reader: diff (which reads the snapshot
	// too) and doctor with an interval in and out of bounds.
	f.Add(uint8(4), uint8(0), "GET", "/v1/policy/diff", "", "", "", []byte(nil))
	f.Add(uint8(5), uint8(0), "GET", "/v1/doctor", "interval=0", "", "", []byte(nil))
	f.Add(uint8(4), uint8(0), "GET", "/v1/doctor", "interval=1h", "", "", []byte(nil))
	f.Fuzz(func(t *testing.T, who, mode uint8, method, target, rawQuery, hname, hval string, body []byte) {
		if method == "" {
			method = http.MethodGet
		}
		// net/http hands the handler a URL from url.ParseRequestURI; take
		// that when it parses, and any Path otherwise: the handler must not
		// rely on the parser for its safety.
		u, err := url.ParseRequestURI(target)
		if err != nil {
			u = &url.URL{Path: target}
		}
		if rawQuery != "" {
			u.RawQuery = rawQuery
		}
		r := &http.Request{
			Method:     method,
			URL:        u,
			RequestURI: target,
			Proto:      "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header:        http.Header{},
			Host:          "rdmad",
			RemoteAddr:    "@",
			Body:          io.NopCloser(bytes.NewReader(body)),
			ContentLength: int64(len(body)),
		}
		if hname != "" {
			r.Header[hname] = []string{hval}
		}
		fzServe(t, who, mode, r)
	})
}

// FuzzAPIRaw parses its input with net/http's request parser, as the server
// does with what a client writes on the socket, and serves what parses.
func FuzzAPIRaw(f *testing.F) {
	f.Add(uint8(0), uint8(0), []byte("GET /v1/status HTTP/1.1\r\nHost: rdmad\r\n\r\n"))
	f.Add(uint8(4), uint8(0), []byte("POST /v1/reload HTTP/1.1\r\nHost: rdmad\r\nContent-Length: 2\r\n\r\n{}"))
	f.Add(uint8(2), uint8(1), []byte("POST /v1/probe?peer=%00expire%20x HTTP/1.1\r\nHost: rdmad\r\nContent-Length: 0\r\n\r\n"))
	f.Add(uint8(6), uint8(0), []byte("POST /v1/probe?peer=192.0.2.17&peer=x HTTP/1.1\r\nHost: rdmad\r\n\r\n"))
	f.Add(uint8(4), uint8(0), []byte("POST http://rdmad/v1/policy/apply HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"))
	f.Add(uint8(9), uint8(0), []byte("GET /v1/./status/.. HTTP/1.0\r\n\r\n"))
	f.Add(uint8(1), uint8(2), []byte("OPTIONS * HTTP/1.1\r\nHost: rdmad\r\n\r\n"))
	f.Add(uint8(4), uint8(0), []byte("POST /v1/bw?peer=192.0.2.17 HTTP/1.1\r\nHost: rdmad\r\nContent-Length: 0\r\n\r\n"))
	f.Add(uint8(6), uint8(0), []byte("GET /v1/resources HTTP/1.1\r\nHost: rdmad\r\n\r\n"))
	f.Add(uint8(2), uint8(0), []byte("POST /v1/bw?peer=192.0.2.17&size=65536&size=9999999&duration=5s HTTP/1.1\r\nHost: rdmad\r\n\r\n"))
	f.Fuzz(func(t *testing.T, who, mode uint8, raw []byte) {
		r, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
		if err != nil {
			return // the server answers 400 itself; nothing reaches the handler
		}
		r.RemoteAddr = "@"
		fzServe(t, who, mode, r)
		// Drain the body as the server does after the handler.
		io.Copy(io.Discard, io.LimitReader(r.Body, MaxBodyBytes+1))
	})
}

// TestFuzzCallersLevels keeps fzCallers in step with the access roles: the
// fuzz targets' expectations are only as good as the levels written there.
func TestFuzzCallersLevels(t *testing.T) {
	for _, c := range fzCallers {
		if got := fzRoles.LevelFor(c.peer.Caller()); got != c.level {
			t.Errorf("%s: LevelFor = %v, want %v", c.name, got, c.level)
		}
	}
	if !strings.HasPrefix(fzCallers[0].name, "root") {
		t.Error("fzCallers[0] must be root (the seeds use it)")
	}
}

// TestFuzzRoutesKnowServer keeps fzRoutes in step with the routes the
// daemon serves: those of server.go's table and those the daemon adds with
// Handle (package daemon, e.g. sinks.go). A route the oracle does not know
// would be a false failure of the fuzz targets (404 expected), and a route
// nobody plays against.
func TestFuzzRoutesKnowServer(t *testing.T) {
	served := map[string]bool{}
	know := func(path string, rt route, where, add string) {
		t.Helper()
		served[path] = true
		fr, ok := fzRoutes[path]
		if !ok {
			t.Errorf("%s %s %s (%s) and fzRoutes does not know it: add it with %s", where, rt.method, path, rt.op, add)
			return
		}
		if fr.method != rt.method || fr.op != rt.op {
			t.Errorf("%s: %s %s (%s), fzRoutes has %s (%s)", path, where, rt.method, rt.op, fr.method, fr.op)
		}
	}
	for path, rt := range routes {
		know(path, rt, "server.go serves", "the level it must have, the backend calls it makes and seeds for a reader and a stranger")
	}
	for path, rt := range daemonHandles(t) {
		know(path, rt, "package daemon adds with Handle", "the level it must have and seeds for a reader and a stranger")
	}
	for path := range fzRoutes {
		if !served[path] {
			t.Errorf("fzRoutes has %s, which nothing serves: remove it", path)
		}
	}
}

// daemonHandles returns the routes package daemon adds with
// Server.Handle(path, http.MethodX, access.Op, h), read from its source.
func daemonHandles(t *testing.T) map[string]route {
	t.Helper()
	fset := token.NewFileSet()
	ops := map[string]access.Op{}
	for _, f := range parseSources(t, fset, "../access") {
		for _, d := range f.Decls {
			if gd, ok := d.(*ast.GenDecl); ok && gd.Tok == token.CONST {
				for _, spec := range gd.Specs {
					vs := spec.(*ast.ValueSpec)
					if len(vs.Names) == 1 && len(vs.Values) == 1 {
						if lit, ok := vs.Values[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							v, _ := strconv.Unquote(lit.Value)
							ops[vs.Names[0].Name] = access.Op(v)
						}
					}
				}
			}
		}
	}
	sel := func(e ast.Expr, pkg string) string {
		if s, ok := e.(*ast.SelectorExpr); ok {
			if x, ok := s.X.(*ast.Ident); ok && x.Name == pkg {
				return s.Sel.Name
			}
		}
		return ""
	}
	found := map[string]route{}
	for _, f := range parseSources(t, fset, "..") {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) != 4 {
				return true
			}
			if fn, ok := call.Fun.(*ast.SelectorExpr); !ok || fn.Sel.Name != "Handle" {
				return true
			}
			method, opName := sel(call.Args[1], "http"), sel(call.Args[2], "access")
			if !strings.HasPrefix(method, "Method") || opName == "" {
				return true
			}
			where := fset.Position(call.Pos())
			lit, ok := call.Args[0].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				t.Errorf("%s: Handle with a path that is not a string literal; fzRoutes cannot be checked against it", where)
				return true
			}
			path, _ := strconv.Unquote(lit.Value)
			op, ok := ops[opName]
			if !ok {
				t.Errorf("%s: Handle with access.%s, which is no operation of daemon/access", where, opName)
			}
			found[path] = route{method: strings.ToUpper(strings.TrimPrefix(method, "Method")), op: op}
			return true
		})
	}
	if len(found) == 0 {
		t.Fatal("found no Handle(path, http.MethodX, access.Op, h) in package daemon: the parse of ../*.go is stale")
	}
	return found
}

// parseSources parses the Go files of dir, tests left out.
func parseSources(t *testing.T, fset *token.FileSet, dir string) []*ast.File {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(names) == 0 {
		t.Fatalf("no Go files in %s (%v)", dir, err)
	}
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	return files
}
