package bus

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/google/go-cmp/cmp"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon/service"
	"github.com/rdmad/rdmad/daemon/service/servicetest"
	"github.com/rdmad/rdmad/daemon/state"
	"github.com/rdmad/rdmad/internal/testenv"
)

// The integration tests run a private dbus-daemon with the system bus's
// default policy and the project's policy file included as installed, and
// play unprivileged callers by re-executing this test binary as nobody.

// helperEnv selects the helper mode of the test binary (see TestMain).
const helperEnv = "RDMAD_DBUS_TEST_HELPER"

func TestMain(m *testing.M) {
	if op := os.Getenv(helperEnv); op != "" {
		os.Exit(dbusHelper(op, os.Args[len(os.Args)-1]))
	}
	os.Exit(m.Run())
}

// A helperResult is what the helper prints: a value or a D-Bus error.
type helperResult struct {
	UID     int
	Value   string
	ErrName string
	ErrMsg  string
}

// dbusHelper connects to the bus at DBUS_SYSTEM_BUS_ADDRESS as whoever runs
// it, does op and prints a helperResult as JSON.
func dbusHelper(op, arg string) int {
	res := helperResult{UID: os.Getuid()}
	err := func() error {
		conn, err := dbus.ConnectSystemBus()
		if err != nil {
			return err
		}
		defer conn.Close()
		obj := conn.Object(Name, Path)
		switch op {
		case "get":
			v, err := obj.GetProperty(Interface + "." + arg)
			res.Value = fmt.Sprint(v.Value())
			return err
		case "introspect":
			return obj.Call(IntrospectableInterface+".Introspect", 0).Store(&res.Value)
		case "managed":
			var m map[dbus.ObjectPath]map[string]map[string]dbus.Variant
			err := obj.Call(ObjectManagerInterface+".GetManagedObjects", 0).Store(&m)
			res.Value = fmt.Sprint(len(m))
			return err
		case "call":
			c := obj.Call(Interface+"."+arg, 0)
			res.Value = fmt.Sprint(c.Body)
			return c.Err
		case "probe":
			c := obj.Call(Interface+".Probe", 0, arg)
			res.Value = fmt.Sprint(c.Body)
			return c.Err
		case "bandwidthtest":
			// A loopback test of the port arg, with valid options.
			c := obj.Call(Interface+".BandwidthTest", 0, arg, map[string]dbus.Variant{"loopback": dbus.MakeVariant(true)})
			res.Value = fmt.Sprint(c.Body)
			return c.Err
		case "set":
			return obj.SetProperty(Interface+"."+arg, dbus.MakeVariant("x"))
		case "flood":
			return flood(obj, arg, &res)
		case "own":
			r, err := conn.RequestName(Name, dbus.NameFlagDoNotQueue)
			res.Value = r.String()
			return err
		}
		return fmt.Errorf("unknown helper op %q", op)
	}()
	if err != nil {
		var de dbus.Error
		if errors.As(err, &de) {
			res.ErrName = de.Name
		}
		res.ErrMsg = err.Error()
	}
	b, _ := json.Marshal(res)
	fmt.Println(string(b))
	return 0
}

// A testBus is a private dbus-daemon.
type testBus struct {
	t    *testing.T
	dir  string
	conf string
	addr string
	cmd  *exec.Cmd
	done chan struct{}
}

// defaultPolicy is the default context of the system bus's configuration.
const defaultPolicy = testenv.SystemBusPolicy

// startBus starts a dbus-daemon whose configuration is the system bus's
// default policy, the project's policy file, then extra, and points
// DBUS_SYSTEM_BUS_ADDRESS at it.
func startBus(t *testing.T, extra string) *testBus {
	t.Helper()
	testenv.Tool(t, "dbus-daemon", "apt-get install dbus-daemon: the tests run a private bus")
	policy, err := filepath.Abs("../../etc/dbus-1/system.d/org.rdmad.Agent1.conf")
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "rdmad-dbus-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// nobody must reach the socket (and the helper binary copied here).
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	conf := testenv.WriteBusConfig(t, dir, defaultPolicy+`
  <include>`+policy+`</include>
`+extra)
	b := &testBus{t: t, dir: dir, conf: conf}
	b.start()
	t.Cleanup(b.stop)
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", b.addr)
	return b
}

// start runs dbus-daemon and waits for its address.
func (b *testBus) start() {
	b.t.Helper()
	cmd := exec.Command("dbus-daemon", "--config-file="+b.conf, "--print-address", "--nofork")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &syncWriter{w: &stderr}
	if err := cmd.Start(); err != nil {
		b.t.Fatalf("start dbus-daemon: %v", err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		b.t.Fatalf("dbus-daemon --config-file=%s printed no address: %v; stderr: %s", b.conf, err, stderr.String())
	}
	addr := strings.TrimSpace(line)
	if b.addr != "" && addr != b.addr {
		// Same socket, new guid: the path is what clients use.
		addr = strings.Split(addr, ",")[0]
	}
	if b.addr == "" {
		b.addr = strings.Split(addr, ",")[0]
	}
	b.cmd = cmd
	b.done = make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, stdout)
		_ = cmd.Wait()
		close(b.done)
	}()
}

