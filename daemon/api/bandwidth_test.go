package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon/access"
	"github.com/rdmad/rdmad/daemon/service"
	"github.com/rdmad/rdmad/daemon/service/servicetest"
)

func postBW(t *testing.T, b service.Backend, p Peer, query string) *httptest.ResponseRecorder {
	t.Helper()
	s := NewServer(b, access.Roles{ReadGID: access.GID(500), AdminGID: access.GID(600)})
	r := httptest.NewRequest("POST", "/v1/bw"+query, nil)
	r = r.WithContext(context.WithValue(r.Context(), peerKey{}, p))
	w := httptest.NewRecorder()
	s.ServeHTTP(w, r)
	return w
}

func TestServeBandwidth(t *testing.T) {
	admin := Peer{UID: 1002, GID: 1002, Groups: []uint32{600}, Known: true}
	member := Peer{UID: 1001, GID: 1001, Groups: []uint32{500}, Known: true}
	b := &servicetest.Backend{}

	// A socket-group member may read, never make the node fill a link.
	if w := postBW(t, b, member, "?peer=192.0.2.17"); w.Code != 403 || !strings.Contains(w.Body.String(), "run a bandwidth test") {
		t.Errorf("socket group member: %d %s, want 403", w.Code, w.Body)
	}
	if got := b.Requests(); len(got) != 0 {
		t.Fatalf("a refused request reached the backend: %+v", got)
	}

	w := postBW(t, b, admin, "?peer=192.0.2.17")
	if w.Code != 200 {
		t.Fatalf("admin: %d %s", w.Code, w.Body)
	}
	var res apitype.BandwidthResult
	if err := json.Unmarshal(w.Body.Bytes(), &res); err != nil || res.Gbps != 1.5 || res.MsgRate != 2861 {
		t.Errorf("body %s (%v)", w.Body, err)
	}
	if !strings.Contains(w.Body.String(), `"gbps"`) || !strings.Contains(w.Body.String(), `"msg_rate"`) {
		t.Errorf("body %s lacks gbps and msg_rate", w.Body)
	}
	want := service.BandwidthRequest{Peer: "192.0.2.17", Op: "write", Size: 65536, Duration: 5 * time.Second}
	if got := b.Requests(); len(got) != 1 || got[0] != want {
		t.Errorf("backend got %+v; want the defaults %+v", got, want)
	}
	postBW(t, b, admin, "?peer=node2&op=read&size=4096&duration=3s")
	if got := b.Requests(); got[len(got)-1] != (service.BandwidthRequest{Peer: "node2", Op: "read", Size: 4096, Duration: 3 * time.Second}) {
		t.Errorf("backend got %+v", got[len(got)-1])
	}

	n := len(b.Requests())
	for _, tt := range []struct{ q, want string }{
		{"", "say which peer"},
		{"?peer=a%00b", "is not an IP address or host name"},
		{"?peer=p&op=atomic", "use write, read or send"},
		{"?peer=p&size=x", "is not a number of bytes"},
		{"?peer=p&size=0", "size 0 is out of range"},
		{"?peer=p&size=1048577", "size 1048577 is out of range"},
		{"?peer=p&duration=forever", "is not a duration"},
		{"?peer=p&duration=31s", "duration 31s is out of range"},
		{"?peer=p&duration=0s", "out of range"},
		{"?peer=p&duration=1500500us", "finer than a millisecond"},
	} {
		w := postBW(t, b, admin, tt.q)
		if w.Code != 400 || !strings.Contains(w.Body.String(), tt.want) {
			t.Errorf("%s: %d %s, want 400 saying %q", tt.q, w.Code, w.Body, tt.want)
		}
	}
	if got := b.Requests(); len(got) != n {
		t.Errorf("bad requests reached the backend: %+v", got[n:])
	}

	b.SetErr("Bandwidth", errors.New("bw: 192.0.2.17 refused the bandwidth test: bandwidth tests are disabled there; set [probe] bandwidth = true"))
	if w := postBW(t, b, admin, "?peer=192.0.2.17"); w.Code != 422 || !strings.Contains(w.Body.String(), "[probe] bandwidth = true") {
		t.Errorf("refused: %d %s, want 422 with the reason", w.Code, w.Body)
	}
	if w := postBW(t, servicetest.CoreOnly(&servicetest.Backend{}), admin, "?peer=192.0.2.17"); w.Code != 501 {
		t.Errorf("no tester: %d %s, want 501", w.Code, w.Body)
	}
	if w := postBW(t, b, admin, ""); w.Code != 400 {
		t.Errorf("GET-less POST without peer: %d", w.Code)
	}
}

// TestServeLoopbackBandwidth: POST /v1/bw?loopback= asks the backend for a
// loopback test of the port named (or of the first ACTIVE port), with the
// queue pairs asked; it is admin level like a peer test, and bad targets
// and counts are refused before the backend is asked.
func TestServeLoopbackBandwidth(t *testing.T) {
	admin := Peer{UID: 1002, GID: 1002, Groups: []uint32{600}, Known: true}
	member := Peer{UID: 1001, GID: 1001, Groups: []uint32{500}, Known: true}
	b := &servicetest.Backend{}
	if w := postBW(t, b, member, "?loopback=rxe0"); w.Code != 403 {
		t.Errorf("socket group member: %d %s, want 403", w.Code, w.Body)
	}
	for q, want := range map[string]service.BandwidthRequest{
		"?loopback=rxe0:1&qps=4": {Loopback: true, Device: "rxe0", Port: 1, QPs: 4, Op: "write", Size: 65536, Duration: 5 * time.Second},
		"?loopback=&op=read":     {Loopback: true, Op: "read", Size: 65536, Duration: 5 * time.Second},
		"?peer=node2&qps=2":      {Peer: "node2", QPs: 2, Op: "write", Size: 65536, Duration: 5 * time.Second},
	} {
		if w := postBW(t, b, admin, q); w.Code != 200 {
			t.Errorf("%s: %d %s", q, w.Code, w.Body)
			continue
		}
		if got := b.Requests(); got[len(got)-1] != want {
			t.Errorf("%s: backend got %+v; want %+v", q, got[len(got)-1], want)
		}
	}
	n := len(b.Requests())
	for _, tt := range []struct{ q, want string }{
		{"?loopback=rxe0&peer=node2", "give peer or loopback, not both"},
		{"?loopback=rxe0&qps=17", "qps 17 is out of range; use 1 to 16"},
		{"?loopback=rxe0&qps=0", "qps 0 is out of range"},
		{"?loopback=rxe0&qps=many", "is not a number of queue pairs"},
		{"?peer=node2&qps=99", "qps 99 is out of range"},
		{"?loopback=rxe0:9x", "of rxe0 is not a port number"},
		{"?loopback=rxe0&duration=31s", "duration 31s is out of range"},
	} {
		w := postBW(t, b, admin, tt.q)
		if w.Code != 400 || !strings.Contains(w.Body.String(), tt.want) {
			t.Errorf("%s: %d %s, want 400 saying %q", tt.q, w.Code, w.Body, tt.want)
		}
	}
	if got := b.Requests(); len(got) != n {
		t.Errorf("bad requests reached the backend: %+v", got[n:])
	}
}
