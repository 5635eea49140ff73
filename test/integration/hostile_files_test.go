package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/policy/memlock"
)

// timed runs rdmactl and fails the test if it takes longer than d: a hung
// main loop shows as a reload that never answers.
func (n *node) timed(t *testing.T, d time.Duration, args ...string) (string, string, int) {
	t.Helper()
	t0 := time.Now()
	out, errOut, code := n.ctl(args...)
	if took := time.Since(t0); took > d {
		t.Errorf("rdmactl %s took %v (over %v): the main loop is blocked", strings.Join(args, " "), took, d)
	}
	return out, errOut, code
}

// stopsOnSIGTERM sends SIGTERM and requires rdmad to exit cleanly within 5s.
func (n *node) stopsOnSIGTERM(t *testing.T) {
	t.Helper()
	n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-n.exited:
		n.exited <- err
		if err != nil {
			t.Errorf("exit after SIGTERM: %v, want status 0", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("rdmad did not exit within 5s of SIGTERM")
	}
}

// TestNestedDropInKeepsServing is issue #13 item 10 with the real daemon: a
// drop-in holding `allow = [[[...]]]` nested 10^6 deep (2 MB) killed the
// running rdmad (stack overflow formatting the value) and would crash-loop
// it at boot. Now the running rdmad keeps its generation, reports the file,
// and a fresh rdmad starts with the file in place.
func TestNestedDropInKeepsServing(t *testing.T) {
	n := start(t, "[daemon]\nlog_level = \"info\"\n")
	dropins := filepath.Join(n.dir, "rdmad.d")
	os.Mkdir(dropins, 0o755)
	time.Sleep(300 * time.Millisecond) // the watcher picks up the new directory (and reloads)
	s0, _ := n.status()
	gen := s0.Config.Generation
	const depth = 1000000
	nest := "[probe]\nallow = " + strings.Repeat("[", depth) + strings.Repeat("]", depth) + "\n"
	os.WriteFile(filepath.Join(dropins, "50-nest.toml"), []byte(nest), 0o644)
	var s status
	eventually(t, "the nested drop-in to be reported", func() bool {
		s, _ = n.status()
		return strings.Contains(s.Config.Error, "rdmad.d/50-nest.toml")
	})
	if s.Config.Generation != gen || !strings.Contains(s.Config.Error, "larger than 1 MiB") {
		t.Errorf("after the 2 MB nested drop-in: generation %d, error %q", s.Config.Generation, s.Config.Error)
	}
	// Under the size bound, the depth bound names the line and the key.
	k := 400000
	os.WriteFile(filepath.Join(dropins, "50-nest.toml"), []byte("[probe]\nallow = "+strings.Repeat("[", k)+strings.Repeat("]", k)+"\n"), 0o644)
	_, errOut, code := n.timed(t, 5*time.Second, "reload")
	if code != 3 || !strings.Contains(errOut, fmt.Sprintf("configuration rejected; generation %d stays in force", gen)) {
		t.Errorf("reload with an 800 KB nested drop-in: exit %d %q", code, errOut)
	}
	s, code = n.status()
	if code != 3 || s.Config.Generation != gen || !strings.Contains(s.Config.Error, "rdmad.d/50-nest.toml:2: probe.allow: arrays and inline tables are nested more than 32 deep") {
		t.Errorf("status: exit %d, generation %d, error %q", code, s.Config.Generation, s.Config.Error)
	}
	if len(s.Config.Error) > 4096 {
		t.Errorf("config error is %d bytes", len(s.Config.Error))
	}

	// A fresh rdmad with the file in place (the boot case) starts, on
	// the copy of the configuration it accepted before, and says why.
	m := start(t, "")
	os.Mkdir(filepath.Join(m.dir, "rdmad.d"), 0o755)
	os.WriteFile(filepath.Join(m.dir, "rdmad.d", "50-nest.toml"), []byte(nest), 0o644)
	m.cmd.Process.Kill()
	<-m.exited
	m.exited <- nil
	m2 := launchOn(t, m.dir)
	s, _ = m2.status()
	if !strings.Contains(s.Config.Error, "50-nest.toml") {
		t.Errorf("rdmad started with the nested drop-in: config error %q", s.Config.Error)
	}
	m2.stopsOnSIGTERM(t)
}

// launchOn starts rdmad on the config directory of an earlier node, as a
// reboot does.
func launchOn(t *testing.T, dir string) *node {
	t.Helper()
	n := newNode(t, dir)
	n.start(nil)
	return n
}

// TestFIFOConfigFiles is issue #13 item 11 with the real daemon: a FIFO
// dropped into rdmad.d/ (or named as [probe] peers_file) blocked the main
// loop in open(2) forever: reload and diff timed out, SIGTERM was ignored.
// Now a reload answers at once with an error naming the FIFO, status is
// served, and SIGTERM stops rdmad.
func TestFIFOConfigFiles(t *testing.T) {
	n := start(t, "[daemon]\nlog_level = \"info\"\n")
	dropins := filepath.Join(n.dir, "rdmad.d")
	os.Mkdir(dropins, 0o755)
	time.Sleep(300 * time.Millisecond)
	s0, _ := n.status()
	gen := s0.Config.Generation
	fifo := filepath.Join(dropins, "10-fifo.toml")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := n.timed(t, 5*time.Second, "reload")
	if code != 3 || !strings.Contains(errOut, "rdmad.d/10-fifo.toml: is a FIFO (named pipe), not a regular file") {
		t.Errorf("reload with a FIFO drop-in: exit %d %q", code, errOut)
	}
	out, _, code := n.timed(t, 5*time.Second, "policy", "diff")
	if code == 1 {
		t.Errorf("policy diff with a FIFO drop-in failed: %s", out)
	}
	s, _ := n.status()
	if s.Config.Generation != gen || !strings.Contains(s.Config.Error, "10-fifo.toml") {
		t.Errorf("status: generation %d error %q", s.Config.Generation, s.Config.Error)
	}
	n.stopsOnSIGTERM(t)

	// The FIFO as peers_file, at start and on reload.
	peersFIFO := filepath.Join(t.TempDir(), "peers")
	unix.Mkfifo(peersFIFO, 0o644)
	cfg := "[probe]\nport = 28519\npeers_file = \"" + peersFIFO + "\"\n"
	p := start(t, cfg)
	_, errOut, code = p.timed(t, 5*time.Second, "reload")
	if code == 1 {
		t.Errorf("reload with a FIFO peers_file: exit %d %q", code, errOut)
	}
	if _, code := p.status(); code == 1 {
		t.Errorf("status with a FIFO peers_file: exit %d", code)
	}
	p.stopsOnSIGTERM(t)
	if want := "peers_file: " + peersFIFO + ": is a FIFO (named pipe), not a regular file"; !strings.Contains(p.log.String(), want) {
		t.Errorf("the log does not say %q:\n%s", want, p.log)
	}
}

// TestLimitsFileFollowsKey is issue #13 item 13 with the real daemon: the
// limits.d file rdmad writes for [memlock] users is removed when the key is
// removed (PAM kept applying it), and the removal shows in status; an
// admin's file at the path is neither overwritten nor removed.
func TestLimitsFileFollowsKey(t *testing.T) {
	dir := t.TempDir()
	limits := filepath.Join(dir, "90-rdmad.conf")
	base := "[memlock]\nlimits_file = \"" + limits + "\"\n"
	n := start(t, base+"users = \"64MiB\"\nusers_domain = \"@rdma\"\n")
	eventually(t, "the limits file to be written", func() bool { return memlock.IsOurs(limits) })
	b, _ := os.ReadFile(limits)
	if !strings.Contains(string(b), "@rdma\thard\tmemlock\t65536\n") {
		t.Errorf("limits file:\n%s", b)
	}

	n.write(base)
	eventually(t, "the limits file to be removed", func() bool {
		_, err := os.Lstat(limits)
		return os.IsNotExist(err)
	})
	out, _, _ := n.ctl("status")
	if !strings.Contains(out, "memlock") || !strings.Contains(out, limits) {
		t.Errorf("status does not show the removal:\n%s", out)
	}

	// An admin's file at the path: kept with the key gone, and not
	// overwritten with the key back (an error says what to do).
	os.WriteFile(limits, []byte("@hpc hard memlock unlimited\n"), 0o644)
	n.ctl("reload")
	n.write(base + "users = \"64MiB\"\n")
	eventually(t, "the refusal to be reported", func() bool {
		out, _, _ = n.ctl("status")
		return strings.Contains(out, "not written by rdmad")
	})
	if b, _ := os.ReadFile(limits); string(b) != "@hpc hard memlock unlimited\n" {
		t.Errorf("admin's file changed: %q", b)
	}
}
