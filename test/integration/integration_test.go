// Package integration builds the real rdmad and rdmactl binaries and drives
// them the way an operator does: start, status, reload, bad and good edits,
// garbage on the socket, unprivileged callers, a second instance, SIGTERM.
package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/internal/syncbuf"
)

var bin string // directory with the built binaries

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "rdmad-integration-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = dir
	for _, c := range []string{"rdmad", "rdmactl"} {
		out, err := exec.Command("go", "build", "-ldflags", "-X main.version=itest", "-o", filepath.Join(dir, c), "../../cmd/"+c).CombinedOutput()
		if err != nil {
			fmt.Fprintf(os.Stderr, "build %s: %v\n%s", c, err, out)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// A node is one rdmad under test.
type node struct {
	t      testing.TB
	dir    string
	config string
	socket string
	cmd    *exec.Cmd
	log    *syncbuf.Buffer
	exited chan error
}

const fixture = "../../inventory/testdata/roce-ib"

// start runs rdmad on config with the fixture sysfs and waits until it
// answers.
func start(t testing.TB, config string, extra ...string) *node {
	t.Helper()
	return launch(t, nil, config, extra...)
}

// launch runs rdmad, behind the command prefix (e.g. ip netns exec NS).
func launch(t testing.TB, prefix []string, config string, extra ...string) *node {
	t.Helper()
	dir := t.TempDir()
	// So that unprivileged rdmactl can reach the socket (TempDir makes its
	// parent 0700).
	os.Chmod(dir, 0o755)
	os.Chmod(filepath.Dir(dir), 0o755)
	n := newNode(t, dir)
	n.write(config)
	n.start(prefix, extra...)
	return n
}

// newNode is a node whose configuration and socket live in dir.
func newNode(t testing.TB, dir string) *node {
	return &node{t: t, dir: dir, config: filepath.Join(dir, "rdmad.toml"), socket: filepath.Join(dir, "rdmad.sock"),
		log: new(syncbuf.Buffer), exited: make(chan error, 1)}
}

// start runs rdmad on n's directory (behind prefix), stops it when the test
// ends (showing its log if the test failed), and waits until it is ready.
func (n *node) start(prefix []string, extra ...string) {
	t := n.t
	t.Helper()
	argv := append(append(append([]string{}, prefix...), filepath.Join(bin, "rdmad")),
		"--config", n.config, "--socket", n.socket, "--sysfs-root", fixture)
	n.cmd = exec.Command(argv[0], append(argv[1:], extra...)...)
	// Its own state directory: never the record of limits files in the
	// host's /var/lib/rdmad (a test bed with the package installed).
	// limits_file may be in the tests' temporary directories.
	n.cmd.Env = append(os.Environ(), "STATE_DIRECTORY="+n.dir, config.TestLimitsDirEnv+"="+os.TempDir())
	n.cmd.Stderr = n.log
	n.cmd.Stdout = n.log
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { n.exited <- n.cmd.Wait() }()
	t.Cleanup(func() {
		n.cmd.Process.Kill()
		<-n.exited
		if t.Failed() {
			t.Logf("rdmad's log:\n%s", n.log)
		}
	})
	n.waitReady()
}

func (n *node) write(body string) {
	n.t.Helper()
	tmp := n.config + ".tmp"
	if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
		n.t.Fatal(err)
	}
	// Rename, as editors do: the watcher must see it.
	if err := os.Rename(tmp, n.config); err != nil {
		n.t.Fatal(err)
	}
}

func (n *node) waitReady() {
	n.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if _, _, code := n.ctl("version"); code == 0 {
			return
		}
		select {
		case err := <-n.exited:
			n.t.Fatalf("rdmad exited: %v\n%s", err, n.log)
		case <-time.After(50 * time.Millisecond):
		}
	}
	n.t.Fatalf("rdmad did not answer within 15s\n%s", n.log)
}

// ctl runs rdmactl against the node; prefix may run it as another user.
func (n *node) ctl(args ...string) (stdout, stderr string, code int) {
	return n.ctlAs(nil, args...)
}

