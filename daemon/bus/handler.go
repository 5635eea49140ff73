package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync/atomic"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon/access"
	"github.com/rdmad/rdmad/daemon/service"
	"github.com/rdmad/rdmad/internal/inflight"
)

// MaxCalls bounds the guarded method calls (Reload, Apply, Probe, Doctor,
// Resources, Bandwidth, BandwidthTest) in progress at once; godbus runs every call in its
// own goroutine, so this is what keeps a flood of calls from piling up
// behind the daemon's main loop.
const MaxCalls = 4

// CallTimeout bounds one Reload or Apply.
const CallTimeout = 2 * time.Minute

// credTimeout bounds the GetConnectionCredentials question to the bus.
const credTimeout = 5 * time.Second

// A handler is the godbus Handler of the service: it serves the current
// view, so objects appear and vanish with devices without exporting or
// unexporting anything.
type handler struct {
	cur     atomic.Pointer[view]
	backend service.Backend
	log     *slog.Logger
	sem     chan struct{}
	// calls counts the guarded calls in progress: a session waits for
	// them before it ends, and none starts while it does.
	calls inflight.Group
	// probeTimeout bounds one Probe (Options.ProbeTimeout).
	probeTimeout time.Duration
	// roles is the access roles in force (Options.Roles).
	roles func() access.Roles
	// gate bounds what refused callers cost (refuse.go).
	gate *gate
	// freshen is Options.Fresh (nil: none) and load the store's Load;
	// fresh is the view of the last snapshot a getter of peer figures
	// made fresh (serverObject.fresh), shared by the getters until the
	// session's own view catches up.
	freshen func(ctx context.Context)
	load    func() *apitype.Snapshot
	fresh   atomic.Pointer[view]
}

func newHandler(b service.Backend, log *slog.Logger) *handler {
	return &handler{backend: b, log: log, sem: make(chan struct{}, MaxCalls), probeTimeout: DefaultProbeTimeout,
		roles: func() access.Roles { return access.Roles{} }, gate: newGate(log)}
}

// LookupObject implements dbus.Handler.
func (h *handler) LookupObject(path dbus.ObjectPath) (dbus.ServerObject, bool) {
	v := h.cur.Load()
	if v == nil {
		return nil, false
	}
	_, isObj := v.objects[path]
	_, isNode := v.nodes[path]
	if !isObj && !isNode {
		return noObject(path), true
	}
	return serverObject{h: h, v: v, path: path}, true
}

// A noObject answers every call with the specification's UnknownObject
// (godbus's own answer is a non-standard NoSuchObject, which gdbus and
// sd-bus clients do not map).
type noObject dbus.ObjectPath

// LookupInterface implements dbus.ServerObject.
func (n noObject) LookupInterface(string) (dbus.Interface, bool) { return n, true }

// LookupMethod implements dbus.Interface.
func (n noObject) LookupMethod(string) (dbus.Method, bool) {
	return method{any: true, fn: func(call) ([]any, error) {
		return nil, dbusError("org.freedesktop.DBus.Error.UnknownObject",
			"no object %s; list the objects with GetManagedObjects on %s", string(n), Path)
	}}, true
}

// A serverObject is one path of a view.
type serverObject struct {
	h    *handler
	v    *view
	path dbus.ObjectPath
}

// iface is a method table.
type iface map[string]method

// LookupMethod implements dbus.Interface.
func (i iface) LookupMethod(name string) (dbus.Method, bool) {
	m, ok := i[name]
	return m, ok
}

// LookupInterface implements dbus.ServerObject. An empty name (a call
// without an interface header) finds the method on any interface.
func (o serverObject) LookupInterface(name string) (dbus.Interface, bool) {
	tables := o.interfaces()
	if name == "" {
		all := iface{}
		for _, t := range tables {
			for n, m := range t {
				all[n] = m
			}
		}
		return all, true
	}
	t, ok := tables[name]
	return t, ok
}