// stop terminates dbus-daemon and waits for it.
func (b *testBus) stop() {
	if b.cmd == nil {
		return
	}
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.done:
	case <-time.After(5 * time.Second):
		_ = b.cmd.Process.Kill()
		<-b.done
	}
	b.cmd = nil
}

type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// asNobody runs the helper op as uid/gid 65534 and returns its result.
func (b *testBus) asNobody(op, arg string) helperResult {
	b.t.Helper()
	return b.asUser(65534, 65534, nil, op, arg)
}

// asUser runs the helper op as uid with primary group gid and exactly the
// supplementary groups (none when nil) and returns its result.
func (b *testBus) asUser(uid, gid int, groups []int, op, arg string) helperResult {
	b.t.Helper()
	if os.Geteuid() != 0 {
		b.t.Skip("running a caller as nobody needs root (setpriv --reuid); run the tests as root (make test)")
	}
	testenv.Tool(b.t, "setpriv", "apt-get install util-linux: it runs a caller as nobody")
	bin := filepath.Join(b.dir, "helper.test")
	if _, err := os.Stat(bin); err != nil {
		self, err := os.Executable()
		if err != nil {
			b.t.Fatal(err)
		}
		data, err := os.ReadFile(self)
		if err != nil {
			b.t.Fatal(err)
		}
		if err := os.WriteFile(bin, data, 0o755); err != nil {
			b.t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args := []string{fmt.Sprintf("--reuid=%d", uid), fmt.Sprintf("--regid=%d", gid), "--clear-groups"}
	if len(groups) > 0 {
		gs := make([]string, len(groups))
		for i, g := range groups {
			gs[i] = fmt.Sprint(g)
		}
		args[2] = "--groups=" + strings.Join(gs, ",")
	}
	args = append(args, bin, "-test.run=^$", arg)
	cmd := exec.CommandContext(ctx, "setpriv", args...)
	cmd.Env = append(os.Environ(), helperEnv+"="+op)
	out, err := cmd.CombinedOutput()
	if err != nil {
		b.t.Fatalf("helper %s %s as uid %d: %v; output: %s", op, arg, uid, err, out)
	}
	var res helperResult
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
		b.t.Fatalf("helper %s %s: decode %q: %v", op, arg, out, err)
	}
	if res.UID != uid {
		b.t.Fatalf("helper ran as uid %d, want %d", res.UID, uid)
	}
	return res
}

// A report is one call of Options.Report.
type report struct {
	st  string
	err string
}

// reports records Report calls.
type reports struct {
	mu  sync.Mutex
	all []report
}

func (r *reports) add(st string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rep := report{st: st}
	if err != nil {
		rep.err = err.Error()
	}
	r.all = append(r.all, rep)
}

// waitFor waits until a report after the first `after` ones matches.
func (r *reports) waitFor(t *testing.T, after int, st, errContains string) report {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r.mu.Lock()
		all := append([]report(nil), r.all...)
		r.mu.Unlock()
		for _, rep := range all[min(after, len(all)):] {
			if rep.st == st && strings.Contains(rep.err, errContains) {
				return rep
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no report %q with error containing %q after report %d; reports: %+v", st, errContains, after, all)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (r *reports) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.all)
}

// newStore returns a store with one rxe device, running, generation 1.
func newStore() *state.Store {
	return state.NewStore(apitype.Snapshot{
		Version: "test", State: apitype.Running, Summary: "running",
		Config:  apitype.Config{Generation: 1, Path: "/etc/rdmad/rdmad.toml"},
		Devices: []apitype.Device{device("rxe0", "eth0", "ACTIVE")},
	})
}

// startRun runs Run with b as backend until the test ends.
func startRun(t *testing.T, store *state.Store, b service.Backend) *reports {
	t.Helper()
	return startRunOpts(t, Options{Store: store, Backend: b})
}

// startRunOpts runs Run with o, plus a test logger, a report recorder and
// short backoffs, until the test ends.
func startRunOpts(t *testing.T, o Options) *reports {
	t.Helper()
	r := &reports{}
	o.Report = r.add
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(testWriter{t}, nil))
	}
	o.MinBackoff, o.MaxBackoff = 50*time.Millisecond, 200*time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, o)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run returned %v after cancel, want nil", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return within 10s of cancel")
		}
	})
	return r
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// rootConn connects to the bus as this (root) process.
func rootConn(t *testing.T) *dbus.Conn {
	t.Helper()
	conn, err := dbus.ConnectSystemBus()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the bus policy lets only root own org.rdmad.Agent1 and call its methods; run the tests as root (make test)")
	}
}