func (n *node) ctlAs(prefix []string, args ...string) (string, string, int) {
	argv := append(append([]string{}, prefix...), filepath.Join(bin, "rdmactl"), "--socket", n.socket)
	argv = append(argv, args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		n.t.Fatal(err)
	}
	return o.String(), e.String(), code
}

type status struct {
	Version string `json:"version"`
	State   string `json:"state"`
	Config  struct {
		Generation uint64 `json:"generation"`
		Error      string `json:"error"`
	} `json:"config"`
	Devices []struct {
		Name  string `json:"name"`
		Ports []struct {
			Port   int    `json:"port"`
			State  string `json:"state"`
			Netdev string `json:"netdev"`
		} `json:"ports"`
	} `json:"devices"`
	Components map[string]struct {
		State string `json:"state"`
	} `json:"components"`
	Health struct {
		Status     string `json:"status"`
		Conditions []struct {
			Type    string   `json:"type"`
			Status  string   `json:"status"`
			Objects []string `json:"objects"`
		} `json:"conditions"`
	} `json:"health"`
}

// The fixture's verdict: its mlx4_0 has no verbs node, the host has no
// libibverbs device for any of its devices, and mlx5_0's port 2 is down, so
// rdmad on the fixture is degraded (status exit 3) with exactly these
// problems (issue #25: devices without verbs are not "running"). A test
// that asks whether rdmad was disturbed asks whether it still says this.
var fixtureProblems = "PortDown[mlx5_0/2] VerbsUnavailable[mlx4_0]"

