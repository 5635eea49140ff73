//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The D-Bus tests talk to rdmad on the VM's real system bus with busctl,
// the way an admin would, through the policy file the package installs.

const (
	dbusName   = "org.rdmad.Agent1"
	dbusPath   = "/org/rdmad/Agent1"
	dbusIface  = "org.rdmad.Agent1"
	dbusPolicy = "/usr/share/dbus-1/system.d/org.rdmad.Agent1.conf"
)

// dbusReady waits until rdmad is active and owns its name on the system bus.
func dbusReady(t *testing.T) {
	t.Helper()
	requireVM(t)
	waitActive(t)
	if _, err := os.Stat(dbusPolicy); err != nil {
		t.Fatalf("the package did not install the bus policy: %v", err)
	}
	waitFor(t, 30*time.Second, "rdmad owns "+dbusName, func() (bool, string) {
		out, err := run("busctl", "--system", "call", "org.freedesktop.DBus", "/org/freedesktop/DBus",
			"org.freedesktop.DBus", "NameHasOwner", "s", dbusName)
		if err != nil {
			return false, err.Error()
		}
		if strings.TrimSpace(out) != "b true" {
			s, _ := status()
			return false, fmt.Sprintf("NameHasOwner: %s; dbus component: %+v", strings.TrimSpace(out), s.Components["dbus"])
		}
		return true, ""
	})
}

// dbusGet returns busctl's text for one property of the agent object
// (e.g. `s "running"`, `t 3`).
func dbusGet(t *testing.T, prop string) string {
	t.Helper()
	return strings.TrimSpace(mustRun(t, "busctl", "--system", "get-property", dbusName, dbusPath, dbusIface, prop))
}

// dbusGeneration returns ConfigGeneration.
func dbusGeneration(t *testing.T) uint64 {
	t.Helper()
	out := dbusGet(t, "ConfigGeneration")
	n, err := strconv.ParseUint(strings.TrimPrefix(out, "t "), 10, 64)
	if err != nil || !strings.HasPrefix(out, "t ") {
		t.Fatalf("ConfigGeneration = %q, want t <number>", out)
	}
	return n
}

// dbusAsNobody runs busctl as uid/gid 65534 and returns its output and error.
func dbusAsNobody(args ...string) (string, error) {
	return run("setpriv", append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", "busctl", "--system"}, args...)...)
}

func TestDBusIntrospect(t *testing.T) {
	dbusReady(t)
	out := mustRun(t, "busctl", "--system", "introspect", dbusName, dbusPath)
	for _, want := range []string{
		"org.rdmad.Agent1 ", ".Reload ", ".Apply ", ".ConfigGeneration ", ".State ", ".LinkChanged ",
		"org.freedesktop.DBus.ObjectManager ", ".GetManagedObjects ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("busctl introspect %s %s lacks %q:\n%s", dbusName, dbusPath, want, out)
		}
	}
	tree := mustRun(t, "busctl", "--system", "tree", dbusName)
	if !strings.Contains(tree, dbusPath+"/device/rxe0") {
		t.Errorf("busctl tree %s lacks rxe0's device object:\n%s", dbusName, tree)
	}
	// Any local user may introspect.
	if out, err := dbusAsNobody("introspect", dbusName, dbusPath); err != nil || !strings.Contains(out, ".ConfigGeneration ") {
		t.Errorf("busctl introspect as nobody: %v\n%s", err, out)
	}
}

