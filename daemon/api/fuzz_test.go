package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon/access"
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
//   - a caller below admin never reaches Reload, PolicyApply or Probe, a
//     caller below read (a stranger, root's group, unknown credentials)
//     never reaches the backend or a handler at all, and an allowed
//     request reaches exactly its own backend method, once.

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

// fzBackend records every call. fail makes the calls that can fail fail;
// reject makes Reload report a rejected configuration.
type fzBackend struct {
	fail, reject bool

	mu    sync.Mutex
	calls []string
	peers []string
}

func (b *fzBackend) record(name string) {
	b.mu.Lock()
	b.calls = append(b.calls, name)
	b.mu.Unlock()
}

func (b *fzBackend) Snapshot() *apitype.Snapshot {
	b.record("Snapshot")
	return &apitype.Snapshot{Version: "fuzz", State: apitype.Running, Seq: 1}
}

func (b *fzBackend) Reload(ctx context.Context) (apitype.ReloadResult, error) {
	b.record("Reload")
	if b.fail {
		return apitype.ReloadResult{}, errors.New("fuzz: reload failed")
	}
	if b.reject {
		return apitype.ReloadResult{OK: false, Generation: 1, Error: "rdmad.toml:1: fuzz"}, nil
	}
	return apitype.ReloadResult{OK: true, Generation: 2}, nil
}

func (b *fzBackend) PolicyDiff(ctx context.Context) ([]apitype.Change, error) {
	b.record("PolicyDiff")
	if b.fail {
		return nil, errors.New("fuzz: diff failed")
	}
	return nil, nil
}

func (b *fzBackend) PolicyApply(ctx context.Context) (apitype.ApplyResult, error) {
	b.record("PolicyApply")
	if b.fail {
		return apitype.ApplyResult{}, errors.New("fuzz: apply failed")
	}
	return apitype.ApplyResult{}, nil
}

func (b *fzBackend) Doctor(ctx context.Context, interval time.Duration) (apitype.DoctorReport, error) {
	b.record("Doctor")
	if interval < 0 || interval > MaxDoctorInterval {
		return apitype.DoctorReport{}, fmt.Errorf("fuzz: interval %s reached the backend", interval)
	}
	if b.fail {
		return apitype.DoctorReport{}, errors.New("fuzz: 2 doctor runs are already in progress")
	}
	return apitype.DoctorReport{Worst: apitype.VerdictOK, Checks: []apitype.DoctorCheck{{ID: "daemon", Verdict: apitype.VerdictOK}}}, nil
}

func (b *fzBackend) Probe(ctx context.Context, peer string) (apitype.Peer, error) {
	b.record("Probe")
	b.mu.Lock()
	b.peers = append(b.peers, peer)
	b.mu.Unlock()
	if b.fail {
		return apitype.Peer{}, fmt.Errorf("peers: %q is not a configured peer", peer)
	}
	// The name comes back in the answer, as the real backend does.
	return apitype.Peer{Name: peer, State: apitype.PeerUp}, nil
}

// fzRoute is what the fuzz targets expect of a path: its method, its level
// and the backend calls an allowed request makes.
type fzRoute struct {
	method string
	level  access.Level
	call   string
}

var fzRoutes = map[string]fzRoute{
	"/v1/status":       {http.MethodGet, access.Read, "Snapshot"},
	"/v1/policy/diff":  {http.MethodGet, access.Read, "PolicyDiff"},
	"/v1/reload":       {http.MethodPost, access.Admin, "Reload"},
	"/v1/policy/apply": {http.MethodPost, access.Admin, "PolicyApply"},
	"/v1/probe":        {http.MethodPost, access.Admin, "Probe"},
	"/v1/doctor":       {http.MethodGet, access.Read, "Doctor"},
	// Handle's routes, as the daemon adds them (daemon/sinks.go).
	"/metrics":  {http.MethodGet, access.Read, "metrics"},
	"/v1/watch": {http.MethodGet, access.Read, "watch"},
}