// problems lists s's conditions that are problems, as "Type[objects]",
// sorted by type.
func (s status) problems() string {
	var out []string
	for _, c := range s.Health.Conditions {
		if c.Status == "problem" {
			out = append(out, c.Type+"["+strings.Join(c.Objects, ",")+"]")
		}
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

// undisturbed reports why n does not show the fixture's own verdict and
// nothing more ("" when it does).
func (n *node) undisturbed() string {
	n.t.Helper()
	s, code := n.status()
	if code != 3 || s.State != "degraded" || s.problems() != fixtureProblems {
		return fmt.Sprintf("exit %d, state %s, problems %q; the fixture alone gives exit 3, degraded, %q", code, s.State, s.problems(), fixtureProblems)
	}
	return ""
}

func (n *node) status() (status, int) {
	n.t.Helper()
	out, errOut, code := n.ctl("--json", "status")
	var s status
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		n.t.Fatalf("status --json (exit %d) is not JSON: %v\n%s\n%s", code, err, out, errOut)
	}
	return s, code
}

// eventually polls cond for up to 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

func TestStatusAndVersion(t *testing.T) {
	n := start(t, "[daemon]\nlog_level = \"debug\"\n")
	out, _, code := n.ctl("status")
	if code != 3 {
		t.Fatalf("status exit %d, want 3 (the fixture's devices have no verbs)\n%s", code, out)
	}
	if why := n.undisturbed(); why != "" {
		t.Errorf("fixture verdict: %s", why)
	}
	for _, want := range []string{"rdmad itest: degraded", "health: PROBLEM", "VerbsUnavailable problem (NoUverbsNode): mlx4_0 has no verbs node", "generation 1", "mlx5_0  1     ACTIVE", "rxe0", "eth0", "2 RoCE v2", "inventory"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	s, code := n.status()
	if code != 3 || s.Version != "itest" || len(s.Devices) != 3 || s.Devices[2].Name != "rxe0" || s.Devices[2].Ports[0].Netdev != "eth0" {
		t.Errorf("status --json = %+v (exit %d)", s, code)
	}
	out, _, code = n.ctl("version")
	if code != 0 || !strings.Contains(out, "rdmactl itest") || !strings.Contains(out, "rdmad   itest") {
		t.Errorf("version (exit %d):\n%s", code, out)
	}
}

func TestReloadAndEdits(t *testing.T) {
	n := start(t, "")
	out, _, code := n.ctl("reload")
	if code != 0 || !strings.Contains(out, "generation 2") {
		t.Fatalf("reload (exit %d): %s", code, out)
	}
	// Every successful reload counts, even with the same content.
	if out, _, _ = n.ctl("reload"); !strings.Contains(out, "generation 3") {
		t.Fatalf("second reload: %s", out)
	}

	// A bad edit is reported, and the last good config stays.
	n.write("[[policy]]\nname = \"fabric\"\nnetdevs = [\"rdt*\"]\nmtu = 99999\n")
	var s status
	eventually(t, "the bad edit to be reported", func() bool {
		s, code = n.status()
		return s.Config.Error != ""
	})
	if code != 3 || s.State != "degraded" || s.Config.Generation != 3 || !strings.Contains(s.Config.Error, `rdmad.toml:4: policy "fabric".mtu: 99999 is out of range`) {
		t.Errorf("after a bad edit: exit %d, %+v", code, s)
	}
	out, errOut, code := n.ctl("status")
	if code != 3 || !strings.Contains(out, `policy "fabric".mtu: 99999 is out of range`) {
		t.Errorf("human status after a bad edit (exit %d):\n%s%s", code, out, errOut)
	}
	_, errOut, code = n.ctl("reload")
	if code != 3 || !strings.Contains(errOut, "configuration rejected; generation 3 stays in force") {
		t.Errorf("reload of a bad config (exit %d): %s", code, errOut)
	}

	// A good edit is picked up without a signal.
	n.write("[daemon]\nlog_level = \"warn\"\n")
	eventually(t, "the good edit to be loaded", func() bool {
		s, code = n.status()
		return s.Config.Generation == 4 && s.Config.Error == "" && s.State != "reloading"
	})
	if why := n.undisturbed(); why != "" {
		t.Errorf("after the fix: %s (%+v)", why, s)
	}

	// A drop-in directory created later is watched too.
	os.Mkdir(filepath.Join(n.dir, "rdmad.d"), 0o755)
	time.Sleep(300 * time.Millisecond)
	os.WriteFile(filepath.Join(n.dir, "rdmad.d", "10-x.toml"), []byte("[daemon]\nlog_levle = 1\n"), 0o644)
	eventually(t, "the bad drop-in to be reported", func() bool {
		s, _ = n.status()
		return strings.Contains(s.Config.Error, "rdmad.d/10-x.toml:2: daemon.log_levle: unknown key")
	})

	// SIGHUP reloads too.
	os.Remove(filepath.Join(n.dir, "rdmad.d", "10-x.toml"))
	eventually(t, "the removal to be picked up", func() bool {
		s, _ = n.status()
		return s.Config.Error == ""
	})
	gen := s.Config.Generation
	n.cmd.Process.Signal(syscall.SIGHUP)
	eventually(t, "SIGHUP to reload", func() bool {
		s, _ = n.status()
		return s.Config.Generation == gen+1
	})
}

func TestGarbageOnSocket(t *testing.T) {
	n := start(t, "")
	for junk, want := range map[string]string{
		"\x00\xff\x10garbage\r\n\r\n":                                       "HTTP/1.1 400",
		"GET /v1/status HTTP/9.9\r\n\r\n":                                   "HTTP/1.1 505", // the standard answer to an unknown HTTP version
		"POST /v1/reload HTTP/1.1\r\nContent-Length: -5\r\n\r\n":            "HTTP/1.1 400",
		"GET /v1/status HTTP/1.1\r\n" + strings.Repeat("A", 1<<20) + "\r\n": "HTTP/1.1 431",
	} {
		c, err := net.Dial("unix", n.socket)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		c.Write([]byte(junk))
		buf := make([]byte, 512)
		nr, _ := c.Read(buf)
		c.Close()
		if !bytes.HasPrefix(buf[:nr], []byte(want)) {
			t.Errorf("junk %q answered %q, want %s", junk[:min(len(junk), 20)], buf[:nr], want)
		}
	}
	out, _, code := n.ctl("curl-like-unknown")
	if code != 2 || out != "" {
		t.Errorf("unknown command: exit %d", code)
	}
	if why := n.undisturbed(); why != "" {
		t.Fatalf("daemon disturbed by garbage: %s", why)
	}
	s, _ := n.status()
	if s.Config.Generation != 1 {
		t.Errorf("garbage changed the config generation to %d", s.Config.Generation)
	}
}

func TestUnprivilegedCallers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run rdmactl as another user (CI runs as root)")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Fatal("setpriv (util-linux) is missing; make test installs it")
	}
	nobody := []string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"}

	// Socket root-only: the kernel refuses the connection.
	n := start(t, "")
	_, errOut, code := n.ctlAs(nobody, "status")
	if code != 1 || !strings.Contains(errOut, "permission denied; join the socket's group") {
		t.Errorf("nobody on a root-only socket: exit %d %q", code, errOut)
	}

	// Socket readable by nobody's group: status works, reload is refused by
	// the daemon (SO_PEERCRED), and changes nothing.
	n = start(t, "[daemon]\nsocket_group = \"nogroup\"\n")
	out, errOut, code := n.ctlAs(nobody, "status")
	if code != 3 || !strings.Contains(out, "rdmad itest: degraded") {
		t.Errorf("nobody in the socket group: status exit %d %q %q", code, out, errOut)
	}
	_, errOut, code = n.ctlAs(nobody, "reload")
	if code != 1 || !strings.Contains(errOut, "access denied: uid 65534 may not change rdmad's state (/v1/reload)") {
		t.Errorf("nobody reload: exit %d %q", code, errOut)
	}
	if s, _ := n.status(); s.Config.Generation != 1 {
		t.Errorf("a refused reload changed the generation to %d", s.Config.Generation)
	}
}

