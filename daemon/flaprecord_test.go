package daemon

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/state"
	"github.com/rdmad/rdmad/internal/syncbuf"
)

const (
	testBootA = "0f1e2d3c-4b5a-4697-8877-665544332211"
	testBootB = "0f1e2d3c-4b5a-4697-8877-6655443322ff"
)

// flapDaemon is a bare Daemon with the health part over state directory
// dir in boot, as Run makes it: the record restored before the first
// configure.
func flapDaemon(t *testing.T, dir, boot string) (*Daemon, *syncbuf.Buffer) {
	t.Helper()
	var logs syncbuf.Buffer
	d := &Daemon{log: slog.New(slog.NewTextHandler(&logs, nil)), mail: newMailbox(),
		store: state.NewStore(apitype.Snapshot{State: apitype.Running})}
	d.health = newHealthPart(d.log)
	d.health.keepFlaps(dir, boot, time.Now())
	d.health.configure(config.Default())
	d.store.SetFinish(func(prev, next *apitype.Snapshot) { d.health.finish(d, prev, next) })
	return d, &logs
}

// read publishes an inventory read at at with port mlx5_0/1 in state st
// and returns the published port and its PortFlapping condition.
func read(d *Daemon, st string, at time.Time) (apitype.Port, apitype.Condition) {
	devs := []apitype.Device{{Name: "mlx5_0", Ports: []apitype.Port{
		{Port: 1, State: st, PhysState: "LinkUp", LinkLayer: "Ethernet", Netdev: "ens1f0np0"}}}}
	d.health.observe(devs, at)
	d.store.Update(func(s *apitype.Snapshot) {
		s.Devices = devs
		state.SetComponent(s, apitype.ComponentInventory, apitype.OK, nil, at)
	})
	s := d.store.Load()
	c, _ := s.Health.Condition(apitype.CondPortFlapping)
	return s.Devices[0].Ports[0], c
}