// peerShaped is the oracle of a peer's name: an address or host name
// (letters, digits, '.', ':', '%', '_', '-', starting with a letter or
// digit), at most 253 bytes.
func peerShaped(name string) bool {
	if name == "" || len(name) > 253 {
		return false
	}
	for i, c := range []byte(name) {
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || !strings.ContainsRune(".:%_-", rune(c))) {
			return false
		}
	}
	return true
}

// adminCalls are the backend methods only an admin may reach.
var adminCalls = map[string]bool{"Reload": true, "PolicyApply": true, "Probe": true}

// fzServe serves r as caller number who on a fresh server and checks the
// answer. It returns the answer's status.
func fzServe(t *testing.T, who uint8, mode uint8, r *http.Request) int {
	t.Helper()
	caller := fzCallers[int(who)%len(fzCallers)]
	b := &fzBackend{fail: mode%3 == 1, reject: mode%3 == 2}
	s := NewServer(b, fzRoles)
	s.Handle("/metrics", http.MethodGet, access.Metrics, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.record("metrics")
		io.WriteString(w, "# metrics\n")
	}))
	s.Handle("/v1/watch", http.MethodGet, access.Watch, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.record("watch")
		writeJSON(w, http.StatusOK, struct{}{})
	}))
	r = r.WithContext(context.WithValue(r.Context(), peerKey{}, caller.peer))
	desc := fmt.Sprintf("%s %s %q (path %q, query %q) as %s", r.Method, r.URL.Path, r.RequestURI, r.URL.Path, r.URL.RawQuery, caller.name)

	w := httptest.NewRecorder()
	s.ServeHTTP(w, r)

	b.mu.Lock()
	calls := append([]string(nil), b.calls...)
	peers := append([]string(nil), b.peers...)
	b.mu.Unlock()

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
	if code >= 500 && !b.fail {
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
	// Allowed: the route's own call, once, and nothing else.
	if rt.call == "Probe" && !peerShaped(r.URL.Query().Get("peer")) {
		if code != http.StatusBadRequest || len(calls) != 0 {
			t.Fatalf("%s: probe without a peer, or of a name without the shape of one: %d, calls %q; want 400 and no call", desc, code, calls)
		}
		return code
	}
	if len(calls) != 1 || calls[0] != rt.call {
		t.Fatalf("%s: calls %q, want exactly [%s]", desc, calls, rt.call)
	}
	if rt.call == "Probe" && (len(peers) != 1 || peers[0] != r.URL.Query().Get("peer")) {
		t.Fatalf("%s: probed %q, want %q", desc, peers, r.URL.Query().Get("peer"))
	}
	if code < 400 && rt.call != "metrics" && !json.Valid(body) {
		t.Fatalf("%s: %d with a body that is not JSON: %q", desc, code, body)
	}
	return code
}

// FuzzAPI builds requests from its input: method, request target (escapes,
// NULs, "..", any bytes), a raw query (peer=...), one header and a body,
// and serves them as each kind of caller.
func FuzzAPI(f *testing.F) {
	f.Add(uint8(0), uint8(0), "GET", "/v1/status", "", "", "", []byte(nil))
	f.Add(uint8(4), uint8(0), "POST", "/v1/reload", "", "Content-Type", "application/json", []byte("{}"))
	f.Add(uint8(4), uint8(0), "POST", "/v1/probe", "peer=192.0.2.17", "", "", []byte(nil))
	f.Add(uint8(2), uint8(1), "POST", "/v1/probe", "peer=%00expire%20x", "", "", []byte(nil))
	f.Add(uint8(6), uint8(0), "HEAD", "/v1/status", "", "", "", []byte(nil))
	f.Add(uint8(9), uint8(0), "GET", "/v1/../v1/status", "", "", "", []byte(nil))
	f.Add(uint8(1), uint8(2), "POST", "/v1/policy/apply", "", "Transfer-Encoding", "chunked", []byte("0\r\n\r\n"))
	f.Add(uint8(5), uint8(0), "GET", "/v1%2fstatus", "", "", "", []byte(nil))
	f.Add(uint8(7), uint8(0), "GET", "/metrics", "", "X-Forwarded-For", "127.0.0.1", []byte(nil))
	f.Add(uint8(10), uint8(0), "POST", "/v1/reload\x00", "", "", "", []byte(nil))
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
