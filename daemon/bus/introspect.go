package bus

import (
	"encoding/xml"
	"strings"

	"github.com/godbus/dbus/v5"
	"github.com/godbus/dbus/v5/introspect"
)

// Names on the bus. The "1" is the interface version: an incompatible change
// gets a new name (org.rdmad.Agent2) next to the old one; adding members is
// compatible.
const (
	// Name is the well-known bus name rdmad owns.
	Name = "org.rdmad.Agent1"
	// Path is the agent's object; the ObjectManager of the device objects.
	Path dbus.ObjectPath = "/org/rdmad/Agent1"
	// Interface is the agent's interface on Path.
	Interface = "org.rdmad.Agent1"
	// DeviceInterface is the interface of every device object.
	DeviceInterface = "org.rdmad.Agent1.Device"
	// DevicePrefix is the parent path of the device objects.
	DevicePrefix = string(Path) + "/device"

	// ErrConfigRejected is the error of Reload when the configuration does
	// not load; its message is the loader's error.
	ErrConfigRejected = "org.rdmad.Agent1.Error.ConfigRejected"
	// ErrNotSupported is the error of a method this rdmad cannot do yet.
	ErrNotSupported = "org.rdmad.Agent1.Error.NotSupported"
	// ErrBusy is the error of a method call over the concurrency limit.
	ErrBusy = "org.rdmad.Agent1.Error.Busy"
	// ErrFailed is the error of a method whose work failed.
	ErrFailed = "org.rdmad.Agent1.Error.Failed"
	// ErrTimeout is the error of a Probe that gave no result in time
	// (Options.ProbeTimeout).
	ErrTimeout = "org.rdmad.Agent1.Error.Timeout"
	// ErrInvalidArgs is the specification's error for arguments of the
	// right type but a wrong value (an empty peer name).
	ErrInvalidArgs = "org.freedesktop.DBus.Error.InvalidArgs"
	// ErrAccessDenied is the bus's standard error for a refused caller.
	ErrAccessDenied = "org.freedesktop.DBus.Error.AccessDenied"
	// ErrLimitsExceeded is the specification's error for a caller over a
	// bound: here a uid over its budget of guarded calls.
	ErrLimitsExceeded = "org.freedesktop.DBus.Error.LimitsExceeded"

	PropertiesInterface     = "org.freedesktop.DBus.Properties"
	IntrospectableInterface = "org.freedesktop.DBus.Introspectable"
	ObjectManagerInterface  = "org.freedesktop.DBus.ObjectManager"
	peerInterface           = "org.freedesktop.DBus.Peer"
)

func ro(name, typ string) introspect.Property {
	return introspect.Property{Name: name, Type: typ, Access: "read"}
}

func in(name, typ string) introspect.Arg {
	return introspect.Arg{Name: name, Type: typ, Direction: "in"}
}

// emitsChangedSignal is the annotation that says whether a property's
// changes are signalled.
const emitsChangedSignal = "org.freedesktop.DBus.Property.EmitsChangedSignal"

// quiet marks a property whose changes are not signalled
// (EmitsChangedSignal "false", as systemd marks its fast-moving counters):
// clients read it when they need it.
func quiet(p introspect.Property) introspect.Property {
	p.Annotations = append(p.Annotations, introspect.Annotation{Name: emitsChangedSignal, Value: "false"})
	return p
}

// invalidates marks a property whose changes are signalled without its
// value (EmitsChangedSignal "invalidates": the name in
// PropertiesChanged's invalidated_properties, as systemd does for large
// values): clients that want the new value Get it.
func invalidates(p introspect.Property) introspect.Property {
	p.Annotations = append(p.Annotations, introspect.Annotation{Name: emitsChangedSignal, Value: "invalidates"})
	return p
}

// invalidatedOnly reports whether iface's property name is marked
// invalidates in the introspection data.
func invalidatedOnly(iface, name string) bool { return invalidatingProps[iface+"."+name] }

// invalidatingProps holds "interface.property" of every property marked
// invalidates.
var invalidatingProps = annotatedProps("invalidates")

// unsignalled reports whether iface's property name is marked quiet in the
// introspection data, the one place that says so.
func unsignalled(iface, name string) bool { return quietProps[iface+"."+name] }

// quietProps holds "interface.property" of every quiet property.
var quietProps = annotatedProps("false")

