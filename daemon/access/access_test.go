package access

import (
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"
)

func TestDecide(t *testing.T) {
	const self = 1000
	pol := Roles{SelfUID: self, ReadGID: GID(500), AdminGID: GID(600)}
	callers := map[string]Caller{
		"root":          {UID: 0, GID: 0, Known: true},
		"self":          {UID: self, GID: self, Known: true},
		"reader":        {UID: 1001, GID: 1001, Groups: []uint32{20, 500}, Known: true},
		"reader-gid":    {UID: 1001, GID: 500, Known: true},
		"admin":         {UID: 1002, GID: 1002, Groups: []uint32{600}, Known: true},
		"admin-gid":     {UID: 1002, GID: 600, Known: true},
		"dbus-admin":    {UID: 1002, GID: NoGID, Groups: []uint32{1002, 600}, Known: true},
		"dbus-nogroups": {UID: 1003, GID: NoGID, Known: true},
		"stranger":      {UID: 1003, GID: 1003, Groups: []uint32{20}, Known: true},
		"root-group":    {UID: 1003, GID: 0, Groups: []uint32{0}, Known: true},
		"unknown":       {},
		// An unknown caller with fields that would match: Known decides.
		"unknown-root": {UID: 0, GID: 600, Groups: []uint32{500, 600}},
	}
	want := map[string]Level{
		"root": Admin, "self": Admin, "reader": Read, "reader-gid": Read, "admin": Admin, "admin-gid": Admin,
		"dbus-admin": Admin, "dbus-nogroups": 0, "stranger": 0, "root-group": 0, "unknown": 0, "unknown-root": 0,
	}
	for name, c := range callers {
		for _, op := range Ops() {
			need, _ := LevelOf(op)
			err := pol.Decide(c, op)
			if allowed := want[name] >= need; allowed != (err == nil) {
				t.Errorf("%s %s: %v, want allowed=%v", name, op, err, allowed)
			}
			var d *Denied
			if err != nil && !errors.As(err, &d) {
				t.Errorf("%s %s: error %T, want *Denied", name, op, err)
			}
		}
	}
}

// TestTable pins the trust model of DESIGN.md: the socket group reads,
// everything that changes state or makes the node act is admin.
func TestTable(t *testing.T) {
	want := map[Op]Level{
		Status: Read, Health: Read, Watch: Read, Metrics: Read, PolicyDiff: Read, Properties: Read, Doctor: Read, Resources: Read,
		Reload: Admin, PolicyApply: Admin, Probe: Admin, Bandwidth: Admin,
	}
	if len(Ops()) != len(want) {
		t.Errorf("table has %v, want %d operations", Ops(), len(want))
	}
	for op, l := range want {
		if got, ok := LevelOf(op); !ok || got != l {
			t.Errorf("%s: level %v (%v), want %v", op, got, ok, l)
		}
	}
	if _, ok := LevelOf("shutdown"); ok {
		t.Error("an op not in the table has a level")
	}
	// An op nobody put in the table is refused, even to root.
	err := Roles{}.Decide(Caller{UID: 0, Known: true}, "shutdown")
	if err == nil || !strings.Contains(err.Error(), "not in rdmad's access table") {
		t.Errorf("unknown op for root: %v", err)
	}
}

func TestZeroRolesIsRootOnly(t *testing.T) {
	var p Roles
	if p.LevelFor(Caller{UID: 0, Known: true}) != Admin {
		t.Error("zero Roles refuses root")
	}
	// gid 0 in the zero Roles must not mean "root's group".
	if l := p.LevelFor(Caller{UID: 5, GID: 0, Groups: []uint32{0}, Known: true}); l != 0 {
		t.Errorf("zero Roles gives a member of group 0 level %v", l)
	}
	if GID(NoGID) != (Group{}) {
		t.Error("GID(NoGID) is a group")
	}
}