func (o serverObject) interfaces() map[string]iface {
	t := map[string]iface{
		IntrospectableInterface: {"Introspect": {out: []any{""}, fn: o.introspect}},
	}
	obj, ok := o.v.objects[o.path]
	if !ok {
		return t
	}
	t[PropertiesInterface] = iface{
		"Get":    {in: []any{"", ""}, out: []any{dbus.Variant{}}, fn: o.get},
		"GetAll": {in: []any{""}, out: []any{map[string]dbus.Variant{}}, fn: o.getAll},
		"Set":    {in: []any{"", "", dbus.Variant{}}, fn: o.set},
	}
	if _, ok := obj.props[Interface]; ok {
		t[ObjectManagerInterface] = iface{"GetManagedObjects": {out: []any{map[dbus.ObjectPath]props{}}, fn: o.managedObjects}}
		t[Interface] = iface{
			"Reload": {out: []any{uint64(0)}, fn: o.h.guarded("Reload", access.Reload, o.h.reload)},
			"Apply":  {fn: o.h.guarded("Apply", access.PolicyApply, o.h.apply)},
			"Probe": {in: []any{""}, out: []any{"", uint64(0), float64(0), ""},
				fn: o.h.guarded("Probe", access.Probe, o.h.probe)},
			"Doctor": {in: []any{uint32(0)}, out: []any{"", []doctorRow{}},
				fn: o.h.guarded("Doctor", access.Doctor, o.h.doctor)},
			"Resources": {out: []any{[]processRow{}, []deviceRow{}, ""},
				fn: o.h.guarded("Resources", access.Resources, o.h.resources)},
			"Bandwidth": {in: []any{"", "", uint32(0), uint32(0)}, out: []any{float64(0), float64(0), uint64(0), uint64(0), uint64(0), ""},
				fn: o.h.guarded("Bandwidth", access.Bandwidth, o.h.bandwidth)},
			// The same operation as Bandwidth, so the same access level.
			"BandwidthTest": {in: []any{"", map[string]dbus.Variant{}}, out: []any{map[string]dbus.Variant{}},
				fn: o.h.guarded("BandwidthTest", access.Bandwidth, o.h.bandwidthTest)},
		}
	}
	return t
}

// A call is one incoming method call after its arguments were decoded.
type call struct {
	conn   *dbus.Conn
	sender string
	args   []any
}

// A method is one D-Bus method. in and out hold a value of each argument's
// type, for decoding and for godbus's Method interface.
type method struct {
	in  []any
	out []any
	fn  func(c call) ([]any, error)
	// any makes the method take any arguments (and ignore them).
	any bool
}

// DecodeArguments implements dbus.ArgumentDecoder: it checks the
// arguments against in and passes the connection and the sender on to
// Call, which the privileged methods need to ask the bus for the caller's
// uid.
func (m method) DecodeArguments(conn *dbus.Conn, sender string, msg *dbus.Message, body []any) ([]any, error) {
	if m.any {
		return []any{call{conn: conn, sender: sender}}, nil
	}
	// dbus.Store converts between Go kinds (a uint32 7 would become the
	// string "\a"), so the wire types are compared first: the signature the
	// message carries, never dbus.SignatureOf(body...), which panics on what
	// godbus's decoder produces for a valid a{bb} (map[bool]bool): any local
	// user could have stopped rdmad with one call.
	if len(body) != len(m.in) || wireSignature(msg) != dbus.SignatureOf(m.in...).String() {
		return nil, dbus.ErrMsgInvalidArg
	}
	ptrs := make([]any, len(m.in))
	for i, sample := range m.in {
		ptrs[i] = reflect.New(reflect.TypeOf(sample)).Interface()
	}
	if len(ptrs) > 0 {
		if err := dbus.Store(body, ptrs...); err != nil {
			return nil, dbus.ErrMsgInvalidArg
		}
	}
	c := call{conn: conn, sender: sender}
	for _, p := range ptrs {
		c.args = append(c.args, reflect.ValueOf(p).Elem().Interface())
	}
	return []any{c}, nil
}

// wireSignature is the body's signature as msg carries it ("" for an
// empty body): godbus hands every method its message.
func wireSignature(msg *dbus.Message) string {
	s, _ := msg.Headers[dbus.FieldSignature].Value().(dbus.Signature)
	return s.String()
}