func TestNotRunning(t *testing.T) {
	cmd := exec.Command(filepath.Join(bin, "rdmactl"), "--socket", filepath.Join(t.TempDir(), "none.sock"), "status")
	out, _ := cmd.CombinedOutput()
	if cmd.ProcessState.ExitCode() != 1 || !strings.Contains(string(out), "rdmad is not running") || !strings.Contains(string(out), "systemctl start rdmad") {
		t.Errorf("rdmactl without a daemon: exit %d %s", cmd.ProcessState.ExitCode(), out)
	}
	cmd = exec.Command(filepath.Join(bin, "rdmactl"), "--bogus")
	out, _ = cmd.CombinedOutput()
	if cmd.ProcessState.ExitCode() != 2 || !strings.Contains(string(out), "unknown flag --bogus") {
		t.Errorf("bad flag: exit %d %s", cmd.ProcessState.ExitCode(), out)
	}
}

func TestSecondInstanceAndStaleSocket(t *testing.T) {
	n := start(t, "")
	cmd := exec.Command(filepath.Join(bin, "rdmad"), "--config", n.config, "--socket", n.socket, "--sysfs-root", fixture)
	out, _ := cmd.CombinedOutput()
	if cmd.ProcessState.ExitCode() != 1 || !strings.Contains(string(out), "another rdmad is already serving this socket") {
		t.Errorf("second rdmad: exit %d %s", cmd.ProcessState.ExitCode(), out)
	}
	if why := n.undisturbed(); why != "" {
		t.Fatalf("the first rdmad was disturbed by the second: %s", why)
	}
	// kill -9 leaves the socket behind; the next rdmad replaces it.
	n.cmd.Process.Kill()
	<-n.exited
	n.exited <- nil
	if _, err := os.Stat(n.socket); err != nil {
		t.Fatalf("expected a stale socket after SIGKILL: %v", err)
	}
	m := start(t, "")
	_ = m
	cmd = exec.Command(filepath.Join(bin, "rdmad"), "--config", n.config, "--socket", n.socket, "--sysfs-root", fixture)
	cmd.Stderr = new(bytes.Buffer)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	eventually(t, "rdmad to take over the stale socket", func() bool {
		_, _, code := n.ctl("status")
		return code == 3 // answering, with the fixture's verdict (1: not answering)
	})
}

