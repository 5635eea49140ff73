package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon/access"
	"github.com/rdmad/rdmad/daemon/service"
	"github.com/rdmad/rdmad/daemon/service/servicetest"
)

func TestServeHTTP(t *testing.T) {
	const self, member, admin, stranger = 1000, 1001, 1002, 1003
	pol := access.Roles{SelfUID: self, ReadGID: access.GID(500), AdminGID: access.GID(600)}
	peers := map[string]Peer{
		"root":   {UID: 0, GID: 0, Known: true},
		"self":   {UID: self, GID: self, Known: true},
		"member": {UID: member, GID: member, Groups: []uint32{20, 500}, Known: true},
		"admin":  {UID: admin, GID: 600, Known: true},
		// In the admin group through a supplementary group only, and
		// not in the socket group: admin implies read.
		"admin2": {UID: admin + 10, GID: admin + 10, Groups: []uint32{20, 600}, Known: true},
		// Root's group is not root.
		"wheel":    {UID: stranger, GID: 0, Groups: []uint32{0}, Known: true},
		"stranger": {UID: stranger, GID: stranger, Groups: []uint32{20}, Known: true},
		"unknown":  {},
	}
	tests := []struct {
		peer, method, path string
		code               int
		errHas             string
	}{
		{"root", "GET", "/v1/status", 200, ""},
		{"self", "GET", "/v1/status", 200, ""},
		{"member", "GET", "/v1/status", 200, ""},
		{"admin", "GET", "/v1/status", 200, ""},
		{"stranger", "GET", "/v1/status", 403, "uid 1003 may not read"},
		{"unknown", "GET", "/v1/status", 403, "credentials are unknown may not do anything (/v1/status)"},
		{"wheel", "GET", "/v1/status", 403, "uid 1003 may not read rdmad's state (/v1/status)"},
		{"admin2", "GET", "/v1/status", 200, ""},
		{"admin2", "POST", "/v1/reload", 200, ""},
		{"root", "POST", "/v1/reload", 200, ""},
		{"self", "POST", "/v1/reload", 200, ""},
		{"admin", "POST", "/v1/reload", 200, ""},
		{"member", "POST", "/v1/reload", 403, "uid 1001 may not change rdmad's state (/v1/reload): that needs root or the admin group ([daemon] admin_group, gid 600), and the caller has groups 1001,20,500"},
		{"root", "GET", "/v1/reload", 405, "GET /v1/reload is not allowed; use POST"},
		{"root", "POST", "/v1/status", 405, "use GET"},
		{"root", "HEAD", "/v1/status", 200, ""},
		{"root", "GET", "/v2/status", 404, "no route /v2/status"},
		{"root", "GET", "/", 404, "routes: GET /v1/doctor, GET /v1/health, GET /v1/policy/diff, GET /v1/resources, GET /v1/status, POST /v1/bw, POST /v1/policy/apply, POST /v1/probe, POST /v1/reload"},
		{"member", "GET", "/v1/policy/diff", 200, ""},
		{"member", "POST", "/v1/policy/apply", 403, "may not change rdmad's state (/v1/policy/apply)"},
		{"admin", "POST", "/v1/policy/apply", 200, ""},
		// A probe makes the node send traffic: admin level.
		{"member", "POST", "/v1/probe?peer=192.0.2.17", 403, "uid 1001 may not make rdmad probe now (/v1/probe)"},
		{"admin", "POST", "/v1/probe?peer=192.0.2.17", 200, ""},
		{"admin", "POST", "/v1/probe", 400, "say which peer"},
		{"admin", "POST", "/v1/probe?peer=198.51.100.1", 422, "not a configured peer"},
		{"stranger", "POST", "/v1/probe?peer=192.0.2.17", 403, "uid 1003 may not make rdmad probe now"},
		// The doctor reads: the socket group may run it, strangers not;
		// the interval is bounded before the backend waits for it.
		{"member", "GET", "/v1/doctor", 200, ""},
		{"member", "GET", "/v1/doctor?interval=0", 200, ""},
		{"member", "GET", "/v1/doctor?interval=11s", 400, "is not a duration from 0 to 10s"},
		{"member", "GET", "/v1/doctor?interval=-1s", 400, "use e.g. ?interval=2s"},
		{"member", "GET", "/v1/doctor?interval=forever", 400, "use e.g. ?interval=2s"},
		{"stranger", "GET", "/v1/doctor", 403, "uid 1003 may not"},
		{"member", "POST", "/v1/doctor", 405, "use GET"},
	}
	for _, tt := range tests {
		t.Run(tt.peer+" "+tt.method+" "+tt.path, func(t *testing.T) {
			b := &servicetest.Backend{Peers: map[string]apitype.Peer{"192.0.2.17": {Name: "192.0.2.17", State: apitype.PeerUp}}}
			s := NewServer(b, pol)
			r := httptest.NewRequest(tt.method, tt.path, nil)
			r = r.WithContext(context.WithValue(r.Context(), peerKey{}, peers[tt.peer]))
			w := httptest.NewRecorder()
			s.ServeHTTP(w, r)
			if w.Code != tt.code {
				t.Fatalf("code = %d, want %d; body %s", w.Code, tt.code, w.Body)
			}
			if tt.code >= 400 && tt.method != "HEAD" {
				var eb apitype.ErrorBody
				if err := json.Unmarshal(w.Body.Bytes(), &eb); err != nil || !strings.Contains(eb.Error, tt.errHas) {
					t.Errorf("error body %q (%v), want it to contain %q", w.Body, err, tt.errHas)
				}
			}
			if tt.code == 405 && w.Header().Get("Allow") == "" {
				t.Error("405 without an Allow header")
			}
			wantReloads, wantApplies := 0, 0
			if tt.path == "/v1/reload" && tt.code == 200 {
				wantReloads = 1
			}
			if tt.path == "/v1/policy/apply" && tt.code == 200 {
				wantApplies = 1
			}
			if got := b.Count("Reload"); got != wantReloads {
				t.Errorf("backend reloaded %d times, want %d", got, wantReloads)
			}
			if got := b.Count("PolicyApply"); got != wantApplies {
				t.Errorf("backend applied the policy %d times, want %d", got, wantApplies)
			}
		})
	}
}