func TestDBusProperties(t *testing.T) {
	dbusReady(t)
	if got := dbusGet(t, "State"); got != `s "running"` {
		t.Errorf("State = %s, want %s; status: %+v", got, `s "running"`, mustStatus(t).Components)
	}
	if got, want := dbusGet(t, "Devices"), `ao 1 "`+dbusPath+`/device/rxe0"`; got != want {
		t.Errorf("Devices = %s, want %s", got, want)
	}
	ports := strings.TrimSpace(mustRun(t, "busctl", "--system", "get-property", dbusName, dbusPath+"/device/rxe0",
		"org.rdmad.Agent1.Device", "Ports"))
	if want := `a(usssss) 1 1 "ACTIVE" "LinkUp" "Ethernet" "eth0"`; !strings.HasPrefix(ports, want) {
		t.Errorf("rxe0 Ports = %s, want it to start with %s", ports, want)
	}
	out, err := dbusAsNobody("get-property", dbusName, dbusPath, dbusIface, "State")
	if err != nil || strings.TrimSpace(out) != `s "running"` {
		t.Errorf("State as nobody = %q, %v; want %s", out, err, `s "running"`)
	}
}

func TestDBusReload(t *testing.T) {
	dbusReady(t)
	before := dbusGeneration(t)
	out := strings.TrimSpace(mustRun(t, "busctl", "--system", "call", dbusName, dbusPath, dbusIface, "Reload"))
	if want := fmt.Sprintf("t %d", before+1); out != want {
		t.Errorf("busctl call Reload = %q, want %q", out, want)
	}
	waitFor(t, 10*time.Second, "ConfigGeneration advances", func() (bool, string) {
		got := dbusGeneration(t)
		return got == before+1, fmt.Sprintf("ConfigGeneration %d, want %d", got, before+1)
	})

	// Only root may reload: the installed policy refuses nobody.
	out, err := dbusAsNobody("call", dbusName, dbusPath, dbusIface, "Reload")
	if err == nil || !strings.Contains(err.Error(), "Access denied") {
		t.Errorf("busctl call Reload as nobody: %q, %v; want access denied", out, err)
	}
	if got := dbusGeneration(t); got != before+1 {
		t.Errorf("ConfigGeneration = %d after nobody's Reload, want %d", got, before+1)
	}
}

// TestDBusDoctor: Doctor on the system bus runs the troubleshooting table
// in rdmad, in its sandbox, as GET /v1/doctor does: on rxe0 the device,
// verbs and port checks pass; the caller's own checks (clock, memlock-user)
// are not rdmad's. nobody, not in the socket group, is refused by rdmad
// although the installed bus policy lets the call through.
func TestDBusDoctor(t *testing.T) {
	dbusReady(t)
	out := mustRun(t, "busctl", "--system", "--json=short", "call", dbusName, dbusPath, dbusIface, "Doctor", "u", "0")
	var reply struct {
		Type string `json:"type"`
		Data []json.RawMessage
	}
	if err := json.Unmarshal([]byte(out), &reply); err != nil || len(reply.Data) != 2 || reply.Type != "sa(sssss)" {
		t.Fatalf("busctl call Doctor = %s (%v), want (s, a(sssss))", out, err)
	}
	var worst string
	var checks [][]string
	if err := json.Unmarshal(reply.Data[0], &worst); err != nil {
		t.Fatalf("worst: %v", err)
	}
	if err := json.Unmarshal(reply.Data[1], &checks); err != nil {
		t.Fatalf("checks: %v", err)
	}
	byID := map[string][]string{}
	for _, c := range checks {
		if len(c) != 5 {
			t.Fatalf("check %q has %d fields, want 5", c, len(c))
		}
		byID[c[0]] = c
	}
	for _, id := range []string{"daemon", "devices", "uverbs", "ports"} {
		if c := byID[id]; c == nil || c[2] != "ok" {
			t.Errorf("Doctor check %s = %q, want ok", id, c)
		}
	}
	for _, id := range []string{"clock", "memlock-user"} {
		if c := byID[id]; c != nil {
			t.Errorf("Doctor ran %s, a check of the caller's session: %q", id, c)
		}
	}
	t.Logf("Doctor: worst %s, %d checks", worst, len(checks))

	out, err := dbusAsNobody("call", dbusName, dbusPath, dbusIface, "Doctor", "u", "0")
	if err == nil || !strings.Contains(err.Error(), "Access denied") {
		t.Errorf("busctl call Doctor as nobody: %q, %v; want access denied", out, err)
	}
}