// sigterm stops n with SIGTERM and fails t unless rdmad exits with status 0
// within 5 s (what says what else was going on).
func (n *node) sigterm(t *testing.T, what string) {
	t.Helper()
	t0 := time.Now()
	n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-n.exited:
		if err != nil {
			t.Errorf("exit after SIGTERM%s: %v, want status 0", what, err)
		}
		n.exited <- err
	case <-time.After(5 * time.Second):
		t.Fatalf("rdmad did not exit within 5s of SIGTERM%s", what)
	}
	t.Logf("stopped in %v%s", time.Since(t0), what)
}

func TestSIGTERM(t *testing.T) {
	n := start(t, "")
	n.sigterm(t, "")
	if _, err := os.Stat(n.socket); !os.IsNotExist(err) {
		t.Errorf("socket left after a clean stop: %v", err)
	}
}

// TestSIGTERMWithWatcher: a watch stream open (a handler that runs until
// its connection ends) does not hold rdmad's stop: the API waits for its
// handlers, and the stream ends with rdmad.
func TestSIGTERMWithWatcher(t *testing.T) {
	n := start(t, "")
	w := exec.Command(filepath.Join(bin, "rdmactl"), "--socket", n.socket, "watch")
	var out syncbuf.Buffer
	w.Stdout, w.Stderr = &out, &out
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	watched := make(chan error, 1)
	go func() { watched <- w.Wait() }()
	t.Cleanup(func() { w.Process.Kill() })
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(out.String(), "rdmad") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	n.sigterm(t, " with a watch stream open")
	select {
	case <-watched:
	case <-time.After(5 * time.Second):
		t.Errorf("rdmactl watch still runs 5 s after rdmad stopped:\n%s", out.String())
	}
}

func TestSocketActivation(t *testing.T) {
	sa, err := exec.LookPath("systemd-socket-activate")
	if err != nil {
		t.Fatal("systemd-socket-activate is missing; make test installs systemd")
	}
	dir := t.TempDir()
	sock := filepath.Join(dir, "act.sock")
	cfg := filepath.Join(dir, "rdmad.toml")
	os.WriteFile(cfg, nil, 0o644)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, sa, "-l", sock, filepath.Join(bin, "rdmad"), "--config", cfg, "--sysfs-root", fixture,
		"--socket", filepath.Join(dir, "unused.sock"))
	log := new(syncbuf.Buffer)
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); cmd.Wait() }()
	var out []byte
	eventually(t, "a socket-activated rdmad to answer", func() bool {
		out, _ = exec.Command(filepath.Join(bin, "rdmactl"), "--socket", sock, "status").CombinedOutput()
		return bytes.Contains(out, []byte("rdmad itest: degraded")) // the fixture's verdict
	})
	if _, err := os.Stat(filepath.Join(dir, "unused.sock")); !os.IsNotExist(err) {
		t.Errorf("rdmad created its own socket although systemd passed one")
	}
	eventually(t, "the log to say it used the passed socket", func() bool {
		return strings.Contains(log.String(), "using the socket systemd passed")
	})
}

// TestPeersComponent: without peers nothing listens (two rdmads on one host
// do not fight over the control port); with a peer but no RDMA the peer
// probes are "unavailable" and rdmad runs on: no condition beyond the
// fixture's own.
func TestPeersComponent(t *testing.T) {
	n := start(t, "")
	s, _ := n.status()
	if c := s.Components[apitype.ComponentPeers]; c.State != "disabled" {
		t.Errorf("without peers: peers component %+v, want disabled", c)
	}
	if why := n.undisturbed(); why != "" {
		t.Errorf("without peers: %s", why)
	}
	n = start(t, "[[peer]]\naddress = \"127.0.0.9\"\n[probe]\nport = 28516\n")
	eventually(t, "the peers component to say verbs are unavailable", func() bool {
		s, _ = n.status()
		return s.Components[apitype.ComponentPeers].State == "unavailable"
	})
	if why := n.undisturbed(); why != "" {
		t.Errorf("with unavailable peer probes: %s (no RDMA here is not a fault of the peer probes)", why)
	}
}