// Call implements dbus.Method.
func (m method) Call(args ...any) ([]any, error) {
	if len(args) != 1 {
		return nil, dbus.ErrMsgInvalidArg
	}
	c, ok := args[0].(call)
	if !ok {
		return nil, dbus.ErrMsgInvalidArg
	}
	return m.fn(c)
}

// NumArguments implements dbus.Method.
func (m method) NumArguments() int { return len(m.in) }

// NumReturns implements dbus.Method.
func (m method) NumReturns() int { return len(m.out) }

// ArgumentValue implements dbus.Method.
func (m method) ArgumentValue(i int) any { return m.in[i] }

// ReturnValue implements dbus.Method.
func (m method) ReturnValue(i int) any { return m.out[i] }

func dbusError(name, format string, a ...any) *dbus.Error {
	return dbus.NewError(name, []any{fmt.Sprintf(format, a...)})
}

func (o serverObject) introspect(call) ([]any, error) {
	x, ok := introspectXML(o.v, o.path)
	if !ok {
		return nil, dbus.MakeNoObjectError(o.path)
	}
	return []any{x}, nil
}

// figureProps are the agent's properties that carry peer figures, which
// the peer manager builds only when a reader asks (Options.Fresh).
var figureProps = map[string]bool{"Peers": true, "PeerFigures": true}

// fresh returns o served from a view whose peer figures are fresh: the
// getters of figureProps (and GetAll of the agent's interface) ask for
// them (Options.Fresh), as GET /v1/status and the metrics do, and serve
// the snapshot that holds them, whose view the session may not have built
// yet (it builds at most ten a second, and only after the store changed).
func (o serverObject) fresh() serverObject {
	if o.h.freshen == nil || o.path != Path {
		return o
	}
	o.h.freshen(context.Background()) // bounded by the daemon
	snap := o.h.load()
	if snap == nil || snap == o.v.snap {
		return o
	}
	for _, v := range []*view{o.h.cur.Load(), o.h.fresh.Load()} {
		if v != nil && v.snap == snap {
			o.v = v
			return o
		}
	}
	o.v = newView(snap)
	o.h.fresh.Store(o.v)
	return o
}

func (o serverObject) get(c call) ([]any, error) {
	ifc, name := c.args[0].(string), c.args[1].(string)
	if ifc == Interface && figureProps[name] {
		o = o.fresh()
	}
	obj := o.v.objects[o.path]
	if _, ok := obj.props[ifc]; !ok {
		return nil, dbusError("org.freedesktop.DBus.Error.UnknownInterface", "%s has no interface %s", o.path, ifc)
	}
	val, ok := obj.prop(ifc, name)
	if !ok {
		return nil, dbusError("org.freedesktop.DBus.Error.UnknownProperty", "%s has no property %s.%s", o.path, ifc, name)
	}
	return []any{val}, nil
}

func (o serverObject) getAll(c call) ([]any, error) {
	ifc := c.args[0].(string)
	if ifc == Interface {
		o = o.fresh()
	}
	ps, ok := o.v.objects[o.path].all(ifc)
	if !ok {
		if ifc == PropertiesInterface || ifc == IntrospectableInterface || ifc == ObjectManagerInterface || ifc == peerInterface {
			// Standard interfaces have no properties; an empty answer is
			// what gdbus and busctl expect.
			return []any{map[string]dbus.Variant{}}, nil
		}
		return nil, dbusError("org.freedesktop.DBus.Error.UnknownInterface", "%s has no interface %s", o.path, ifc)
	}
	return []any{ps}, nil
}

func (o serverObject) set(c call) ([]any, error) {
	ifc, name := c.args[0].(string), c.args[1].(string)
	if _, ok := o.v.objects[o.path].prop(ifc, name); ok {
		// The running configuration's file, as status reports it.
		cfg := "rdmad.toml"
		if o.v.snap != nil && o.v.snap.Config.Path != "" {
			cfg = o.v.snap.Config.Path
		}
		return nil, dbusError("org.freedesktop.DBus.Error.PropertyReadOnly",
			"%s.%s is read-only: it reports the daemon's state; change %s and call Reload", ifc, name, cfg)
	}
	return nil, dbusError("org.freedesktop.DBus.Error.UnknownProperty", "%s has no property %s.%s", o.path, ifc, name)
}

