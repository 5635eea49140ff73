package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon/access"
	"github.com/rdmad/rdmad/daemon/service"
	"github.com/rdmad/rdmad/daemon/service/servicetest"
)

func getResources(t *testing.T, b service.Backend, p Peer) *httptest.ResponseRecorder {
	t.Helper()
	s := NewServer(b, access.Roles{ReadGID: access.GID(500)})
	r := httptest.NewRequest("GET", "/v1/resources", nil)
	r = r.WithContext(context.WithValue(r.Context(), peerKey{}, p))
	w := httptest.NewRecorder()
	s.ServeHTTP(w, r)
	return w
}

func TestServeResources(t *testing.T) {
	member := Peer{UID: 1001, GID: 1001, Groups: []uint32{500}, Known: true}
	b := &servicetest.Backend{Res: apitype.Resources{Processes: []apitype.ProcessResources{
		{PID: 4242, Comm: "ibv_rc_pingpong", Devices: []string{"rxe0"}, ResourceCounts: apitype.ResourceCounts{QPs: 1, MRs: 1, PinnedBytes: 4096}}}}}
	w := getResources(t, b, member)
	if w.Code != 200 {
		t.Fatalf("socket group member: %d %s, want 200", w.Code, w.Body)
	}
	var got apitype.Resources
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || len(got.Processes) != 1 || got.Processes[0].Comm != "ibv_rc_pingpong" {
		t.Errorf("body %s (%v)", w.Body, err)
	}
	if !strings.Contains(w.Body.String(), `"devices": []`) {
		t.Errorf("body %s: want devices as []", w.Body)
	}

	stranger := Peer{UID: 1003, GID: 1003, Known: true}
	if w := getResources(t, b, stranger); w.Code != 403 {
		t.Errorf("stranger: %d, want 403", w.Code)
	}

	b.SetErr("Resources", errors.New("rdmares: another read of the RDMA resources is in progress for over 10s; try again later"))
	if w := getResources(t, b, member); w.Code != 503 || !strings.Contains(w.Body.String(), "try again") {
		t.Errorf("busy: %d %s, want 503 saying to try again", w.Code, w.Body)
	}

	// A backend that cannot read them says so.
	if w := getResources(t, servicetest.CoreOnly(&servicetest.Backend{}), member); w.Code != 501 || !strings.Contains(w.Body.String(), "rdmactl resources") {
		t.Errorf("no reader: %d %s, want 501 naming rdmactl resources", w.Code, w.Body)
	}
}
