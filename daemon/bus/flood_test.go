package bus

import (
	"encoding/json"
	"fmt"
	"github.com/rdmad/rdmad/daemon/service/servicetest"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon/access"
	"github.com/rdmad/rdmad/internal/syncbuf"
)

// flood is the helper's "flood" op: arg Reload calls on one connection, 64
// in flight at a time, as fast as the bus takes them; res.Value is the
// JSON count of the answers by error name ("" for success).
func flood(obj dbus.BusObject, arg string, res *helperResult) error {
	n, err := strconv.Atoi(arg)
	if err != nil {
		return fmt.Errorf("flood %q: not a count", arg)
	}
	done := make(chan *dbus.Call, 64)
	counts := map[string]int{}
	count := func(c *dbus.Call) {
		var de dbus.Error
		if c.Err == nil {
			counts[""]++
		} else if ok := asDBusError(c.Err, &de); ok {
			counts[de.Name]++
		} else {
			counts[c.Err.Error()]++
		}
	}
	inFlight := 0
	for range n {
		if inFlight == cap(done) {
			count(<-done)
			inFlight--
		}
		obj.Go(Interface+".Reload", 0, done)
		inFlight++
	}
	for ; inFlight > 0; inFlight-- {
		count(<-done)
	}
	b, _ := json.Marshal(counts)
	res.Value = string(b)
	return nil
}

func asDBusError(err error, de *dbus.Error) bool {
	if e, ok := err.(dbus.Error); ok {
		*de = e
		return true
	}
	if e, ok := err.(*dbus.Error); ok {
		*de = *e
		return true
	}
	return false
}

// TestIntegrationRefusalFlood is issue #24's journal flood: any local user
// may send Reload (the bus policy lets everyone), and one process sent
// 52,100 in 10 s, each refused with a WARN line. Here a socket-group member
// sends 5,000 on one connection: rdmad refuses them all (access table, then
// the uid's budget), logs one refusal line for the uid with the count of
// the others, counts them for the metric, and the real messages still get
// through: an admin's and root's Reload are served and logged at once.
func TestIntegrationRefusalFlood(t *testing.T) {
	requireRoot(t)
	b := startBus(t, "")
	store := newStore()
	fb := servicetest.ReloadOnly(store)
	var logs syncbuf.Buffer
	counters := &Counters{}
	roles := access.Roles{ReadGID: access.GID(socketGroup), AdminGID: access.GID(adminGroup)}
	startRunOpts(t, Options{Store: store, Backend: fb, Roles: func() access.Roles { return roles }, Counters: counters,
		Logger: slog.New(slog.NewTextHandler(io.MultiWriter(&logs, testWriter{t}), nil))}).waitFor(t, 0, apitype.OK, "")

	const calls = 5000
	start := time.Now()
	res := b.asUser(readerUID, readerGID, []int{socketGroup}, "flood", strconv.Itoa(calls))
	took := time.Since(start)
	var got map[string]int
	if err := json.Unmarshal([]byte(res.Value), &got); err != nil {
		t.Fatalf("flood result %+v: %v", res, err)
	}
	t.Logf("%d refused calls in %v: %v", calls, took, got)
	if got[ErrAccessDenied]+got[ErrLimitsExceeded] != calls || got[ErrLimitsExceeded] == 0 {
		t.Errorf("answers %v; want all %d AccessDenied or LimitsExceeded, some of them LimitsExceeded (the budget)", got, calls)
	}
	if fb.Count("Reload") != 0 {
		t.Fatalf("the flood reached the backend: %d reloads", fb.Count("Reload"))
	}
	refused := counters.Refused()
	if refused[RefusedDenied]+refused[RefusedBudget] != calls || refused[RefusedBudget] != uint64(got[ErrLimitsExceeded]) {
		t.Errorf("counters %v; want %d refusals, %d of them over the budget", refused, calls, got[ErrLimitsExceeded])
	}

	// One line per uid and refusalLogEvery (the flood may straddle one
	// interval's end), not one per call.
	lines := strings.Count(logs.String(), "D-Bus call refused")
	if max := 1 + int(took/refusalLogEvery) + 1; lines < 1 || lines > max {
		t.Errorf("%d refusal lines for %d refused calls in %v; want 1 to %d", lines, calls, took, max)
	}
	if n := len(logs.String()); n > 16<<10 {
		t.Errorf("the flood logged %d bytes; want a few lines", n)
	}
	if !strings.Contains(logs.String(), fmt.Sprintf("uid=%d", readerUID)) {
		t.Errorf("the refusal line does not name uid %d:\n%s", readerUID, logs.String())
	}

	// The real messages: an admin-group member (never budgeted) and root.
	if res := b.asUser(adminUID, adminGID, []int{adminGroup}, "call", "Reload"); res.ErrMsg != "" {
		t.Errorf("Reload by an admin-group member after the flood: %+v", res)
	}
	if err := rootConn(t).Object(Name, Path).Call(Interface+".Reload", 0).Err; err != nil {
		t.Errorf("root's Reload after the flood: %v", err)
	}
	if fb.Count("Reload") != 2 {
		t.Errorf("backend reloaded %d times, want 2", fb.Count("Reload"))
	}
	if n := strings.Count(logs.String(), `msg="D-Bus method call" method=Reload`); n != 2 {
		t.Errorf("%d \"D-Bus method call\" lines for the two real Reloads, want 2:\n%s", n, logs.String())
	}
	// Still over its budget right after: the flooder gets LimitsExceeded.
	if res := b.asUser(readerUID, readerGID, []int{socketGroup}, "flood", "40"); !strings.Contains(res.Value, ErrLimitsExceeded) {
		t.Errorf("a second flood: %s, want LimitsExceeded answers", res.Value)
	}
}

// TestIntegrationProbeArgLoggedAfterCheck is issue #24's forged journal
// lines: an admin's Probe argument was logged before it was checked, so
// "\n" and ESC in it reached root's journal. A refused argument is not
// logged at all; a valid one is, once checked.
func TestIntegrationProbeArgLoggedAfterCheck(t *testing.T) {
	requireRoot(t)
	startBus(t, "")
	store := newStore()
	pb := newProbeBackend(store)
	var logs syncbuf.Buffer
	startRunOpts(t, Options{Store: store, Backend: pb, Roles: func() access.Roles { return access.Roles{} },
		Logger: slog.New(slog.NewTextHandler(io.MultiWriter(&logs, testWriter{t}), nil))}).waitFor(t, 0, apitype.OK, "")
	obj := rootConn(t).Object(Name, Path)
	forged := "x\nlevel=INFO msg=\"configuration loaded\"\x1b[2J"
	if err := obj.Call(Interface+".Probe", 0, forged).Err; !isDBusError(err, ErrInvalidArgs) {
		t.Fatalf("Probe(%q): %v, want InvalidArgs", forged, err)
	}
	if strings.Contains(logs.String(), "D-Bus method call") || strings.Contains(logs.String(), "\x1b") {
		t.Errorf("the refused argument reached the log:\n%s", logs.String())
	}
	if err := obj.Call(Interface+".Probe", 0, upPeer.Name).Err; err != nil {
		t.Fatalf("Probe(%s): %v", upPeer.Name, err)
	}
	if want := "msg=\"D-Bus method call\" method=Probe sender="; !strings.Contains(logs.String(), want) || !strings.Contains(logs.String(), "peer="+upPeer.Name) {
		t.Errorf("the valid Probe is not logged with its peer:\n%s", logs.String())
	}
}
