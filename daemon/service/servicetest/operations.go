package servicetest

import (
	"net/http"

	"github.com/rdmad/rdmad/daemon/access"
)

// An Operation is one operation of the service contract as the fuzz
// oracles of both transports expect it.
type Operation struct {
	// Op is the operation's entry in the access table, and Level the level
	// the oracles expect it to need (written here, not read from the
	// table, so that a change of the table fails the oracles).
	Op    access.Op
	Level access.Level
	// Calls are the Backend methods an allowed request makes, in order.
	Calls []string
	// Method and Path are the socket API's route.
	Method, Path string
	// DBus is the method of org.rdmad.Agent1, with its in and out
	// signatures; "" for an operation D-Bus serves as properties.
	DBus, DBusIn, DBusOut string
	// DBusMore are further methods of org.rdmad.Agent1 that serve the
	// operation, at its level and with its calls: a newer form whose
	// arguments can grow (BandwidthTest, Bandwidth with options).
	DBusMore []DBusMethod
}

// A DBusMethod is a method of org.rdmad.Agent1 with its in and out
// signatures.
type DBusMethod struct {
	Name, In, Out string
}

// Operations are the operations of the service contract, each served by
// both transports (Status, Health and PolicyDiff as properties on D-Bus).
var Operations = []Operation{
	{Op: access.Status, Level: access.Read, Calls: []string{"Snapshot"}, Method: http.MethodGet, Path: "/v1/status"},
	{Op: access.Health, Level: access.Read, Calls: []string{"Snapshot"}, Method: http.MethodGet, Path: "/v1/health"},
	{Op: access.PolicyDiff, Level: access.Read, Calls: []string{"PolicyDiff", "Snapshot"}, Method: http.MethodGet, Path: "/v1/policy/diff"},
	{Op: access.Reload, Level: access.Admin, Calls: []string{"Reload"}, Method: http.MethodPost, Path: "/v1/reload",
		DBus: "Reload", DBusIn: "", DBusOut: "t"},
	{Op: access.PolicyApply, Level: access.Admin, Calls: []string{"PolicyApply"}, Method: http.MethodPost, Path: "/v1/policy/apply",
		DBus: "Apply", DBusIn: "", DBusOut: ""},
	{Op: access.Probe, Level: access.Admin, Calls: []string{"Probe"}, Method: http.MethodPost, Path: "/v1/probe",
		DBus: "Probe", DBusIn: "s", DBusOut: "stds"},
	{Op: access.Bandwidth, Level: access.Admin, Calls: []string{"Bandwidth"}, Method: http.MethodPost, Path: "/v1/bw",
		DBus: "Bandwidth", DBusIn: "ssuu", DBusOut: "ddttts",
		DBusMore: []DBusMethod{{Name: "BandwidthTest", In: "sa{sv}", Out: "a{sv}"}}},
	{Op: access.Doctor, Level: access.Read, Calls: []string{"Doctor"}, Method: http.MethodGet, Path: "/v1/doctor",
		DBus: "Doctor", DBusIn: "u", DBusOut: "sa(sssss)"},
	{Op: access.Resources, Level: access.Read, Calls: []string{"Resources"}, Method: http.MethodGet, Path: "/v1/resources",
		DBus: "Resources", DBusIn: "", DBusOut: "a(usbuuuut)a(suuuut)s"},
}

// ByDBus returns the operation D-Bus serves as the method name (its DBus
// or one of its DBusMore).
func ByDBus(name string) (Operation, bool) {
	for _, o := range Operations {
		if o.DBus != "" && o.DBus == name {
			return o, true
		}
		for _, m := range o.DBusMore {
			if m.Name == name {
				return o, true
			}
		}
	}
	return Operation{}, false
}