func TestDeniedMessages(t *testing.T) {
	pol := Roles{ReadGID: GID(500), AdminGID: GID(600)}
	tests := []struct {
		c      Caller
		op     Op
		target string
		want   string
	}{
		{Caller{UID: 1001, GID: 1001, Groups: []uint32{500}, Known: true}, Reload, "/v1/reload",
			"uid 1001 may not change rdmad's state (/v1/reload): that needs root or the admin group ([daemon] admin_group, gid 600), and the caller has groups 1001,500; run it with sudo or ask an admin to add you to the admin group"},
		{Caller{UID: 1001, GID: NoGID, Groups: []uint32{1001, 500}, Known: true}, Probe, "Probe",
			"uid 1001 may not make rdmad probe now (Probe): that needs root or the admin group ([daemon] admin_group, gid 600), and the caller has groups 1001,500;"},
		// A socket-group member may not run a bandwidth test.
		{Caller{UID: 1001, GID: 1001, Groups: []uint32{500}, Known: true}, Bandwidth, "/v1/bw",
			"uid 1001 may not make rdmad run a bandwidth test (/v1/bw): that needs root or the admin group ([daemon] admin_group, gid 600)"},
		{Caller{UID: 7, GID: 7, Known: true}, Status, "",
			"uid 7 may not read rdmad's state (status): that needs the socket group ([daemon] socket_group, gid 500) or the admin group ([daemon] admin_group, gid 600), and the caller has groups 7; ask an admin"},
		{Caller{UID: 7, GID: NoGID, Known: true}, PolicyApply, "", "and the caller has no groups"},
		{Caller{}, Status, "/v1/status", "a caller whose credentials are unknown may not do anything (/v1/status)"},
	}
	for _, tt := range tests {
		err := pol.Decide(tt.c, tt.op)
		var d *Denied
		if !errors.As(err, &d) {
			t.Fatalf("%v %s: %v, want *Denied", tt.c, tt.op, err)
		}
		d.Target = tt.target
		if !strings.Contains(d.Error(), tt.want) {
			t.Errorf("message\n %s\nwant it to contain\n %s", d.Error(), tt.want)
		}
	}
	if got := (Roles{}).Decide(Caller{UID: 9, GID: 9, Known: true}, Reload).Error(); !strings.Contains(got, "admin_group, none") {
		t.Errorf("message without an admin group: %s", got)
	}
}

// TestDocsShowTheTable keeps the access tables of docs/API.md,
// docs/SECURITY.md and docs/DBUS.md in step with the code.
func TestDocsShowTheTable(t *testing.T) {
	row := regexp.MustCompile("(?m)^\\| `([a-z-]+)` \\| (read|admin) \\|")
	for _, doc := range []string{"docs/API.md", "docs/SECURITY.md"} {
		b, err := os.ReadFile("../../" + doc)
		if err != nil {
			t.Fatal(err)
		}
		got := map[Op]string{}
		for _, m := range row.FindAllStringSubmatch(string(b), -1) {
			if prev, ok := got[Op(m[1])]; ok && prev != m[2] {
				t.Errorf("%s shows %s twice, as %s and as %s", doc, m[1], prev, m[2])
			}
			got[Op(m[1])] = m[2]
		}
		for _, op := range Ops() {
			l, _ := LevelOf(op)
			if got[op] != l.String() {
				t.Errorf("%s shows %s as %q, the table says %s: add or fix its row (| `%s` | %s | ...)", doc, op, got[op], l, op, l)
			}
			delete(got, op)
		}
		for op := range got {
			t.Errorf("%s lists operation %s, which the table does not have", doc, op)
		}
	}
	d, err := os.ReadFile("../../docs/DBUS.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"`Reload` (operation `reload`)", "`Apply` (`policy-apply`)", "`Probe` (`probe`)", "`Bandwidth` (`bandwidth`)", "operation `properties`"} {
		if !strings.Contains(string(d), s) {
			t.Errorf("docs/DBUS.md does not say %q", s)
		}
	}
}
