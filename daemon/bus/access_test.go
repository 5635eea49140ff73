package bus

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon/access"
	"github.com/rdmad/rdmad/daemon/service"
	"github.com/rdmad/rdmad/daemon/service/servicetest"
	"github.com/rdmad/rdmad/daemon/state"
)

// Users and groups of the access tests. dbus-daemon refuses connections
// from a uid without a passwd entry, so the callers are the system users
// daemon (1) and bin (2) found on every Debian system; the groups need not
// exist: setpriv sets them, the kernel captures them at connect
// (SO_PEERGROUPS) and the bus reports them.
const (
	readerUID, readerGID = 1, 1 // in the socket group only
	adminUID, adminGID   = 2, 2 // in the admin group only
	socketGroup          = 61001
	adminGroup           = 61002
)

// startWithRoles runs the service on store and backend with fixed access
// roles and waits until it owns the name.
func startWithRoles(t *testing.T, store *state.Store, backend service.Backend, roles access.Roles) {
	t.Helper()
	startRunOpts(t, Options{Store: store, Backend: backend, Roles: func() access.Roles { return roles }}).waitFor(t, 0, apitype.OK, "")
}

// TestIntegrationAccessTable runs real callers with other uids and groups
// against rdmad on a bus with the shipped policy file: the socket group's
// member may read but not Reload, Apply or Probe (rdmad's AccessDenied, the
// backend untouched); the admin group's member may do all three, although
// the bus policy names no group; and a reload of the policy (here: the
// admin group dropped) takes effect on the next call.
func TestIntegrationAccessTable(t *testing.T) {
	requireRoot(t)
	b := startBus(t, "")
	store := newStore()
	pb := newProbeBackend(store)
	pb.SetErr("PolicyApply", nil)
	fb := pb
	var pol atomic.Pointer[access.Roles]
	pol.Store(&access.Roles{SelfUID: 0, ReadGID: access.GID(socketGroup), AdminGID: access.GID(adminGroup)})
	startRunOpts(t, Options{Store: store, Backend: fb, Roles: func() access.Roles { return *pol.Load() }}).waitFor(t, 0, apitype.OK, "")

	applies := func() int { return fb.Count("PolicyApply") }
	reader := func(op, arg string) helperResult {
		return b.asUser(readerUID, readerGID, []int{socketGroup}, op, arg)
	}
	admin := func(op, arg string) helperResult {
		return b.asUser(adminUID, adminGID, []int{adminGroup}, op, arg)
	}

	t.Run("socket group reads", func(t *testing.T) {
		if res := reader("get", "State"); res.ErrMsg != "" || res.Value != "running" {
			t.Errorf("Get State as a socket-group member: %+v", res)
		}
	})
	for _, tt := range []struct{ op, arg, method, verb string }{
		{"call", "Reload", "Reload", "change rdmad's state"},
		{"call", "Apply", "Apply", "change rdmad's state"},
		{"probe", "192.0.2.17", "Probe", "make rdmad probe now"},
	} {
		t.Run("socket group "+tt.method, func(t *testing.T) {
			res := reader(tt.op, tt.arg)
			want := fmt.Sprintf("uid %d may not ", readerUID) + tt.verb + " (" + tt.method + ")"
			if res.ErrName != ErrAccessDenied || !strings.Contains(res.ErrMsg, want) || !strings.Contains(res.ErrMsg, "admin_group") {
				t.Errorf("%s as a socket-group member: %q %q, want AccessDenied %q naming admin_group", tt.method, res.ErrName, res.ErrMsg, want)
			}
		})
	}
	if fb.Count("Reload") != 0 || applies() != 0 || pb.probes() != 0 {
		t.Fatalf("the socket-group member made the backend run %d reloads, %d applies, %d probes; want none", fb.Count("Reload"), applies(), pb.probes())
	}

	t.Run("admin group Reload", func(t *testing.T) {
		if res := admin("call", "Reload"); res.ErrMsg != "" || res.Value != "[2]" {
			t.Errorf("Reload as an admin-group member: %+v, want generation 2", res)
		}
	})
	t.Run("admin group Apply", func(t *testing.T) {
		if res := admin("call", "Apply"); res.ErrMsg != "" {
			t.Errorf("Apply as an admin-group member: %+v", res)
		}
	})
	t.Run("admin group Probe", func(t *testing.T) {
		if res := admin("probe", upPeer.Name); res.ErrMsg != "" || !strings.HasPrefix(res.Value, "[up ") {
			t.Errorf("Probe as an admin-group member: %+v", res)
		}
	})
	if fb.Count("Reload") != 1 || applies() != 1 || pb.probes() != 1 {
		t.Errorf("the admin-group member made the backend run %d reloads, %d applies, %d probes; want one each", fb.Count("Reload"), applies(), pb.probes())
	}

	// A reload that drops admin_group: the next call is refused.
	pol.Store(&access.Roles{ReadGID: access.GID(socketGroup)})
	if res := admin("call", "Reload"); res.ErrName != ErrAccessDenied || !strings.Contains(res.ErrMsg, "admin_group, none") {
		t.Errorf("Reload by the former admin group after the policy changed: %q %q", res.ErrName, res.ErrMsg)
	}
	if fb.Count("Reload") != 1 {
		t.Errorf("backend reloaded %d times, want still 1", fb.Count("Reload"))
	}
}

// TestIntegrationNoGroupIsNotRoot: a caller with no supplementary groups
// (the bus then reports none, or only its primary group) must not count as
// a member of gid 0 when admin_group is root's group.
func TestIntegrationNoGroupIsNotRoot(t *testing.T) {
	requireRoot(t)
	b := startBus(t, "")
	store := newStore()
	fb := servicetest.ReloadOnly(store)
	startWithRoles(t, store, fb, access.Roles{AdminGID: access.GID(0)})
	if res := b.asUser(readerUID, readerGID, nil, "call", "Reload"); res.ErrName != ErrAccessDenied {
		t.Errorf("Reload by uid %d without groups, admin_group root: %q %q, want AccessDenied", readerUID, res.ErrName, res.ErrMsg)
	}
	if res := b.asUser(readerUID, readerGID, []int{0}, "call", "Reload"); res.ErrMsg != "" {
		t.Errorf("Reload by uid %d in group 0, admin_group root: %q %q, want success", readerUID, res.ErrName, res.ErrMsg)
	}
	if fb.Count("Reload") != 1 {
		t.Errorf("backend reloaded %d times, want 1", fb.Count("Reload"))
	}
}