// TestFlapRecordRestart is #39 item 4's Done-when at the daemon: a second
// daemon over the same state directory (a restart of rdmad) keeps the
// port's transitions and its flapping; and two downs three hours apart,
// one seen before the restart and one after, make PortFlapping through
// the long window, its message and log naming the rule. After a reboot
// (another boot ID) the first read is a baseline.
func TestFlapRecordRestart(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	a, _ := flapDaemon(t, dir, testBootA)
	read(a, "ACTIVE", now.Add(-10*time.Minute))
	for i := range 3 {
		at := now.Add(time.Duration(i-5) * time.Minute)
		read(a, "DOWN", at)
		read(a, "ACTIVE", at.Add(time.Second))
	}
	p, c := read(a, "ACTIVE", now)
	if p.Transitions != 6 || c.Status != apitype.ConditionProblem {
		t.Fatalf("before the restart: %d transitions, PortFlapping %+v; want 6 and a problem", p.Transitions, c)
	}
	fi, err := os.Lstat(filepath.Join(dir, flapRecordName))
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Fatalf("record %v, %v; want a regular file of mode 0600", fi, err)
	}

	b, logs := flapDaemon(t, dir, testBootA)
	if !strings.Contains(logs.String(), `msg="port flaps restored"`) {
		t.Errorf("log %q lacks the restore", logs.String())
	}
	p, c = read(b, "ACTIVE", now.Add(time.Second))
	if p.Transitions != 6 || c.Status != apitype.ConditionProblem || !strings.Contains(c.Message, "mlx5_0/1 went down 3 times in 10m0s") {
		t.Fatalf("after the restart: %d transitions, PortFlapping %+v; want 6 and the same problem", p.Transitions, c)
	}
	if p, _ = read(b, "DOWN", now.Add(2*time.Second)); p.Transitions != 7 {
		t.Errorf("a down after the restart: %d transitions, want 7", p.Transitions)
	}

	// The long window, across a restart: a down 3 h ago, one now.
	dir = t.TempDir()
	c1, _ := flapDaemon(t, dir, testBootA)
	read(c1, "ACTIVE", now.Add(-4*time.Hour))
	read(c1, "DOWN", now.Add(-3*time.Hour))
	if _, c := read(c1, "ACTIVE", now.Add(-3*time.Hour+time.Second)); c.Status != apitype.ConditionOK {
		t.Fatalf("one down: %+v, want ok", c)
	}
	c2, logs := flapDaemon(t, dir, testBootA)
	read(c2, "ACTIVE", now.Add(-time.Minute))
	read(c2, "DOWN", now.Add(-time.Minute+time.Second))
	p, c = read(c2, "ACTIVE", now)
	if c.Status != apitype.ConditionProblem || c.Reason != "PortFlapping" || !strings.Contains(c.Message, "mlx5_0/1 went down 2 times in 6h (flap_long_window)") {
		t.Fatalf("two downs 3 h apart, a restart between: PortFlapping %+v; want a problem by the long window", c)
	}
	if l := logs.String(); !strings.Contains(l, `msg="RDMA port flapping"`) || !strings.Contains(l, "rule=flap_long_window") {
		t.Errorf("log %q lacks the long window's flapping warning", l)
	}
	if p.Transitions != 4 {
		t.Errorf("%d transitions, want 4", p.Transitions)
	}

	// A reboot: the downs carry over, the first read is a baseline.
	r, logs := flapDaemon(t, dir, testBootB)
	if !strings.Contains(logs.String(), "from before a reboot") {
		t.Errorf("log %q does not say the record is from before a reboot", logs.String())
	}
	// At a boot the first read may come before the driver made the
	// device: the port's evidence is not forgotten.
	r.health.observe([]apitype.Device{}, now.Add(30*time.Second))
	p, c = read(r, "DOWN", now.Add(time.Minute))
	if p.Transitions != 4 || c.Status != apitype.ConditionProblem {
		t.Errorf("the first read after a reboot, port down: %d transitions, %+v; want 4 (a baseline) and still flapping", p.Transitions, c)
	}
}

// TestFlapRecordAttacks: rdmad runs as root and reads the record back;
// whoever can put something at its path gets one warning and nothing
// else: a symlink is not followed (and what it points to is not written),
// a FIFO does not hang the start, a huge file is not read, garbage, a
// record of another owner and one others may write are not trusted. The
// port counts from scratch, and the next change replaces the name with
// rdmad's own file.
func TestFlapRecordAttacks(t *testing.T) {
	// A real record in which mlx5_0/1 is flapping, 6 transitions.
	src := t.TempDir()
	a, _ := flapDaemon(t, src, testBootA)
	now := time.Now()
	read(a, "ACTIVE", now.Add(-10*time.Minute))
	for i := range 3 {
		at := now.Add(time.Duration(i-5) * time.Minute)
		read(a, "DOWN", at)
		read(a, "ACTIVE", at.Add(time.Second))
	}
	good, err := os.ReadFile(filepath.Join(src, flapRecordName))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, path string)
		want  string
	}{
		{"symlink", func(t *testing.T, path string) {
			target := filepath.Join(t.TempDir(), "target")
			os.WriteFile(target, good, 0o600)
			os.Symlink(target, path)
			t.Cleanup(func() {
				if b, _ := os.ReadFile(target); !bytes.Equal(b, good) {
					t.Errorf("the symlink's target was written: %q", b)
				}
			})
		}, "symbolic link"},
		{"fifo", func(t *testing.T, path string) { syscall.Mkfifo(path, 0o600) }, "not a regular file"},
		{"huge", func(t *testing.T, path string) {
			os.WriteFile(path, append(good, bytes.Repeat([]byte(" "), maxFlapRecord)...), 0o600)
		}, "larger than 4 MiB"},
		{"garbage", func(t *testing.T, path string) { os.WriteFile(path, []byte("\x7fELF\x00\x01garbage{"), 0o600) }, "damaged"},
		{"group-writable", func(t *testing.T, path string) {
			os.WriteFile(path, good, 0o600)
			os.Chmod(path, 0o620)
		}, "only root may write it"},
		{"foreign", func(t *testing.T, path string) {
			if os.Geteuid() != 0 {
				t.Skip("chown to another user needs root")
			}
			os.WriteFile(path, good, 0o600)
			if err := os.Chown(path, 4242, 4242); err != nil {
				t.Fatal(err)
			}
		}, "owned by uid 4242"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, flapRecordName)
			tc.plant(t, path)
			done := make(chan struct{})
			var d *Daemon
			var logs *syncbuf.Buffer
			go func() { d, logs = flapDaemon(t, dir, testBootA); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("the start hangs on the planted file")
			}
			l := logs.String()
			if n := strings.Count(l, "port flap record"); n != 1 || !strings.Contains(l, tc.want) || !strings.Contains(l, "level=WARN") {
				t.Errorf("log %q: want one warning naming %q", l, tc.want)
			}
			p, c := read(d, "ACTIVE", now)
			if p.Transitions != 0 || c.Status != apitype.ConditionOK {
				t.Errorf("after the planted record: %d transitions, %+v; want none and ok", p.Transitions, c)
			}
			fi, err := os.Lstat(path)
			if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 || fi.Sys().(*syscall.Stat_t).Uid != uint32(os.Geteuid()) {
				t.Errorf("the record's name after a change: %v, %v; want rdmad's own file, mode 0600", fi, err)
			}
			if strings.Count(logs.String(), "port flap record") != 1 {
				t.Errorf("more warnings after the change: %q", logs.String())
			}
		})
	}
}