func (o serverObject) managedObjects(call) ([]any, error) {
	m := make(map[dbus.ObjectPath]props, len(o.v.objects))
	for p, obj := range o.v.objects {
		if p != Path {
			m[p] = obj.props
		}
	}
	return []any{m}, nil
}

// guarded wraps f with the access table's check for op (daemon/access, the
// same decision as on the socket) and the call limit. The bus policy
// (org.rdmad.Agent1.conf) lets every local user send these methods, since a
// static file cannot know the configured admin group: this check is the one
// that counts.
func (h *handler) guarded(name string, op access.Op, f func(ctx context.Context, c call) ([]any, error)) func(call) ([]any, error) {
	return func(c call) ([]any, error) {
		caller, err := h.gate.caller(c)
		if err != nil {
			h.gate.refused(RefusedUnverified, name, c.sender, access.Caller{}, err)
			return nil, dbusError(ErrAccessDenied, "%s: cannot verify the caller %s: %v; try again, and check that the system bus is dbus-daemon or dbus-broker", name, c.sender, err)
		}
		roles := h.roles()
		if !h.gate.take(roles, caller) {
			h.gate.refused(RefusedBudget, name, c.sender, caller, errOverBudget)
			return nil, dbusError(ErrLimitsExceeded, "%s: uid %d made more than %d calls in a burst (%d a second after it); slow down and try again", name, caller.UID, callBurst, callRate)
		}
		if err := roles.Decide(caller, op); err != nil {
			var d *access.Denied
			if errors.As(err, &d) {
				d.Target = name
			}
			h.gate.refused(RefusedDenied, name, c.sender, caller, err)
			// "Access denied" first, as busctl and gdbus users know it from
			// the bus's own refusals.
			return nil, dbusError(ErrAccessDenied, "Access denied: %v", err)
		}
		select {
		case h.sem <- struct{}{}:
			defer func() { <-h.sem }()
		default:
			return nil, dbusError(ErrBusy, "%s: %d calls are already in progress; try again in a moment", name, MaxCalls)
		}
		if !h.calls.Enter() {
			return nil, dbusError(ErrFailed, "%s: rdmad is leaving the bus; try again when it is back", name)
		}
		defer h.calls.Leave()
		ctx, cancel := context.WithTimeout(c.conn.Context(), CallTimeout)
		defer cancel()
		ctx = access.WithCaller(ctx, caller)
		ctx = context.WithValue(ctx, callKey{}, callInfo{method: name, sender: c.sender, caller: caller})
		if len(c.args) == 0 {
			// A method with arguments logs the call once it checked them.
			h.logCall(ctx)
		}
		return f(ctx, c)
	}
}

var errOverBudget = errors.New("over the uid's call budget")

// callerOf asks the bus who sent c: GetConnectionCredentials gives the uid
// and, from dbus-daemon 1.13.10 (Linux 4.13) and dbus-broker, the groups the bus captured
// when the caller connected. Without UnixGroupIDs only the uid counts (the
// caller then has no groups, and GID is access.NoGID, not root's 0).
func callerOf(c call) (access.Caller, error) {
	if c.sender == "" {
		return access.Caller{}, errors.New("the message has no sender (not a bus connection)")
	}
	ctx, cancel := context.WithTimeout(c.conn.Context(), credTimeout)
	defer cancel()
	var creds map[string]dbus.Variant
	err := c.conn.BusObject().CallWithContext(ctx, "org.freedesktop.DBus.GetConnectionCredentials", 0, c.sender).Store(&creds)
	if err != nil {
		return access.Caller{}, fmt.Errorf("GetConnectionCredentials %s: %w", c.sender, err)
	}
	uid, ok := creds["UnixUserID"].Value().(uint32)
	if !ok {
		return access.Caller{}, fmt.Errorf("GetConnectionCredentials %s: the bus gave no UnixUserID", c.sender)
	}
	caller := access.Caller{UID: uid, GID: access.NoGID, Known: true}
	if gs, ok := creds["UnixGroupIDs"].Value().([]uint32); ok {
		caller.Groups = gs
	}
	return caller, nil
}

