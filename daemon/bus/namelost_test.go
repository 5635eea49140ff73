package bus

import (
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon/service/servicetest"
)

// TestIntegrationForgedNameLost is issue #41 item 2: any client of the bus
// may send rdmad a unicast NameLost signal that looks like the bus
// daemon's (its path, interface, member and body). Only the bus daemon's
// own (sender org.freedesktop.DBus, which no client can claim: the bus
// stamps each message with its sender's unique name) says the name is
// lost. Under a loop of forged signals for 60 s rdmad keeps its name in every check
// and never reports itself degraded; before the check it gave the name up
// and reconnected.
func TestIntegrationForgedNameLost(t *testing.T) {
	requireRoot(t)
	startBus(t, "")
	store := newStore()
	r := startRun(t, store, servicetest.ReloadOnly(store))
	r.waitFor(t, 0, apitype.OK, "")
	ok := r.len()

	checker := rootConn(t)
	var owner string
	if err := checker.BusObject().Call("org.freedesktop.DBus.GetNameOwner", 0, Name).Store(&owner); err != nil {
		t.Fatalf("GetNameOwner %s: %v", Name, err)
	}
	attacker := rootConn(t)
	forge := func() {
		msg := &dbus.Message{Type: dbus.TypeSignal, Flags: dbus.FlagNoReplyExpected, Headers: map[dbus.HeaderField]dbus.Variant{
			dbus.FieldPath:        dbus.MakeVariant(dbus.ObjectPath("/org/freedesktop/DBus")),
			dbus.FieldInterface:   dbus.MakeVariant("org.freedesktop.DBus"),
			dbus.FieldMember:      dbus.MakeVariant("NameLost"),
			dbus.FieldDestination: dbus.MakeVariant(owner),
			dbus.FieldSignature:   dbus.MakeVariant(dbus.SignatureOf("")),
		}, Body: []any{Name}}
		if call := attacker.Send(msg, nil); call.Err != nil {
			t.Fatalf("send the forged NameLost: %v", call.Err)
		}
	}
	// 60 s of it, as the "done when" asks (2 s with -short).
	d := 60 * time.Second
	if testing.Short() {
		d = 2 * time.Second
	}
	checks := 0
	for i, end := 0, time.Now().Add(d); time.Now().Before(end); i++ {
		forge()
		if i%4 == 0 {
			var now string
			if err := checker.BusObject().Call("org.freedesktop.DBus.GetNameOwner", 0, Name).Store(&now); err != nil || now != owner {
				t.Fatalf("check %d under forged NameLost signals: owner %q, %v; want %q kept", checks, now, err, owner)
			}
			checks++
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("%d forged NameLost signals' checks over %v: the name kept in every one", checks, d)
	// The last forged signals are handled by now: a round trip to rdmad
	// comes after them on its connection.
	var v dbus.Variant
	if err := checker.Object(Name, Path).Call(PropertiesInterface+".Get", 0, Interface, "State").Store(&v); err != nil {
		t.Fatalf("Get State: %v", err)
	}
	if n := r.len(); n != ok {
		r.mu.Lock()
		t.Errorf("forged NameLost signals made rdmad report %+v", r.all[ok:])
		r.mu.Unlock()
	}

}

// TestNameLostSender: the signal rdmad acts on is the bus daemon's alone;
// the same signal from a client's unique name, or the bus's sender on
// another path, is not a loss of the name. (rdmad asks for its name
// without allowing replacement, so the bus's own NameLost comes only with
// the connection's end; TestIntegrationForgedNameLost shows the forged one
// on a real bus.)
func TestNameLostSender(t *testing.T) {
	sig := func(sender, path string, body ...any) *dbus.Signal {
		return &dbus.Signal{Sender: sender, Path: dbus.ObjectPath(path), Name: "org.freedesktop.DBus.NameLost", Body: body}
	}
	for _, c := range []struct {
		sig  *dbus.Signal
		want bool
	}{
		{sig("org.freedesktop.DBus", "/org/freedesktop/DBus", Name), true},
		{sig(":1.42", "/org/freedesktop/DBus", Name), false},
		{sig("", "/org/freedesktop/DBus", Name), false},
		{sig("org.freedesktop.DBus", "/org/rdmad/Agent1", Name), false},
		{sig("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.example.Other"), false},
		{sig("org.freedesktop.DBus", "/org/freedesktop/DBus"), false},
	} {
		if got := nameLost(c.sig); got != c.want {
			t.Errorf("nameLost(%+v) = %v, want %v", *c.sig, got, c.want)
		}
	}
}
