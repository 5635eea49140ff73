package unitjob

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/internal/testenv"
)

// startBus runs a private dbus-daemon that lets anyone own and call
// anything (the protocol is under test here, not a policy) and points
// DBUS_SYSTEM_BUS_ADDRESS at it.
func startBus(t *testing.T) {
	t.Helper()
	testenv.SystemBus(t, testenv.OpenBusPolicy)
}

// fakeManager is org.freedesktop.systemd1.Manager as far as Start uses it.
// result is the JobRemoved result it reports for a unit ("" sends no
// signal at all); early sends the signal before StartUnit replies.
type fakeManager struct {
	conn   *dbus.Conn
	result map[string]string
	early  bool

	mu         sync.Mutex
	subscribed bool
	started    []string
	wg         sync.WaitGroup
}

func (m *fakeManager) Subscribe() *dbus.Error {
	m.mu.Lock()
	m.subscribed = true
	m.mu.Unlock()
	return nil
}

func (m *fakeManager) StartUnit(name, mode string) (dbus.ObjectPath, *dbus.Error) {
	m.mu.Lock()
	m.started = append(m.started, name+" "+mode)
	id := uint32(len(m.started))
	m.mu.Unlock()
	if name == "missing.service" {
		return "", dbus.NewError("org.freedesktop.systemd1.NoSuchUnit", []any{"Unit missing.service not found."})
	}
	job := dbus.ObjectPath(fmt.Sprintf("/org/freedesktop/systemd1/job/%d", id))
	res, ok := m.result[name]
	if !ok || res == "" {
		return job, nil
	}
	emit := func() {
		// Another job's signal first: Start must wait for its own.
		_ = m.conn.Emit(path, manager+".JobRemoved", id+1000, dbus.ObjectPath("/org/freedesktop/systemd1/job/999"), "other.service", "failed")
		_ = m.conn.Emit(path, manager+".JobRemoved", id, job, name, res)
	}
	if m.early {
		emit()
		return job, nil
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		time.Sleep(20 * time.Millisecond)
		emit()
	}()
	return job, nil
}

func serveManager(t *testing.T, result map[string]string, early bool) *fakeManager {
	t.Helper()
	conn, err := dbus.ConnectSystemBus()
	if err != nil {
		t.Fatal(err)
	}
	m := &fakeManager{conn: conn, result: result, early: early}
	t.Cleanup(func() {
		m.wg.Wait()
		conn.Close()
	})
	if err := conn.Export(m, path, manager); err != nil {
		t.Fatal(err)
	}
	reply, err := conn.RequestName(dest, dbus.NameFlagDoNotQueue)
	if err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("own %s: %v, %v", dest, reply, err)
	}
	return m
}

