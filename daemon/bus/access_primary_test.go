package bus

import (
	"fmt"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/daemon/access"
	"github.com/rdmad/rdmad/daemon/service/servicetest"
)

// TestIntegrationPrimaryGroupCounts: on D-Bus as on the socket, the admin
// group counts when it is only the caller's primary group (setpriv --regid
// GROUP --clear-groups, as a service with Group= and no
// SupplementaryGroups= runs). The bus puts the primary gid of SO_PEERCRED
// into UnixGroupIDs with the supplementary groups of SO_PEERGROUPS
// (dbus-daemon since 1.13.10, dbus-broker), and rdmad decides from that
// list: the refusal of a caller whose only group is the socket group names
// that group, which the caller has as its primary group alone.
func TestIntegrationPrimaryGroupCounts(t *testing.T) {
	requireRoot(t)
	b := startBus(t, "")
	store := newStore()
	fb := servicetest.ReloadOnly(store)
	startWithRoles(t, store, fb, access.Roles{ReadGID: access.GID(socketGroup), AdminGID: access.GID(adminGroup)})

	res := b.asUser(readerUID, socketGroup, nil, "call", "Reload")
	if want := fmt.Sprintf("the caller has groups %d;", socketGroup); res.ErrName != ErrAccessDenied || !strings.Contains(res.ErrMsg, want) {
		t.Errorf("Reload by uid %d with the socket group as its primary group only: %q %q, want AccessDenied saying %q (the bus reports the primary gid)", readerUID, res.ErrName, res.ErrMsg, want)
	}
	if n := fb.Count("Reload"); n != 0 {
		t.Fatalf("backend reloaded %d times for a reader, want 0", n)
	}
	if res := b.asUser(adminUID, adminGroup, nil, "call", "Reload"); res.ErrMsg != "" || res.Value != "[2]" {
		t.Errorf("Reload by uid %d with the admin group as its primary group only: %+v, want generation 2", adminUID, res)
	}
	if n := fb.Count("Reload"); n != 1 {
		t.Errorf("backend reloaded %d times, want 1 (the admin's)", n)
	}
}