func TestReloadRejected(t *testing.T) {
	b := &servicetest.Backend{}
	b.SetReject("x.toml:1: bad")
	s := NewServer(b, access.Roles{})
	r := httptest.NewRequest("POST", "/v1/reload", nil)
	r = r.WithContext(context.WithValue(r.Context(), peerKey{}, Peer{UID: 0, Known: true}))
	w := httptest.NewRecorder()
	s.ServeHTTP(w, r)
	var res apitype.ReloadResult
	if err := json.Unmarshal(w.Body.Bytes(), &res); err != nil {
		t.Fatal(err)
	}
	if w.Code != http.StatusUnprocessableEntity || res.OK || res.Error == "" {
		t.Errorf("rejected reload answered %d %+v, want 422 with the error", w.Code, res)
	}
}

// serve starts a Server on a real socket in a temp dir.
func serve(t *testing.T, b service.Backend, pol access.Roles) (path string, stop func()) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "rdmad.sock")
	ln, err := Listen(path, SocketAccess{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- NewServer(b, pol).Serve(ctx, ln, time.Second) }()
	return path, func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}
}

func unixClient(path string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", path)
	}}}
}

func TestSocketPeerCredentials(t *testing.T) {
	// The test process is the peer: SO_PEERCRED must report our own uid,
	// which the policy admits as the daemon's own user.
	path, stop := serve(t, &servicetest.Backend{}, access.Roles{SelfUID: uint32(os.Geteuid())})
	defer stop()
	resp, err := unixClient(path).Get("http://rdmad/v1/status")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status as ourselves: %d", resp.StatusCode)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o660 {
		t.Errorf("socket mode %v, want 0660", fi.Mode().Perm())
	}
}

func TestListenStaleAndLive(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rdmad.sock")

	// A stale socket: bound, then its listener gone without unlinking.
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	ln, err = Listen(path, SocketAccess{})
	if err != nil {
		t.Fatalf("Listen over a stale socket: %v", err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()

	// A live one: refused, and left in place.
	if _, err := Listen(path, SocketAccess{}); !errors.Is(err, ErrInUse) {
		t.Fatalf("Listen over a live socket: %v, want ErrInUse", err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the live socket was removed: %v", err)
	}

	// A regular file is not ours to delete.
	file := filepath.Join(dir, "file.sock")
	os.WriteFile(file, []byte("keep"), 0o644)
	if _, err := Listen(file, SocketAccess{}); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("Listen over a regular file: %v", err)
	}
	if b, _ := os.ReadFile(file); string(b) != "keep" {
		t.Error("Listen clobbered a regular file")
	}
}

func TestMalformedRequests(t *testing.T) {
	b := &servicetest.Backend{}
	path, stop := serve(t, b, access.Roles{SelfUID: uint32(os.Geteuid())})
	defer stop()

	raw := func(req string) string {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, req)
		line, _ := bufio.NewReader(c).ReadString('\n')
		return line
	}
	tests := []struct{ name, req, want string }{
		{"garbage", "\x00\x01\x02 hello\r\n\r\n", "HTTP/1.1 400"},
		{"huge header", "GET /v1/status HTTP/1.1\r\nHost: x\r\nX: " + strings.Repeat("a", 2*MaxHeaderBytes) + "\r\n\r\n", "HTTP/1.1 431"},
		{"reload with an ignored body", "POST /v1/reload HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n0123456789", "HTTP/1.1 200"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := raw(tt.req); !strings.HasPrefix(got, tt.want) {
				t.Errorf("answer %q, want %q", got, tt.want)
			}
		})
	}
	// The daemon still serves.
	resp, err := unixClient(path).Get("http://rdmad/v1/status")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("after malformed requests: %v %v", resp, err)
	}
	resp.Body.Close()
}