func TestStart(t *testing.T) {
	startBus(t)
	m := serveManager(t, map[string]string{
		"rdmad-ecn@eth0.service": "done",
		"rdmad-ecn@eth1.service": "failed",
		"rdmad-ecn@eth2.service": "", // never finishes
	}, false)
	ctx := context.Background()

	if err := Start(ctx, "rdmad-ecn@eth0.service"); err != nil {
		t.Errorf("Start(done) = %v", err)
	}
	err := Start(ctx, "rdmad-ecn@eth1.service")
	var f *Failed
	if !errors.As(err, &f) || f.Result != "failed" || f.Unit != "rdmad-ecn@eth1.service" {
		t.Errorf("Start(failed) = %v, want a *Failed with result failed", err)
	} else if !strings.Contains(err.Error(), "journalctl -u rdmad-ecn@eth1.service") {
		t.Errorf("Start(failed) = %q: does not say where to look", err)
	}
	tctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	begin := time.Now()
	if err := Start(tctx, "rdmad-ecn@eth2.service"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Start(never finishes) = %v, want the deadline", err)
	}
	if d := time.Since(begin); d > 2*time.Second {
		t.Errorf("Start(never finishes) took %v, past its 200ms deadline", d)
	}
	if err := Start(ctx, "missing.service"); err == nil || !strings.Contains(err.Error(), "not found") || errors.Is(err, ErrNoBus) {
		t.Errorf("Start(missing) = %v, want systemd's error (not ErrNoBus: the bus answered)", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.subscribed {
		t.Error("Start never called Subscribe: systemd would send it no JobRemoved")
	}
	want := []string{"rdmad-ecn@eth0.service replace", "rdmad-ecn@eth1.service replace", "rdmad-ecn@eth2.service replace", "missing.service replace"}
	if fmt.Sprint(m.started) != fmt.Sprint(want) {
		t.Errorf("StartUnit calls %q, want %q", m.started, want)
	}
}

// TestStartEarlySignal: the job's JobRemoved arrives before StartUnit's
// reply (a fast oneshot); Start still sees it.
func TestStartEarlySignal(t *testing.T) {
	startBus(t)
	serveManager(t, map[string]string{"a.service": "done", "b.service": "dependency"}, true)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := Start(ctx, "a.service"); err != nil {
		t.Errorf("Start(a) = %v", err)
	}
	var f *Failed
	if err := Start(ctx, "b.service"); !errors.As(err, &f) || f.Result != "dependency" {
		t.Errorf("Start(b) = %v, want result dependency", err)
	}
}

func TestStartNoBus(t *testing.T) {
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", "unix:path="+filepath.Join(t.TempDir(), "nobus"))
	if err := Start(context.Background(), "x.service"); !errors.Is(err, ErrNoBus) || !strings.Contains(err.Error(), "connect to the system bus") {
		t.Errorf("Start without a bus = %v", err)
	}
}

// forgingManager answers StartUnit as systemd does, and before its own
// JobRemoved lets another client of the bus send forged ones for the same
// job: broadcast, and unicast to the caller.
type forgingManager struct {
	conn, forger *dbus.Conn
	result       string
	wg           sync.WaitGroup
	errs         []error // what the forger failed to send, read after wg
}

func (m *forgingManager) Subscribe() *dbus.Error { return nil }

func (m *forgingManager) StartUnit(sender dbus.Sender, name, mode string) (dbus.ObjectPath, *dbus.Error) {
	job := dbus.ObjectPath("/org/freedesktop/systemd1/job/7")
	caller := string(sender)
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		for _, forged := range []string{"done", "failed"} {
			_ = m.forger.Emit(path, manager+".JobRemoved", uint32(7), job, name, forged)
			unicast := &dbus.Message{Type: dbus.TypeSignal, Flags: dbus.FlagNoReplyExpected, Headers: map[dbus.HeaderField]dbus.Variant{
				dbus.FieldPath:        dbus.MakeVariant(path),
				dbus.FieldInterface:   dbus.MakeVariant(manager),
				dbus.FieldMember:      dbus.MakeVariant("JobRemoved"),
				dbus.FieldDestination: dbus.MakeVariant(caller),
				dbus.FieldSignature:   dbus.MakeVariant(dbus.SignatureOf(uint32(0), dbus.ObjectPath(""), "", "")),
			}, Body: []any{uint32(7), job, name, forged}}
			if caller == "" || m.forger.Send(unicast, nil).Err != nil {
				panic("the forged unicast JobRemoved was not sent")
			}
		}
		// A JobRemoved godbus cannot decode (a{bb} with entries), which
		// made godbus close the connection Start waits on: broadcast and
		// unicast, through busctl (godbus cannot encode it).
		for _, to := range []string{"", caller} {
			args := []string{"--address=" + os.Getenv("DBUS_SYSTEM_BUS_ADDRESS"), "emit"}
			if to != "" {
				args = append(args, "--destination="+to)
			}
			args = append(args, string(path), manager, "JobRemoved", "a{bb}", "1", "true", "true")
			if out, err := exec.Command("busctl", args...).CombinedOutput(); err != nil {
				m.errs = append(m.errs, fmt.Errorf("busctl %s: %v: %s", strings.Join(args, " "), err, out))
			}
		}
		time.Sleep(50 * time.Millisecond)
		_ = m.conn.Emit(path, manager+".JobRemoved", uint32(7), job, name, m.result)
	}()
	return job, nil
}

func connect2(t *testing.T) *dbus.Conn {
	t.Helper()
	c, err := dbus.ConnectSystemBus()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestStartForgedJobRemoved is issue #41 item 4: another client of the bus
// sends JobRemoved for rdmad's job with the result it likes, before
// systemd's own; Start takes systemd's alone, whichever way the forger
// sends (before the fix, the first forged signal decided the apply).
func TestStartForgedJobRemoved(t *testing.T) {
	startBus(t)
	for _, real := range []string{"failed", "done"} {
		t.Run(real, func(t *testing.T) {
			testenv.Tool(t, "busctl", "apt-get install systemd")
			m := &forgingManager{conn: connect2(t), forger: connect2(t), result: real}
			t.Cleanup(func() {
				m.wg.Wait()
				for _, err := range m.errs {
					t.Error(err)
				}
			})
			if err := m.conn.Export(m, path, manager); err != nil {
				t.Fatal(err)
			}
			if reply, err := m.conn.RequestName(dest, dbus.NameFlagDoNotQueue); err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
				t.Fatalf("own %s: %v, %v", dest, reply, err)
			}
			defer m.conn.ReleaseName(dest)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := Start(ctx, "rdmad-ecn@eth0.service")
			var f *Failed
			switch {
			case real == "done" && err != nil:
				t.Errorf("systemd said done after forged results: Start = %v", err)
			case real == "failed" && (!errors.As(err, &f) || f.Result != "failed"):
				t.Errorf("systemd said failed after a forged done: Start = %v", err)
			}
		})
	}
}

// handoverManager is systemd re-executing while the job runs: the first
// connection owns org.freedesktop.systemd1 at StartUnit, then gives it to a
// second, which sends the job's result. Start follows the owner.
type handoverManager struct {
	first, second *dbus.Conn
	wg            sync.WaitGroup
}

func (m *handoverManager) Subscribe() *dbus.Error { return nil }

func (m *handoverManager) StartUnit(name, mode string) (dbus.ObjectPath, *dbus.Error) {
	job := dbus.ObjectPath("/org/freedesktop/systemd1/job/9")
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		time.Sleep(20 * time.Millisecond)
		m.first.ReleaseName(dest)
		if reply, err := m.second.RequestName(dest, dbus.NameFlagDoNotQueue); err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
			return
		}
		time.Sleep(20 * time.Millisecond)
		_ = m.second.Emit(path, manager+".JobRemoved", uint32(9), job, name, "dependency")
	}()
	return job, nil
}

func TestStartFollowsTheOwner(t *testing.T) {
	startBus(t)
	m := &handoverManager{first: connect2(t), second: connect2(t)}
	t.Cleanup(m.wg.Wait)
	if err := m.first.Export(m, path, manager); err != nil {
		t.Fatal(err)
	}
	if reply, err := m.first.RequestName(dest, dbus.NameFlagDoNotQueue); err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("own %s: %v, %v", dest, reply, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var f *Failed
	if err := Start(ctx, "a.service"); !errors.As(err, &f) || f.Result != "dependency" {
		t.Errorf("Start = %v, want the new owner's result dependency", err)
	}
}