func TestIntegrationOwnsNameAndServesState(t *testing.T) {
	requireRoot(t)
	startBus(t, "")
	store := newStore()
	r := startRun(t, store, servicetest.ReloadOnly(store))
	r.waitFor(t, 0, apitype.OK, "")

	conn := rootConn(t)
	var owner string
	if err := conn.BusObject().Call("org.freedesktop.DBus.GetNameOwner", 0, Name).Store(&owner); err != nil {
		t.Fatalf("GetNameOwner %s: %v", Name, err)
	}
	obj := conn.Object(Name, Path)
	var all map[string]dbus.Variant
	if err := obj.Call(PropertiesInterface+".GetAll", 0, Interface).Store(&all); err != nil {
		t.Fatal(err)
	}
	got := map[string]any{}
	for k, v := range all {
		got[k] = v.Value()
	}
	// A snapshot without a verdict (the daemon always decides one) is
	// unknown on the bus, with no conditions.
	if h, ok := got["Health"].(map[string]dbus.Variant); !ok || h["status"].Value() != "unknown" || h["healthy"].Value() != false {
		t.Errorf("Health %v", got["Health"])
	}
	delete(got, "Health")
	want := map[string]any{
		"Version": "test", "State": "running", "Summary": "running", "Healthy": true, "HealthStatus": "unknown",
		"ConfigGeneration": uint64(1), "ConfigError": "", "ConfigPath": "/etc/rdmad/rdmad.toml",
		"Devices":    []dbus.ObjectPath{"/org/rdmad/Agent1/device/rxe0"},
		"PortsTotal": uint32(1), "PortsActive": uint32(1),
		"PolicyTargets":   [][]any{},
		"Components":      map[string][]any{},
		"Peers":           [][]any{},
		"FleetMismatches": [][]any{},
		"PeerGroupFaults": [][]any{},
		"QoS":             [][]any{},
		// The records, the lazy ones (PeerRecords, PeerFigures and the
		// fleet's) built for GetAll.
		"PolicyTargetRecords":   []map[string]dbus.Variant{},
		"PeerRecords":           []map[string]dbus.Variant{},
		"PeerFigures":           []map[string]dbus.Variant{},
		"QoSRecords":            []map[string]dbus.Variant{},
		"FleetMismatchRecords":  []map[string]dbus.Variant{},
		"PeerGroupFaultRecords": []map[string]dbus.Variant{},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("GetAll %s: -want +got\n%s", Interface, diff)
	}

	var managed map[dbus.ObjectPath]map[string]map[string]dbus.Variant
	if err := obj.Call(ObjectManagerInterface+".GetManagedObjects", 0).Store(&managed); err != nil {
		t.Fatal(err)
	}
	dev, ok := managed["/org/rdmad/Agent1/device/rxe0"][DeviceInterface]
	if !ok || len(managed) != 1 {
		t.Fatalf("GetManagedObjects = %v, want exactly rxe0's device object", managed)
	}
	if name := dev["Name"].Value(); name != "rxe0" {
		t.Errorf("rxe0 Name = %v", name)
	}
	wantPorts := [][]any{{uint32(1), "ACTIVE", "LinkUp", "Ethernet", "eth0", ""}}
	if diff := cmp.Diff(wantPorts, dev["Ports"].Value()); diff != "" {
		t.Errorf("rxe0 Ports: -want +got\n%s", diff)
	}

	var xml string
	if err := obj.Call(IntrospectableInterface+".Introspect", 0).Store(&xml); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`<interface name="org.rdmad.Agent1">`, `<interface name="org.freedesktop.DBus.ObjectManager">`,
		`<property name="ConfigGeneration" type="t" access="read">`, `<node name="device">`} {
		if !strings.Contains(xml, s) {
			t.Errorf("Introspect %s lacks %s:\n%s", Path, s, xml)
		}
	}
	if err := conn.Object(Name, "/org/rdmad/Agent1/device/nope").Call(PropertiesInterface+".GetAll", 0, DeviceInterface).Err; !isDBusError(err, "org.freedesktop.DBus.Error.UnknownObject") {
		t.Errorf("GetAll on a missing device: err = %v, want UnknownObject", err)
	}
	if err := obj.Call(PropertiesInterface+".Get", 0, Interface, "Nope").Err; !isDBusError(err, "org.freedesktop.DBus.Error.UnknownProperty") {
		t.Errorf("Get of a missing property: err = %v, want UnknownProperty", err)
	}
	if err := obj.SetProperty(Interface+".State", dbus.MakeVariant("x")); !isDBusError(err, "org.freedesktop.DBus.Error.PropertyReadOnly") {
		t.Errorf("Set State as root: err = %v, want PropertyReadOnly", err)
	}
	if err := obj.Call(PropertiesInterface+".Get", 0, Interface).Err; !isDBusError(err, "org.freedesktop.DBus.Error.InvalidArgs") {
		t.Errorf("Get with one argument: err = %v, want InvalidArgs", err)
	}
	if err := obj.Call(PropertiesInterface+".Get", 0, Interface, uint32(1)).Err; !isDBusError(err, "org.freedesktop.DBus.Error.InvalidArgs") {
		t.Errorf("Get with a number as the property name: err = %v, want InvalidArgs", err)
	}
}