func (h *handler) reload(ctx context.Context, _ call) ([]any, error) {
	res, err := h.backend.Reload(ctx)
	if err != nil {
		return nil, dbusError(ErrFailed, "reload: %v", err)
	}
	if !res.OK {
		return nil, dbusError(ErrConfigRejected, "%s (configuration generation %d stays in force; fix the file and call Reload again)",
			res.Error, res.Generation)
	}
	return []any{res.Generation}, nil
}

func (h *handler) apply(ctx context.Context, _ call) ([]any, error) {
	_, err := h.backend.PolicyApply(ctx)
	switch {
	case errors.Is(err, errors.ErrUnsupported):
		return nil, dbusError(ErrNotSupported, "Apply: this rdmad has no policy reconciler to run; policy is applied on reload and on kernel events")
	case err != nil:
		return nil, dbusError(ErrFailed, "apply: %v; see PolicyTargets for each target's error", err)
	}
	return nil, nil
}

// A doctorRow is one check of Doctor's answer: (id, title, verdict,
// message, fix).
type doctorRow struct {
	ID, Title, Verdict, Message, Fix string
}

// doctor serves Doctor(u interval_ms) -> (s worst, a(sssss) checks): the
// troubleshooting table as rdmad runs it on the node; interval_ms
// separates the counter reads of the rising-counter checks (0 skips them).
func (h *handler) doctor(ctx context.Context, c call) ([]any, error) {
	ms := c.args[0].(uint32)
	interval := time.Duration(ms) * time.Millisecond
	if !service.ValidDoctorInterval(interval) {
		return nil, dbusError(ErrInvalidArgs, "Doctor: interval_ms %d is over %d; use e.g. 2000 (0 skips the rising-counter checks)", ms, service.MaxDoctorInterval.Milliseconds())
	}
	h.logCall(ctx, "interval_ms", ms)
	rep, err := h.backend.Doctor(ctx, interval)
	if errors.Is(err, errors.ErrUnsupported) {
		return nil, dbusError(ErrNotSupported, "Doctor: this rdmad cannot run the doctor; use rdmactl doctor")
	}
	if err != nil {
		return nil, dbusError(ErrFailed, "Doctor: %v", err)
	}
	rows := make([]doctorRow, len(rep.Checks))
	for i, r := range rep.Checks {
		rows[i] = doctorRow{r.ID, r.Title, r.Verdict, r.Message, r.Fix}
	}
	return []any{rep.Worst, rows}, nil
}

// probe serves Probe(s peer) -> (s state, t rtt_ns, d loss_percent, s reason).
// A peer that does not answer is a result (state down), not an error: the
// errors are for probes that could not run.
func (h *handler) probe(ctx context.Context, c call) ([]any, error) {
	name := c.args[0].(string)
	if strings.TrimSpace(name) == "" {
		return nil, dbusError(ErrInvalidArgs, "Probe: say which peer, e.g. Probe s 192.0.2.17: a configured [[peer]] address (see the Peers property)")
	}
	if !service.ValidPeerName(name) {
		// Not even the shape of an address or host name: never a
		// configured peer, and text (a NUL, say) that must not travel
		// on into the backend's messages and the reply.
		return nil, dbusError(ErrInvalidArgs, "Probe: %.64q is not an IP address or host name; use a name from the Peers property", name)
	}
	h.logCall(ctx, "peer", name)
	ctx, cancel := context.WithTimeout(ctx, h.probeTimeout)
	defer cancel()
	peer, err := h.backend.Probe(ctx, name)
	switch {
	case errors.Is(err, errors.ErrUnsupported):
		return nil, dbusError(ErrNotSupported, "Probe %q: this rdmad has no peer probes; read the peers with rdmactl peers", name)
	case err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return nil, dbusError(ErrTimeout, "Probe %q: no result within %s; check the peers component in rdmactl status and the peer's control endpoint ([probe] port)",
			name, h.probeTimeout)
	case err != nil:
		return nil, dbusError(ErrFailed, "Probe %q: %v", name, err)
	}
	sum := summarisePeer(peer)
	return []any{peer.State, sum.lastRTT, sum.loss, peer.Reason}, nil
}