// TestFlapRecordNotSaved: a state directory that cannot be written is
// one warning, not one per change, and the tracker in memory goes on.
func TestFlapRecordNotSaved(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "gone")
	d, logs := flapDaemon(t, dir, testBootA)
	now := time.Now()
	read(d, "ACTIVE", now.Add(-3*time.Minute))
	for i := range 3 {
		read(d, "DOWN", now.Add(time.Duration(i-3)*time.Minute+time.Second))
		read(d, "ACTIVE", now.Add(time.Duration(i-3)*time.Minute+2*time.Second))
	}
	p, c := read(d, "ACTIVE", now)
	if p.Transitions != 6 || c.Status != apitype.ConditionProblem {
		t.Errorf("%d transitions, %+v; want 6 and flapping", p.Transitions, c)
	}
	if n := strings.Count(logs.String(), "port flap record not saved"); n != 1 {
		t.Errorf("%d warnings, want 1: %q", n, logs.String())
	}
}

// TestBootID reads the kernel's boot ID: the same at every read.
func TestBootID(t *testing.T) {
	a, err := readBootID(bootIDPath)
	if err != nil {
		t.Skipf("no boot ID here: %v", err)
	}
	b, _ := readBootID(bootIDPath)
	if len(a) != 36 || a != b {
		t.Errorf("boot IDs %q, %q", a, b)
	}
	none := filepath.Join(t.TempDir(), "none")
	if _, err := readBootID(none); err == nil {
		t.Error("a missing boot ID read")
	}
	// Under rdmad.service /proc/sys is hidden (ProcSubset=pid): the unit
	// passes systemd's %b, the same ID without dashes.
	t.Setenv(bootIDEnv, strings.ReplaceAll(a, "-", ""))
	if got, err := readBootID(none); err != nil || got != a {
		t.Errorf("boot ID from $%s = %q, %v; want %q", bootIDEnv, got, err, a)
	}
	for _, bad := range []string{"", "xyz", strings.Repeat("g", 32), strings.Repeat("a", 31), "../../etc/passwd"} {
		t.Setenv(bootIDEnv, bad)
		if got, err := readBootID(none); err == nil {
			t.Errorf("$%s=%q read as %q", bootIDEnv, bad, got)
		}
	}
}