// annotatedProps returns "interface.property" of every property of rdmad's
// interfaces whose EmitsChangedSignal is value.
func annotatedProps(value string) map[string]bool {
	m := map[string]bool{}
	for _, i := range []introspect.Interface{agentIntrospection, deviceIntrospection} {
		for _, p := range i.Properties {
			for _, a := range p.Annotations {
				if a.Name == emitsChangedSignal && a.Value == value {
					m[i.Name+"."+p.Name] = true
				}
			}
		}
	}
	return m
}

func out(name, typ string) introspect.Arg {
	return introspect.Arg{Name: name, Type: typ, Direction: "out"}
}
func arg(name, typ string) introspect.Arg { return introspect.Arg{Name: name, Type: typ} }

// agentIntrospection describes Interface. docs/DBUS.md carries it verbatim
// (TestDocsMatchIntrospection keeps them equal).
var agentIntrospection = introspect.Interface{
	Name: Interface,
	Methods: []introspect.Method{
		{Name: "Reload", Args: []introspect.Arg{out("generation", "t")}},
		{Name: "Apply"},
		{Name: "Probe", Args: []introspect.Arg{in("peer", "s"), out("state", "s"), out("rtt_ns", "t"),
			out("loss_percent", "d"), out("reason", "s")}},
		{Name: "Doctor", Args: []introspect.Arg{in("interval_ms", "u"), out("worst", "s"), out("checks", "a(sssss)")}},
		{Name: "Resources", Args: []introspect.Arg{out("processes", "a(usbuuuut)"), out("devices", "a(suuuut)"), out("error", "s")}},
		{Name: "Bandwidth", Args: []introspect.Arg{in("peer", "s"), in("op", "s"), in("size", "u"), in("duration_ms", "u"),
			out("gbps", "d"), out("msg_rate", "d"), out("bytes", "t"), out("messages", "t"), out("elapsed_ns", "t"), out("local", "s")}},
		// Bandwidth's signature is frozen as the tuples are; BandwidthTest
		// takes its parameters as options and answers a record, so that
		// both can grow (loopback and qps came after Bandwidth).
		{Name: "BandwidthTest", Args: []introspect.Arg{in("target", "s"), in("options", "a{sv}"), out("result", "a{sv}")}},
	},
	Signals: []introspect.Signal{
		{Name: "LinkChanged", Args: []introspect.Arg{arg("device", "o"), arg("name", "s"), arg("port", "u"),
			arg("old_state", "s"), arg("new_state", "s"), arg("netdev", "s")}},
		{Name: "PolicyChanged", Args: []introspect.Arg{arg("policy", "s"), arg("kind", "s"), arg("object", "s"),
			arg("old_state", "s"), arg("new_state", "s"), arg("desired", "s"), arg("actual", "s"), arg("error", "s")}},
		{Name: "PeerStateChanged", Args: []introspect.Arg{arg("peer", "s"), arg("old_state", "s"), arg("new_state", "s"),
			arg("reason", "s")}},
		{Name: "HealthChanged", Args: []introspect.Arg{arg("condition", "s"), arg("old_status", "s"), arg("new_status", "s"),
			arg("reason", "s"), arg("message", "s"), arg("objects", "as")}},
		{Name: "ProbeFailed", Args: []introspect.Arg{arg("device", "o"), arg("probe", "s"), arg("peer", "s"), arg("error", "s")}},
		{Name: "ProbeRecovered", Args: []introspect.Arg{arg("device", "o"), arg("probe", "s"), arg("peer", "s")}},
	},
	Properties: []introspect.Property{
		ro("Version", "s"),
		ro("State", "s"),
		ro("Summary", "s"),
		ro("Healthy", "b"),
		ro("ConfigGeneration", "t"),
		ro("ConfigError", "s"),
		ro("ConfigPath", "s"),
		ro("Devices", "ao"),
		ro("PortsTotal", "u"),
		ro("PortsActive", "u"),
		ro("PolicyTargets", "a(sssssss)"),
		ro("Components", "a{s(ss)}"),
		quiet(ro("Peers", "a(sssssttd)")),
		ro("FleetMismatches", "a(sssssss)"),
		ro("PeerGroupFaults", "a(ss)"),
		ro("QoS", "a(ssbssaua(uu)aua(uus))"),
		ro("HealthStatus", "s"),
		ro("Health", "a{sv}"),
		// The a{sv} forms of PolicyTargets, Peers and QoS, whose tuples
		// are frozen (docs/DBUS.md, "Records"). PeerRecords leaves out the
		// figures that move with every probe, so that its changes can be
		// signalled; at 1,000 peers it is ~480 kB, too large to broadcast
		// at each change (BenchmarkPeerRecordsSignal), so only its name is.
		// PeerFigures has the figures and is quiet, like Peers.
		ro("PolicyTargetRecords", "aa{sv}"),
		invalidates(ro("PeerRecords", "aa{sv}")),
		quiet(ro("PeerFigures", "aa{sv}")),
		ro("QoSRecords", "aa{sv}"),
		// The a{sv} forms of FleetMismatches and PeerGroupFaults, signalled
		// with their values as the tuples are.
		ro("FleetMismatchRecords", "aa{sv}"),
		ro("PeerGroupFaultRecords", "aa{sv}"),
	},
}