// TestConnectionLimit: a connection beyond the limit is refused at once
// with a 503 naming the limit, never left waiting in the backlog, and a
// freed slot is used again. The test runs as root (an admin), whose limit
// includes the reserved connections; limit_test.go has the per-uid bounds.
func TestConnectionLimit(t *testing.T) {
	path, stop := serve(t, &servicetest.Backend{}, access.Roles{SelfUID: uint32(os.Geteuid())})
	defer stop()
	// Fill every slot with an idle connection that never sends a request.
	var conns []net.Conn
	for i := 0; i < MaxConns+ReservedConns; i++ {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	// One more is answered at once: 503, and why.
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, DialContext: unixClient(path).Transport.(*http.Transport).DialContext}, Timeout: 5 * time.Second}
	resp, err := c.Get("http://rdmad/v1/status")
	if err != nil {
		t.Fatalf("request beyond %d connections: %v; want a 503", MaxConns+ReservedConns, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), fmt.Sprintf("holds %d connections, its limit", MaxConns+ReservedConns)) {
		t.Fatalf("request beyond the limit: %d %s; want 503 naming the limit", resp.StatusCode, body)
	}
	// A freed slot serves again (once the server has seen the close).
	conns[0].Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := c.Get("http://rdmad/v1/status")
		if err == nil && resp.StatusCode == http.StatusOK {
			resp.Body.Close()
			break
		}
		if err == nil {
			resp.Body.Close()
		}
		if time.Now().After(deadline) {
			t.Fatalf("5s after a slot freed: %v, %v", resp, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, c := range conns[1:] {
		c.Close()
	}
}

// policySnap has two policies in force, one matching nothing, and the
// [memlock] section's pseudo-policy.
var policySnap = &apitype.Snapshot{Version: "test", State: apitype.Running, Policy: apitype.PolicyState{Policies: []apitype.PolicyStatus{
	{Name: "fabric", Mode: "enforce", Targets: []apitype.Target{{Kind: "mtu", Object: "ens1f0", State: apitype.InSync}}},
	{Name: "storage", Mode: "observe", Targets: []apitype.Target{}},
	{Name: "memlock", Mode: "enforce", Targets: []apitype.Target{{Kind: "memlock", Object: "rdmad", State: apitype.InSync}}},
}}}

// TestPolicyDiffNamesUnmatched: the diff names the declared policies and
// those that match nothing here, with [] rather than null for none.
func TestPolicyDiffNamesUnmatched(t *testing.T) {
	for _, tc := range []struct {
		name                string
		b                   service.Backend
		policies, unmatched []string
	}{
		{"policies", &servicetest.Backend{Snap: policySnap}, []string{"fabric", "storage"}, []string{"storage"}},
		{"none", &servicetest.Backend{}, []string{}, []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewServer(tc.b, access.Roles{})
			r := httptest.NewRequest("GET", "/v1/policy/diff", nil)
			r = r.WithContext(context.WithValue(r.Context(), peerKey{}, Peer{UID: 0, Known: true}))
			w := httptest.NewRecorder()
			s.ServeHTTP(w, r)
			if w.Code != http.StatusOK {
				t.Fatalf("GET /v1/policy/diff: %d %s", w.Code, w.Body)
			}
			for _, field := range []string{`"changes": [`, `"policies": [`, `"unmatched": [`} {
				if !strings.Contains(w.Body.String(), field) {
					t.Errorf("answer lacks %s: %s", field, w.Body)
				}
			}
			var res apitype.DiffResult
			if err := json.Unmarshal(w.Body.Bytes(), &res); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(res.Policies, tc.policies) || !slices.Equal(res.Unmatched, tc.unmatched) {
				t.Errorf("policies %q unmatched %q; want %q and %q", res.Policies, res.Unmatched, tc.policies, tc.unmatched)
			}
		})
	}
}
