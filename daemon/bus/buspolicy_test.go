package bus

import (
	"strings"
	"testing"

	"github.com/rdmad/rdmad/daemon/access"
)

// TestIntegrationBusPolicyPassesEveryMethod: on a bus with the shipped
// policy file, every method of org.rdmad.Agent1 that a caller below root
// sends reaches rdmad, whose access table decides (a static bus policy
// cannot know the groups rdmad.toml names). The policy once let only
// Reload, Apply, Probe and Doctor through, so the bus itself refused a
// socket-group member's Resources and an admin's Bandwidth ("Rejected send
// message") although the docs give them both. The method list is the
// interface rdmad introspects, so a new method cannot be forgotten.
func TestIntegrationBusPolicyPassesEveryMethod(t *testing.T) {
	requireRoot(t)
	b := startBus(t, "")
	store := newStore()
	pb := newProbeBackend(store)
	startWithRoles(t, store, pb, access.Roles{SelfUID: 0, ReadGID: access.GID(socketGroup), AdminGID: access.GID(adminGroup)})

	if len(agentIntrospection.Methods) < 6 {
		t.Fatalf("the introspected interface has %d methods; want Reload, Apply, Probe, Doctor, Resources, Bandwidth at least", len(agentIntrospection.Methods))
	}
	for _, m := range agentIntrospection.Methods {
		t.Run(m.Name, func(t *testing.T) {
			// Sent without arguments: rdmad answers (AccessDenied from
			// its table, or InvalidArgs), the bus does not refuse it.
			res := b.asNobody("call", m.Name)
			if strings.Contains(res.ErrMsg, "Rejected send message") {
				t.Fatalf("the bus policy refuses %s before rdmad sees it: %s", m.Name, res.ErrMsg)
			}
			if res.ErrName == "" || !strings.HasPrefix(res.ErrName, "org.") {
				t.Errorf("%s as nobody: %+v; want rdmad's refusal", m.Name, res)
			}
		})
	}
	// Past the bus, the table lets the right callers through: what they
	// get is the backend's answer (here a test backend without resources,
	// and Bandwidth's missing arguments), never AccessDenied.
	for _, tt := range []struct {
		who    string
		uid    int
		groups []int
		method string
	}{
		{"socket group", readerUID, []int{socketGroup}, "Resources"},
		{"socket group", readerUID, []int{socketGroup}, "Doctor"},
		{"admin group", adminUID, []int{adminGroup}, "Bandwidth"},
	} {
		t.Run(tt.who+" "+tt.method, func(t *testing.T) {
			res := b.asUser(tt.uid, tt.uid, tt.groups, "call", tt.method)
			if res.ErrName == ErrAccessDenied {
				t.Errorf("%s as a %s member: %+v; want it past the bus and rdmad's table", tt.method, tt.who, res)
			}
		})
	}
}