// deviceIntrospection describes DeviceInterface.
var deviceIntrospection = introspect.Interface{
	Name: DeviceInterface,
	Properties: []introspect.Property{
		ro("Name", "s"),
		ro("NodeType", "s"),
		ro("NodeGUID", "s"),
		ro("FirmwareVersion", "s"),
		ro("Parent", "s"),
		ro("Uverbs", "s"),
		ro("Ports", "a(usssss)"),
		ro("Netdevs", "as"),
		ro("PolicyState", "s"),
		ro("PolicyTargets", "a(sssssss)"),
		ro("HealthStatus", "s"),
		ro("Health", "a{sv}"),
		ro("ProbeState", "s"),
		quiet(ro("ProbeResults", "a(ssbtts)")),
		ro("PolicyTargetRecords", "aa{sv}"),
	},
}

var propertiesIntrospection = introspect.Interface{
	Name: PropertiesInterface,
	Methods: []introspect.Method{
		{Name: "Get", Args: []introspect.Arg{in("interface_name", "s"), in("property_name", "s"), out("value", "v")}},
		{Name: "GetAll", Args: []introspect.Arg{in("interface_name", "s"), out("props", "a{sv}")}},
		{Name: "Set", Args: []introspect.Arg{in("interface_name", "s"), in("property_name", "s"), in("value", "v")}},
	},
	Signals: []introspect.Signal{
		{Name: "PropertiesChanged", Args: []introspect.Arg{arg("interface_name", "s"),
			arg("changed_properties", "a{sv}"), arg("invalidated_properties", "as")}},
	},
}

var objectManagerIntrospection = introspect.Interface{
	Name: ObjectManagerInterface,
	Methods: []introspect.Method{
		{Name: "GetManagedObjects", Args: []introspect.Arg{out("objects", "a{oa{sa{sv}}}")}},
	},
	Signals: []introspect.Signal{
		{Name: "InterfacesAdded", Args: []introspect.Arg{arg("object", "o"), arg("interfaces", "a{sa{sv}}")}},
		{Name: "InterfacesRemoved", Args: []introspect.Arg{arg("object", "o"), arg("interfaces", "as")}},
	},
}

// introspectXML returns the introspection document of path in v, or false
// when v has nothing at path.
func introspectXML(v *view, path dbus.ObjectPath) (string, bool) {
	node := introspect.Node{}
	obj, isObj := v.objects[path]
	children, isNode := v.nodes[path]
	if !isObj && !isNode {
		return "", false
	}
	node.Interfaces = append(node.Interfaces, introspect.IntrospectData, introspect.PeerData)
	if isObj {
		node.Interfaces = append(node.Interfaces, propertiesIntrospection)
		if _, ok := obj.props[Interface]; ok {
			node.Interfaces = append(node.Interfaces, objectManagerIntrospection, agentIntrospection)
		}
		if _, ok := obj.props[DeviceInterface]; ok {
			node.Interfaces = append(node.Interfaces, deviceIntrospection)
		}
	}
	for _, c := range children {
		node.Children = append(node.Children, introspect.Node{Name: c})
	}
	b, err := xml.MarshalIndent(node, "", " ")
	if err != nil {
		// The document is built from constants and valid path elements;
		// failing to marshal it is a programming error.
		panic("dbus: marshal introspection of " + string(path) + ": " + err.Error())
	}
	return strings.TrimSpace(introspect.IntrospectDeclarationString) + "\n" + string(b), true
}

// InterfaceXML returns the introspection XML of rdmad's own interfaces
// (org.rdmad.Agent1 and org.rdmad.Agent1.Device), as docs/DBUS.md shows it.
func InterfaceXML() string {
	node := introspect.Node{Interfaces: []introspect.Interface{agentIntrospection, deviceIntrospection}}
	b, err := xml.MarshalIndent(node, "", "  ")
	if err != nil {
		panic("dbus: marshal interface XML: " + err.Error())
	}
	return string(b)
}