// TestIntegrationBusctl checks that systemd's busctl, which admins use,
// walks and shows the objects.
func TestIntegrationBusctl(t *testing.T) {
	requireRoot(t)
	testenv.Tool(t, "busctl", "apt-get install systemd")
	b := startBus(t, "")
	store := newStore()
	store.Update(func(s *apitype.Snapshot) { s.Peers = peersOf(upPeer) })
	startRun(t, store, newProbeBackend(store)).waitFor(t, 0, apitype.OK, "")
	busctl := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("busctl", append([]string{"--address=" + b.addr}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("busctl %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	tree := busctl("tree", Name)
	for _, p := range []string{"/org/rdmad/Agent1", "/org/rdmad/Agent1/device/rxe0"} {
		if !strings.Contains(tree, p) {
			t.Errorf("busctl tree lacks %s:\n%s", p, tree)
		}
	}
	intro := busctl("introspect", Name, string(Path))
	for _, s := range []string{".ConfigGeneration", ".Reload", ".LinkChanged", ".InterfacesAdded"} {
		if !strings.Contains(intro, s) {
			t.Errorf("busctl introspect lacks %s:\n%s", s, intro)
		}
	}
	if got := strings.TrimSpace(busctl("get-property", Name, string(Path), Interface, "State")); got != `s "running"` {
		t.Errorf("busctl get-property State = %q, want %q", got, `s "running"`)
	}
	if got := strings.TrimSpace(busctl("call", Name, string(Path), Interface, "Reload")); got != "t 2" {
		t.Errorf("busctl call Reload = %q, want %q", got, "t 2")
	}
	// The lines docs/DBUS.md shows.
	if got, want := strings.TrimSpace(busctl("get-property", Name, string(Path), Interface, "Peers")),
		`a(sssssttd) 1 "192.0.2.17" "192.0.2.17" "tor1" "up" "" 41000 97000 0`; got != want {
		t.Errorf("busctl get-property Peers = %q, want %q", got, want)
	}
	if got, want := strings.TrimSpace(busctl("call", Name, string(Path), Interface, "Probe", "s", "192.0.2.17")),
		`stds "up" 38000 0 ""`; got != want {
		t.Errorf("busctl call Probe = %q, want %q", got, want)
	}
	// busctl shows rdmad's message, which says what to do.
	out, err := exec.Command("busctl", "--address="+b.addr, "call", Name, string(Path), Interface, "Probe", "s", "198.51.100.9").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "not a configured peer; add it as a [[peer]]") {
		t.Errorf("busctl call Probe of an unknown peer: %v, %q; want rdmad's error", err, out)
	}
}

// TestIntegrationBoolKeyedDictAttack: nobody sends a method an argument
// that is a dict keyed by booleans (a{bb}, valid D-Bus, which the bus
// passes on). godbus decodes an empty one into a value its SignatureOf
// panics on (rdmad compared signatures that way: one call stopped the
// daemon), and fails to decode a non-empty one with an error on which it
// closes its connection (one call, or one unicast signal, which the
// system bus lets anyone send, took rdmad off the bus). rdmad must answer
// InvalidArgs, keep its connection (the same unique name) and keep serving.
func TestIntegrationBoolKeyedDictAttack(t *testing.T) {
	requireRoot(t)
	testenv.Tool(t, "busctl", "apt-get install systemd")
	testenv.Tool(t, "setpriv", "apt-get install util-linux: it runs a caller as nobody")
	b := startBus(t, "")
	store := newStore()
	counters := &Counters{}
	startRunOpts(t, Options{Store: store, Backend: newProbeBackend(store), Counters: counters}).waitFor(t, 0, apitype.OK, "")
	busctl := func(asNobody bool, args ...string) (string, error) {
		t.Helper()
		cmd := exec.Command("busctl", append([]string{"--address=" + b.addr, "--timeout=5"}, args...)...)
		if asNobody {
			cmd = exec.Command("setpriv", append([]string{"--reuid=65534", "--regid=65534", "--clear-groups"}, cmd.Args...)...)
		}
		out, err := cmd.CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	owner := func() string {
		t.Helper()
		out, err := busctl(false, "call", "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "GetNameOwner", "s", Name)
		if err != nil {
			t.Fatalf("GetNameOwner %s: %v: %s", Name, err, out)
		}
		return out
	}
	before := owner()
	calls := [][]string{
		{"BandwidthTest", "sa{bb}", "", "0"},
		{"BandwidthTest", "sa{bb}", "", "1", "true", "false"},
		{"BandwidthTest", "sv", "", "a{bb}", "2", "true", "true", "false", "false"},
		{"Probe", "a{bb}", "1", "false", "true"},
		{"Reload", "a{bb}", "1", "true", "true"},
	}
	for _, args := range calls {
		out, err := busctl(true, append([]string{"call", Name, string(Path), Interface}, args...)...)
		switch {
		case err == nil:
			t.Errorf("busctl call %s as nobody succeeded: %s", strings.Join(args, " "), out)
		case !strings.Contains(out, "nvalid") && !strings.Contains(out, "rdmad cannot decode"):
			t.Errorf("busctl call %s as nobody: %v: %s; want an invalid-arguments error", strings.Join(args, " "), err, out)
		case strings.Contains(out, "timed out"):
			t.Errorf("busctl call %s as nobody timed out: %s; want an answer", strings.Join(args, " "), out)
		}
	}
	// A unicast signal needs no method and no policy for methods.
	if out, err := busctl(true, "emit", "--destination="+Name, "/x", "org.example.X", "Boom", "a{bb}", "1", "true", "true"); err != nil {
		t.Fatalf("busctl emit as nobody: %v: %s", err, out)
	}
	if out, err := busctl(false, "get-property", Name, string(Path), Interface, "State"); err != nil || out != `s "running"` {
		t.Fatalf("after the a{bb} messages, get-property State: %v: %s; want rdmad still serving", err, out)
	}
	if after := owner(); after != before {
		t.Errorf("%s's owner went from %s to %s: rdmad lost its connection to the bus", Name, before, after)
	}
	// The empty a{bb} (calls[0]) decodes and is refused by the handler;
	// the other calls and the signal are dropped before godbus, one count
	// each.
	if got, want := counters.Refused()[RefusedUndecodable], uint64(len(calls)-1+1); got != want {
		t.Errorf("undecodable count %d, want %d (the calls with entries and the signal)", got, want)
	}
}

func isDBusError(err error, name string) bool {
	var de dbus.Error
	return errors.As(err, &de) && de.Name == name
}

func TestIntegrationUnprivilegedCaller(t *testing.T) {
	requireRoot(t)
	b := startBus(t, "")
	store := newStore()
	pb := newProbeBackend(store)
	fb := pb.Backend
	startRun(t, store, pb).waitFor(t, 0, apitype.OK, "")

	tests := []struct {
		op, arg   string
		wantValue string // checked when wantErr is ""
		wantErr   string
		byRdmad   string // the refusal comes from rdmad, with this text
	}{
		{op: "get", arg: "State", wantValue: "running"},
		{op: "get", arg: "ConfigGeneration", wantValue: "1"},
		{op: "managed", wantValue: "1"},
		{op: "introspect"},
		// The bus lets anyone send the methods (a static policy cannot
		// know the admin group); rdmad's access table refuses them.
		{op: "call", arg: "Reload", wantErr: ErrAccessDenied, byRdmad: "uid 65534 may not change rdmad's state (Reload)"},
		{op: "call", arg: "Apply", wantErr: ErrAccessDenied, byRdmad: "uid 65534 may not change rdmad's state (Apply)"},
		{op: "probe", arg: "192.0.2.17", wantErr: ErrAccessDenied, byRdmad: "uid 65534 may not make rdmad probe now (Probe)"},
		{op: "set", arg: "State", wantErr: ErrAccessDenied},
		{op: "own", wantErr: ErrAccessDenied},
	}
	for _, tt := range tests {
		t.Run(tt.op+" "+tt.arg, func(t *testing.T) {
			res := b.asNobody(tt.op, tt.arg)
			if res.ErrName != tt.wantErr {
				t.Fatalf("as nobody: error %q (%s), want %q", res.ErrName, res.ErrMsg, tt.wantErr)
			}
			if tt.byRdmad != "" {
				if !strings.Contains(res.ErrMsg, tt.byRdmad) {
					t.Errorf("error %q, want rdmad's refusal %q", res.ErrMsg, tt.byRdmad)
				}
				return
			}
			if tt.wantErr != "" {
				// The bus, not rdmad, refuses: its message names the
				// rule that did.
				if !strings.Contains(res.ErrMsg, "Rejected") && !strings.Contains(res.ErrMsg, "not allowed") {
					t.Errorf("error %q does not come from the bus policy", res.ErrMsg)
				}
				return
			}
			if tt.op == "introspect" {
				if !strings.Contains(res.Value, `<interface name="org.rdmad.Agent1">`) {
					t.Errorf("Introspect as nobody lacks the interface:\n%s", res.Value)
				}
				return
			}
			if res.Value != tt.wantValue {
				t.Errorf("as nobody: value %q, want %q", res.Value, tt.wantValue)
			}
		})
	}
	if n := fb.Count("Reload"); n != 0 {
		t.Errorf("backend reloaded %d times for nobody, want 0", n)
	}
	if n := pb.probes(); n != 0 {
		t.Errorf("backend probed %d times for nobody, want 0", n)
	}
}

// TestIntegrationDaemonChecksUID opens the bus policy to nobody, as a
// careless local policy might, and checks that rdmad itself refuses.
func TestIntegrationDaemonChecksUID(t *testing.T) {
	requireRoot(t)
	b := startBus(t, `<policy user="nobody"><allow send_destination="org.rdmad.Agent1"/></policy>`)
	store := newStore()
	pb := newProbeBackend(store)
	pb.SetErr("PolicyApply", nil)
	fb := pb
	startRun(t, store, fb).waitFor(t, 0, apitype.OK, "")
	for _, tt := range []struct{ op, arg, method string }{
		{"call", "Reload", "Reload"},
		{"call", "Apply", "Apply"},
		{"probe", "192.0.2.17", "Probe"},
	} {
		t.Run(tt.method, func(t *testing.T) {
			res := b.asNobody(tt.op, tt.arg)
			if res.ErrName != ErrAccessDenied || !strings.Contains(res.ErrMsg, "uid 65534 may not") || !strings.Contains(res.ErrMsg, "("+tt.method+")") {
				t.Errorf("%s as nobody with an open bus policy: %q %q, want rdmad's own AccessDenied", tt.method, res.ErrName, res.ErrMsg)
			}
		})
	}
	applies := fb.Count("PolicyApply")
	if fb.Count("Reload") != 0 || applies != 0 || pb.probes() != 0 {
		t.Errorf("backend ran %d reloads, %d applies and %d probes for nobody, want none", fb.Count("Reload"), applies, pb.probes())
	}
}

func TestIntegrationRootMethods(t *testing.T) {
	requireRoot(t)
	startBus(t, "")
	store := newStore()
	fb := servicetest.ReloadOnly(store)
	startRun(t, store, fb).waitFor(t, 0, apitype.OK, "")
	obj := rootConn(t).Object(Name, Path)

	var gen uint64
	if err := obj.Call(Interface+".Reload", 0).Store(&gen); err != nil {
		t.Fatalf("Reload as root: %v", err)
	}
	if gen != 2 {
		t.Errorf("Reload returned generation %d, want 2", gen)
	}
	// The property follows once the service published the new snapshot.
	waitProperty(t, obj, "ConfigGeneration", uint64(2))

	fb.SetReject("/etc/rdmad/rdmad.toml:3: mtu: 12 is below the minimum 68")
	err := obj.Call(Interface+".Reload", 0).Err
	if !isDBusError(err, ErrConfigRejected) || !strings.Contains(err.Error(), "below the minimum 68") ||
		!strings.Contains(err.Error(), "generation 2 stays in force") {
		t.Errorf("Reload of a bad config: err = %v, want %s with the loader's message", err, ErrConfigRejected)
	}
	waitProperty(t, obj, "ConfigError", "/etc/rdmad/rdmad.toml:3: mtu: 12 is below the minimum 68")
	if v, _ := obj.GetProperty(Interface + ".ConfigGeneration"); v.Value() != uint64(2) {
		t.Errorf("ConfigGeneration after a rejected load = %v, want 2", v.Value())
	}
	if n := fb.Count("Reload"); n != 2 {
		t.Errorf("backend reloads = %d, want 2", n)
	}
	if err := obj.Call(Interface+".Apply", 0).Err; !isDBusError(err, ErrNotSupported) {
		t.Errorf("Apply on a backend without Apply: err = %v, want %s", err, ErrNotSupported)
	}
}

func TestIntegrationApply(t *testing.T) {
	requireRoot(t)
	startBus(t, "")
	store := newStore()
	ab := servicetest.ReloadOnly(store)
	ab.SetErr("PolicyApply", nil)
	startRun(t, store, ab).waitFor(t, 0, apitype.OK, "")
	if err := rootConn(t).Object(Name, Path).Call(Interface+".Apply", 0).Err; err != nil {
		t.Fatalf("Apply as root: %v", err)
	}
	if n := ab.Count("PolicyApply"); n != 1 {
		t.Errorf("backend applies = %d, want 1", n)
	}
}

// waitProperty waits until obj's property name equals want.
func waitProperty(t *testing.T, obj dbus.BusObject, name string, want any) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		v, err := obj.GetProperty(Interface + "." + name)
		if err == nil && cmp.Equal(v.Value(), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("property %s = %v (err %v), want %v", name, v.Value(), err, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// subscribe returns a channel of the signals rdmad sends.
func subscribe(t *testing.T, conn *dbus.Conn) <-chan *dbus.Signal {
	t.Helper()
	if err := conn.AddMatchSignal(dbus.WithMatchSender(Name)); err != nil {
		t.Fatal(err)
	}
	ch := make(chan *dbus.Signal, 64)
	conn.Signal(ch)
	return ch
}

// nextSignal returns the next signal named name, skipping others.
func nextSignal(t *testing.T, ch <-chan *dbus.Signal, name string) *dbus.Signal {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case s := <-ch:
			if s.Name == name {
				return s
			}
		case <-timeout:
			t.Fatalf("no %s signal within 5s", name)
			return nil
		}
	}
}

func TestIntegrationSignals(t *testing.T) {
	requireRoot(t)
	startBus(t, "")
	store := newStore()
	startRun(t, store, servicetest.ReloadOnly(store)).waitFor(t, 0, apitype.OK, "")
	sigs := subscribe(t, rootConn(t))

	store.Update(func(s *apitype.Snapshot) { s.State = apitype.Degraded })
	pc := nextSignal(t, sigs, PropertiesInterface+".PropertiesChanged")
	if pc.Path != Path || pc.Body[0] != Interface {
		t.Errorf("PropertiesChanged on %s for %v, want %s %s", pc.Path, pc.Body[0], Path, Interface)
	}
	if got := pc.Body[1].(map[string]dbus.Variant); len(got) != 1 || got["State"].Value() != apitype.Degraded {
		t.Errorf("PropertiesChanged changed = %v, want only State=degraded", got)
	}

	store.Update(func(s *apitype.Snapshot) {
		s.Devices = []apitype.Device{device("mlx5_0", "ens1f0", "ACTIVE"), s.Devices[0]}
	})
	added := nextSignal(t, sigs, ObjectManagerInterface+".InterfacesAdded")
	if added.Body[0] != DevicePath("mlx5_0") {
		t.Errorf("InterfacesAdded for %v, want %s", added.Body[0], DevicePath("mlx5_0"))
	}
	ifaces := added.Body[1].(map[string]map[string]dbus.Variant)
	if ifaces[DeviceInterface]["Name"].Value() != "mlx5_0" {
		t.Errorf("InterfacesAdded properties = %v, want Name mlx5_0", ifaces)
	}
	// The new device's port is a link that appeared.
	appeared := nextSignal(t, sigs, Interface+".LinkChanged")
	if diff := cmp.Diff([]any{DevicePath("mlx5_0"), "mlx5_0", uint32(1), "", "ACTIVE", "ens1f0"}, appeared.Body); diff != "" {
		t.Errorf("LinkChanged of the new device's port: -want +got\n%s", diff)
	}

	store.Update(func(s *apitype.Snapshot) {
		s.Devices = []apitype.Device{device("mlx5_0", "ens1f0", "DOWN"), s.Devices[1]}
	})
	link := nextSignal(t, sigs, Interface+".LinkChanged")
	want := []any{DevicePath("mlx5_0"), "mlx5_0", uint32(1), "ACTIVE", "DOWN", "ens1f0"}
	if diff := cmp.Diff(want, link.Body); diff != "" {
		t.Errorf("LinkChanged: -want +got\n%s", diff)
	}

	store.Update(func(s *apitype.Snapshot) {
		s.Policy = apitype.PolicyState{Policies: []apitype.PolicyStatus{{Name: "fabric", Targets: []apitype.Target{
			{Kind: "mtu", Object: "ens1f0", Desired: "9000", Actual: "9000", State: apitype.Applied}}}}}
	})
	pol := nextSignal(t, sigs, Interface+".PolicyChanged")
	if diff := cmp.Diff([]any{"fabric", "mtu", "ens1f0", "", apitype.Applied, "9000", "9000", ""}, pol.Body); diff != "" {
		t.Errorf("PolicyChanged: -want +got\n%s", diff)
	}

	store.Update(func(s *apitype.Snapshot) { s.Devices = s.Devices[1:] })
	removed := nextSignal(t, sigs, ObjectManagerInterface+".InterfacesRemoved")
	if diff := cmp.Diff([]any{DevicePath("mlx5_0"), []string{DeviceInterface}}, removed.Body); diff != "" {
		t.Errorf("InterfacesRemoved: -want +got\n%s", diff)
	}
	err := rootConn(t).Object(Name, DevicePath("mlx5_0")).Call(PropertiesInterface+".GetAll", 0, DeviceInterface).Err
	if !isDBusError(err, "org.freedesktop.DBus.Error.UnknownObject") {
		t.Errorf("GetAll on the removed device: err = %v, want UnknownObject", err)
	}
}

// TestIntegrationCoalesces publishes many snapshots in a burst and checks
// that the last state arrives and the signals are at most one per
// snapshot: the service never queues without bound.
func TestIntegrationCoalesces(t *testing.T) {
	requireRoot(t)
	startBus(t, "")
	store := newStore()
	startRun(t, store, servicetest.ReloadOnly(store)).waitFor(t, 0, apitype.OK, "")
	conn := rootConn(t)
	sigs := subscribe(t, conn)
	const n = 500
	for i := 1; i <= n; i++ {
		store.Update(func(s *apitype.Snapshot) { s.Summary = fmt.Sprint("burst ", i) })
	}
	waitProperty(t, conn.Object(Name, Path), "Summary", fmt.Sprint("burst ", n))
	got, last := 0, ""
	for {
		select {
		case s := <-sigs:
			if s.Name == PropertiesInterface+".PropertiesChanged" {
				got++
				if v, ok := s.Body[1].(map[string]dbus.Variant)["Summary"]; ok {
					last = v.Value().(string)
				}
			}
			continue
		case <-time.After(200 * time.Millisecond):
		}
		break
	}
	if want := fmt.Sprint("burst ", n); last != want {
		t.Errorf("last PropertiesChanged has Summary %q, want %q (the newest state)", last, want)
	}
	if got > n {
		t.Errorf("%d PropertiesChanged for %d snapshots, want at most one per snapshot", got, n)
	}
	t.Logf("%d snapshots -> %d PropertiesChanged", n, got)
}

// TestIntegrationPacesViews publishes a snapshot every millisecond for a
// second, as a loopback probe at a short interval or a storm of policy
// passes can: the service builds at most one view per minViewGap (about
// ten PropertiesChanged, not a thousand) and the newest state still arrives.
func TestIntegrationPacesViews(t *testing.T) {
	requireRoot(t)
	startBus(t, "")
	store := newStore()
	startRun(t, store, servicetest.ReloadOnly(store)).waitFor(t, 0, apitype.OK, "")
	conn := rootConn(t)
	sigs := subscribe(t, conn)
	start, n := time.Now(), 0
	for time.Since(start) < time.Second {
		n++
		store.Update(func(s *apitype.Snapshot) { s.Summary = fmt.Sprint("stream ", n) })
		time.Sleep(time.Millisecond)
	}
	elapsed := time.Since(start)
	waitProperty(t, conn.Object(Name, Path), "Summary", fmt.Sprint("stream ", n))
	got, last := 0, ""
	for {
		select {
		case s := <-sigs:
			if s.Name == PropertiesInterface+".PropertiesChanged" {
				got++
				if v, ok := s.Body[1].(map[string]dbus.Variant)["Summary"]; ok {
					last = v.Value().(string)
				}
			}
			continue
		case <-time.After(300 * time.Millisecond):
		}
		break
	}
	if want := fmt.Sprint("stream ", n); last != want {
		t.Errorf("last PropertiesChanged has Summary %q, want %q (the newest state)", last, want)
	}
	if limit := int(elapsed/minViewGap) + 3; got > limit {
		t.Errorf("%d PropertiesChanged for %d snapshots in %v, want at most %d (one per %v)", got, n, elapsed, limit, minViewGap)
	}
	t.Logf("%d snapshots in %v -> %d PropertiesChanged", n, elapsed, got)
}

// blockingBackend holds every Reload until release is closed; it does
// nothing else (servicetest.ReloadOnly's other operations, with a nil store).
type blockingBackend struct {
	*servicetest.Backend
	started chan struct{}
	release chan struct{}
}

func (b *blockingBackend) Reload(ctx context.Context) (apitype.ReloadResult, error) {
	b.started <- struct{}{}
	select {
	case <-b.release:
		return apitype.ReloadResult{OK: true, Generation: 9}, nil
	case <-ctx.Done():
		return apitype.ReloadResult{}, ctx.Err()
	}
}

// TestIntegrationCallLimit checks that calls beyond MaxCalls are refused
// with ErrBusy instead of piling up behind a slow daemon.
func TestIntegrationCallLimit(t *testing.T) {
	requireRoot(t)
	startBus(t, "")
	bb := &blockingBackend{Backend: servicetest.ReloadOnly(nil), started: make(chan struct{}, MaxCalls), release: make(chan struct{})}
	startRun(t, newStore(), bb).waitFor(t, 0, apitype.OK, "")
	obj := rootConn(t).Object(Name, Path)
	calls := make([]*dbus.Call, MaxCalls)
	for i := range calls {
		calls[i] = obj.Go(Interface+".Reload", 0, make(chan *dbus.Call, 1))
	}
	for range MaxCalls {
		select {
		case <-bb.started:
		case <-time.After(5 * time.Second):
			t.Fatalf("fewer than %d Reloads reached the backend", MaxCalls)
		}
	}
	if err := obj.Call(Interface+".Reload", 0).Err; !isDBusError(err, ErrBusy) {
		t.Errorf("Reload number %d while %d run: err = %v, want %s", MaxCalls+1, MaxCalls, err, ErrBusy)
	}
	close(bb.release)
	for i, c := range calls {
		<-c.Done
		var gen uint64
		if err := c.Store(&gen); err != nil || gen != 9 {
			t.Errorf("held Reload %d = %d, %v; want 9", i, gen, err)
		}
	}
}

func TestIntegrationNameTaken(t *testing.T) {
	requireRoot(t)
	startBus(t, "")
	squatter := rootConn(t)
	if r, err := squatter.RequestName(Name, dbus.NameFlagDoNotQueue); err != nil || r != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("squatter RequestName = %v, %v", r, err)
	}
	store := newStore()
	r := startRun(t, store, servicetest.ReloadOnly(store))
	r.waitFor(t, 0, apitype.Error, "another rdmad (or another program) owns it")
	// It keeps trying: a second failure shows the retry loop runs.
	n := r.len()
	r.waitFor(t, n, apitype.Error, "owns it")

	if _, err := squatter.ReleaseName(Name); err != nil {
		t.Fatal(err)
	}
	r.waitFor(t, r.len(), apitype.OK, "")
	var has bool
	if err := squatter.BusObject().Call("org.freedesktop.DBus.NameHasOwner", 0, Name).Store(&has); err != nil || !has {
		t.Errorf("NameHasOwner after the squatter left = %v, %v; want true", has, err)
	}
}

func TestIntegrationBusRestart(t *testing.T) {
	requireRoot(t)
	b := startBus(t, "")
	store := newStore()
	r := startRun(t, store, servicetest.ReloadOnly(store))
	r.waitFor(t, 0, apitype.OK, "")

	b.stop()
	lost := r.waitFor(t, 0, apitype.Error, "")
	t.Logf("bus gone: %s", lost.err)
	// The state moves on while the bus is away; the new connection must
	// serve the latest.
	store.Update(func(s *apitype.Snapshot) { s.State = apitype.Degraded })
	n := r.len()
	b.start()
	r.waitFor(t, n, apitype.OK, "")
	obj := rootConn(t).Object(Name, Path)
	waitProperty(t, obj, "State", apitype.Degraded)
}

func TestIntegrationBusAbsent(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", "unix:path="+filepath.Join(dir, "no-bus"))
	store := newStore()
	r := startRun(t, store, servicetest.ReloadOnly(store))
	rep := r.waitFor(t, 0, apitype.Unavailable, "no-bus")
	if !strings.Contains(rep.err, "dbus.service running") {
		t.Errorf("report %q does not say what to do", rep.err)
	}
	// And it retries rather than giving up.
	r.waitFor(t, 1, apitype.Unavailable, "no-bus")
}

// TestSessionWithoutBusBuildsNoView: a session on a host without a system
// bus ends before it builds a view of the state (it used to build one at
// every retry, every 30 s), and says the bus is missing.
func TestSessionWithoutBusBuildsNoView(t *testing.T) {
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", "unix:path="+filepath.Join(t.TempDir(), "no-bus"))
	store := newStore()
	s := &server{o: Options{Store: store, Backend: servicetest.ReloadOnly(store)},
		h: newHandler(servicetest.ReloadOnly(store), slog.New(slog.NewTextHandler(testWriter{t}, nil)))}
	owned, err := s.session(context.Background())
	if owned || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("session: owned %v, err %v; want not owned and an error wrapping fs.ErrNotExist", owned, err)
	}
	if v := s.h.cur.Load(); v != nil {
		t.Errorf("a view was built for a bus that does not exist")
	}
}

func TestRunNeedsStoreAndBackend(t *testing.T) {
	if err := Run(context.Background(), Options{}); err == nil {
		t.Error("Run with empty Options returned nil, want an error")
	}
}
