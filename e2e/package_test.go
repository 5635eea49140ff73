//go:build e2e

package e2e

// The .deb in the test VM: what it installs, the hardened unit running the
// real rdmad (journal, reload, socket group, restarts, watchdog, stop), a
// sandbox check that runs rdmad's own appliers under the unit's exact
// hardening lines, and last upgrade, purge and a fresh reinstall.
//
// The tests run in file order. TestPackageUpgradePurgeReinstall purges
// rdmad and installs it again from the same .deb, so the tests in the
// files after this one find rdmad installed, enabled and running.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/daemon/kmsg"
	"github.com/rdmad/rdmad/internal/cgroupmem"
	"github.com/rdmad/rdmad/policy/memlock"
	"github.com/rdmad/rdmad/policy/mtu"
	"github.com/rdmad/rdmad/policy/roce"
)

const (
	pkgUnitPath = "/lib/systemd/system/rdmad.service"
	// pkgHelperEnv makes TestPackageSandboxHelper run: only the transient
	// sandbox unit of TestPackageSandbox sets it.
	pkgHelperEnv = "RDMAD_PKG_SANDBOX_HELPER"
	// pkgStepPrefix starts each result line the helper prints.
	pkgStepPrefix = "PKGSTEP "
)

// pkgRequire skips t unless it runs in the test VM with rdmad installed
// from the .deb (test/vm/run installs dist/rdmad_*.deb when it is newer
// than bin/rdmad, or with RDMAD_VM_INSTALL=deb).
func pkgRequire(t *testing.T) {
	t.Helper()
	if os.Getenv("RDMAD_VM") != "1" {
		t.Skip("not inside the rdmad test VM (RDMAD_VM unset): run make package && RDMAD_VM_INSTALL=deb test/vm/e2e")
	}
	out, err := pkgRun("dpkg-query", "-W", "-f=${Status}", "rdmad")
	if err != nil || out != "install ok installed" {
		t.Skipf("rdmad is not installed from the .deb in this VM (dpkg: %q, %v): run make package, then RDMAD_VM_INSTALL=deb test/vm/e2e", out, err)
	}
}

// pkgRun runs a command with a bound and returns its trimmed stdout; an
// error names the command and carries its stderr.
func pkgRun(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	out := strings.TrimSpace(stdout.String())
	if err != nil {
		return out, fmt.Errorf("%s %s: %w; stderr: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

func pkgMustRun(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := pkgRun(name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// pkgShow returns systemctl show's properties of rdmad.service.
func pkgShow(t *testing.T, props ...string) map[string]string {
	t.Helper()
	out := pkgMustRun(t, "systemctl", "show", "--property="+strings.Join(props, ","), "rdmad.service")
	m := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			m[k] = v
		}
	}
	return m
}

// pkgWait polls cond every 250 ms until it reports true or timeout passes,
// then fails t with what cond last said.
func pkgWait(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	start := time.Now()
	for {
		ok, last := cond()
		if ok {
			t.Logf("%s after %v", what, time.Since(start).Round(10*time.Millisecond))
			return
		}
		if time.Since(start) > timeout {
			t.Fatalf("%s: not within %v; last: %s", what, timeout, last)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// pkgStatus is the part of `rdmactl status --json` these tests read.
type pkgStatus struct {
	Version string `json:"version"`
	State   string `json:"state"`
	Config  struct {
		Generation uint64 `json:"generation"`
		Error      string `json:"error"`
	} `json:"config"`
	Devices []struct {
		Name string `json:"name"`
	} `json:"devices"`
}

func pkgGetStatus() (pkgStatus, error) {
	out, err := pkgRun("rdmactl", "status", "--json")
	var s pkgStatus
	if derr := json.Unmarshal([]byte(out), &s); derr != nil {
		if err != nil {
			return s, err
		}
		return s, fmt.Errorf("rdmactl status --json: %w (output %q)", derr, out)
	}
	return s, nil
}

// pkgWaitRunning waits until rdmad.service is active and answers with
// rxe0 in its status, and returns its main PID.
func pkgWaitRunning(t *testing.T) int {
	t.Helper()
	var pid int
	pkgWait(t, 90*time.Second, "rdmad active, answering, rxe0 listed", func() (bool, string) {
		u := pkgShow(t, "ActiveState", "MainPID")
		if u["ActiveState"] != "active" {
			return false, fmt.Sprint(u)
		}
		pid, _ = strconv.Atoi(u["MainPID"])
		s, err := pkgGetStatus()
		if err != nil {
			return false, err.Error()
		}
		for _, d := range s.Devices {
			if d.Name == "rxe0" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("status devices %v", s.Devices)
	})
	return pid
}

// pkgVersion returns the installed package's upstream version.
func pkgVersion(t *testing.T) string {
	t.Helper()
	v := pkgMustRun(t, "dpkg-query", "-W", "-f=${Version}", "rdmad")
	if i := strings.LastIndexByte(v, '-'); i > 0 {
		v = v[:i]
	}
	return v
}

// TestPackageInstalled checks what dpkg -i of the .deb left: the files in
// the places Debian 12 expects, the conffile, the socket group, the unit
// enabled, and binaries that report the package's version.
func TestPackageInstalled(t *testing.T) {
	pkgRequire(t)
	files := strings.Split(pkgMustRun(t, "dpkg", "-L", "rdmad"), "\n")
	for _, want := range []string{
		"/usr/sbin/rdmad", "/usr/bin/rdmactl", pkgUnitPath,
		"/etc/rdmad/rdmad.toml", "/etc/rdmad/rdmad.d",
		"/usr/share/dbus-1/system.d/org.rdmad.Agent1.conf",
		"/usr/lib/sysusers.d/rdmad.conf", "/usr/lib/tmpfiles.d/rdmad.conf",
		"/usr/share/man/man8/rdmad.8.gz", "/usr/share/man/man8/rdmactl.8.gz", "/usr/share/man/man5/rdmad.toml.5.gz",
		"/usr/share/bash-completion/completions/rdmactl", "/usr/share/zsh/vendor-completions/_rdmactl",
		"/usr/share/doc/rdmad/copyright", "/usr/share/doc/rdmad/changelog.Debian.gz",
		"/usr/lib/systemd/catalog/rdmad.catalog",
		"/usr/share/rdmad/prometheus/rdmad-alerts.yml", "/usr/share/rdmad/prometheus/rdmad-recording.yml",
		"/usr/share/rdmad/prometheus/rdmad-dashboard.json", "/usr/share/rdmad/prometheus/rdmad-alertmanager.yml",
		"/usr/share/rdmad/node-problem-detector/rdmad-health.json", "/usr/share/rdmad/nhc/rdmad.nhc",
		"/usr/share/doc/rdmad/docs/HEALTH.md", "/usr/share/doc/rdmad/docs/RUNBOOK.md",
	} {
		if !slices.Contains(files, want) {
			t.Errorf("dpkg -L rdmad lacks %s", want)
		} else if _, err := os.Stat(want); err != nil {
			t.Errorf("%s is listed but: %v", want, err)
		}
	}
	conffiles := pkgMustRun(t, "dpkg-query", "-W", "-f=${Conffiles}", "rdmad")
	if !strings.Contains(conffiles, "/etc/rdmad/rdmad.toml ") {
		t.Errorf("conffiles = %q, want /etc/rdmad/rdmad.toml among them", conffiles)
	}
	if _, err := user.LookupGroup("rdmad"); err != nil {
		t.Errorf("socket group: %v (postinst should run systemd-sysusers)", err)
	}
	if got := pkgMustRun(t, "systemctl", "is-enabled", "rdmad.service"); got != "enabled" {
		t.Errorf("systemctl is-enabled rdmad = %q, want enabled", got)
	}
	if fi, err := os.Stat("/dev/infiniband"); err != nil || !fi.IsDir() {
		t.Errorf("/dev/infiniband (tmpfiles.d, bound into the sandbox): %v", err)
	}
	v := pkgVersion(t)
	if got := pkgMustRun(t, "rdmad", "--version"); got != "rdmad "+v {
		t.Errorf("rdmad --version = %q, want %q", got, "rdmad "+v)
	}
	pkgWaitRunning(t)
	if s, err := pkgGetStatus(); err != nil || s.Version != v {
		t.Errorf("running rdmad reports version %q (%v), want %q", s.Version, err, v)
	}
}

// TestPackageSandboxInEffect checks that the running rdmad has exactly the
// unit's capability bounding set, no new privileges, a seccomp filter and
// the socket group, so the hardening lines are not silently ignored.
func TestPackageSandboxInEffect(t *testing.T) {
	pkgRequire(t)
	pid := pkgWaitRunning(t)
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	st := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			st[k] = strings.TrimSpace(v)
		}
	}
	const capBnd = 1<<unix.CAP_NET_ADMIN | 1<<unix.CAP_SYS_RESOURCE | 1<<unix.CAP_SYSLOG
	got := map[string]string{"CapBnd": st["CapBnd"], "CapEff": st["CapEff"], "NoNewPrivs": st["NoNewPrivs"], "Seccomp": st["Seccomp"]}
	want := map[string]string{"CapBnd": fmt.Sprintf("%016x", capBnd), "CapEff": fmt.Sprintf("%016x", capBnd), "NoNewPrivs": "1", "Seccomp": "2"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("/proc/%d/status of rdmad (-want +got):\n%s", pid, diff)
	}
	g, err := user.LookupGroup("rdmad")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(strings.Fields(st["Groups"]), g.Gid) {
		t.Errorf("rdmad's groups %q lack rdmad (%s): SupplementaryGroups=rdmad not applied", st["Groups"], g.Gid)
	}
}

// TestPackageJournal checks that rdmad logs to the journal natively: the
// start line is an entry of rdmad.service with SYSLOG_IDENTIFIER=rdmad and
// its attributes as fields.
func TestPackageJournal(t *testing.T) {
	pkgRequire(t)
	pkgWaitRunning(t)
	out := pkgMustRun(t, "journalctl", "-u", "rdmad.service", "-o", "json", "--no-pager")
	var found map[string]any
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e map[string]any
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			continue
		}
		if msg, _ := e["MESSAGE"].(string); e["SYSLOG_IDENTIFIER"] == "rdmad" && strings.HasPrefix(msg, "rdmad started") {
			found = e
		}
	}
	if found == nil {
		t.Fatalf("no journal entry of rdmad.service with SYSLOG_IDENTIFIER=rdmad and MESSAGE \"rdmad started ...\"; journalctl -u rdmad -o json:\n%s", pkgTail(out, 20))
	}
	want := map[string]any{"VERSION": pkgVersion(t), "SOCKET": "/run/rdmad/rdmad.sock", "CONFIG": "/etc/rdmad/rdmad.toml", "_SYSTEMD_UNIT": "rdmad.service"}
	got := map[string]any{}
	for k := range want {
		got[k] = found[k]
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("start entry's fields (-want +got):\n%s", diff)
	}
}

func pkgTail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// TestPackageReload checks that `systemctl reload rdmad` (ExecReload, a
// SIGHUP through the sandbox) makes rdmad load its configuration again.
func TestPackageReload(t *testing.T) {
	pkgRequire(t)
	pid := pkgWaitRunning(t)
	before, err := pkgGetStatus()
	if err != nil {
		t.Fatal(err)
	}
	pkgMustRun(t, "systemctl", "reload", "rdmad.service")
	pkgWait(t, 30*time.Second, "config generation advanced", func() (bool, string) {
		s, err := pkgGetStatus()
		if err != nil {
			return false, err.Error()
		}
		return s.Config.Generation == before.Config.Generation+1, fmt.Sprintf("generation %d, before %d", s.Config.Generation, before.Config.Generation)
	})
	if got := pkgShow(t, "MainPID")["MainPID"]; got != strconv.Itoa(pid) {
		t.Errorf("MainPID after reload = %s, want %d (a reload is not a restart)", got, pid)
	}
}

// TestPackageSocketGroup sets socket_group = "rdmad" with a drop-in and
// checks that the sandboxed rdmad can give its socket to the group (no
// CAP_CHOWN: it is a member) and that a non-root member can read status.
func TestPackageSocketGroup(t *testing.T) {
	pkgRequire(t)
	pkgWaitRunning(t)
	g, err := user.LookupGroup("rdmad")
	if err != nil {
		t.Fatal(err)
	}
	dropIn := "/etc/rdmad/rdmad.d/90-pkgtest-socket-group.toml"
	if err := os.WriteFile(dropIn, []byte("[daemon]\nsocket_group = \"rdmad\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.Remove(dropIn)
		if _, err := pkgRun("rdmactl", "reload"); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	pkgMustRun(t, "rdmactl", "reload")
	pkgWait(t, 30*time.Second, "socket given to group rdmad", func() (bool, string) {
		var st unix.Stat_t
		if err := unix.Stat("/run/rdmad/rdmad.sock", &st); err != nil {
			return false, err.Error()
		}
		return strconv.Itoa(int(st.Gid)) == g.Gid && st.Mode&0o777 == 0o660, fmt.Sprintf("gid %d mode %o", st.Gid, st.Mode&0o777)
	})
	if s, err := pkgGetStatus(); err != nil || s.Config.Error != "" {
		t.Fatalf("status after the drop-in: config error %q, %v", s.Config.Error, err)
	}
	// nobody, with rdmad as a supplementary group, may read.
	out, err := pkgRun("setpriv", "--reuid=nobody", "--regid=nogroup", "--groups="+g.Gid, "rdmactl", "status", "--json")
	if err != nil {
		t.Fatalf("rdmactl status as a member of rdmad: %v", err)
	}
	var s pkgStatus
	if err := json.Unmarshal([]byte(out), &s); err != nil || s.State == "" {
		t.Errorf("rdmactl status as a member of rdmad: %q (%v)", out, err)
	}
	// ... and without it, may not.
	if _, err := pkgRun("setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "rdmactl", "status"); err == nil {
		t.Error("rdmactl status as nobody without the rdmad group succeeded; want access denied")
	}
}

// A pkgStep is one check TestPackageSandboxHelper ran inside the sandbox.
type pkgStep struct {
	Name string `json:"name"`
	Err  string `json:"err,omitempty"`
	Info string `json:"info,omitempty"`
}

// pkgSandboxSteps are the needs of rdmad that the sandbox must allow, each
// done the way rdmad does it (its own packages where they exist), plus
// three that it must refuse. Their names say which hardening lines they
// prove harmless.
var pkgSandboxSteps = []string{
	"sysfs-read", "uverbs-open", "ibv_devinfo", "rdma-netlink", "rtnetlink-mtu", "uevent-netlink",
	"configfs-rdma_cm", "memlock-mlock", "memlock-raise", "limits.d-write", "state-dir-write",
	"cgroup-limits", "af-unix-dbus", "af-inet-loopback", "af-inet-node-address", "af-inet6-loopback",
	"kmsg-read", "denied-write-usr", "denied-write-run", "denied-mount", "denied-kmsg-write",
}

// TestPackageSandbox runs TestPackageSandboxHelper (this test binary) as a
// oneshot unit made from the installed rdmad.service, every hardening line
// unchanged, and checks that each of rdmad's needs works inside it: the
// features rdmad has today and those its packages already open the
// sandbox for (MTU, configfs, memlock, limits.d, IP sockets).
func TestPackageSandbox(t *testing.T) {
	pkgRequire(t)
	pkgWaitRunning(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	unitText, err := os.ReadFile(pkgUnitPath)
	if err != nil {
		t.Fatal(err)
	}

	// A dummy netdev to change the MTU of, outside the sandbox.
	const dummy = "pkgdummy0"
	pkgRun("ip", "link", "del", dummy)
	pkgMustRun(t, "ip", "link", "add", dummy, "mtu", "1500", "type", "dummy")
	t.Cleanup(func() { pkgRun("ip", "link", "del", dummy) })

	// roce state to restore.
	old, err := roce.New(roce.Options{Root: roce.DefaultRoot}).Observe("rxe0", 1)
	if err != nil {
		t.Fatalf("before: %v", err)
	}
	t.Cleanup(func() {
		if err := roce.New(roce.Options{Root: roce.DefaultRoot}).Apply("rxe0", 1, old); err != nil {
			t.Errorf("cleanup: restore rdma_cm defaults of rxe0: %v", err)
		}
	})

	const name = "rdmad-pkgtest-sandbox.service"
	out := "/run/rdmad-pkgtest-sandbox.out"
	unit := pkgSandboxUnit(t, string(unitText), exe, out, map[string]string{
		pkgHelperEnv:    "1",
		"PKG_DUMMY":     dummy,
		"PKG_NODE_ADDR": os.Getenv("RDMAD_NODE_ADDR"),
	})
	path := filepath.Join("/run/systemd/system", name)
	if err := os.WriteFile(path, []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.Remove(path)
		os.Remove(out)
		pkgRun("systemctl", "daemon-reload")
	})
	pkgMustRun(t, "systemctl", "daemon-reload")
	_, runErr := pkgRun("systemctl", "start", name) // oneshot: returns when done
	res, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("helper output: %v (systemctl start: %v)", err, runErr)
	}
	got := map[string]pkgStep{}
	for _, line := range strings.Split(string(res), "\n") {
		if rest, ok := strings.CutPrefix(line, pkgStepPrefix); ok {
			var s pkgStep
			if err := json.Unmarshal([]byte(rest), &s); err != nil {
				t.Errorf("helper line %q: %v", line, err)
				continue
			}
			got[s.Name] = s
		}
	}
	for _, name := range pkgSandboxSteps {
		s, ok := got[name]
		switch {
		case !ok:
			t.Errorf("sandbox step %s: no result; helper output:\n%s", name, pkgTail(string(res), 30))
		case s.Err != "":
			t.Errorf("sandbox step %s: %s", name, s.Err)
		default:
			t.Logf("sandbox step %s: ok %s", name, s.Info)
		}
	}
	if runErr != nil {
		t.Errorf("sandbox unit failed: %v", runErr)
	}
	// The MTU change is real: seen from outside the sandbox.
	if b, err := os.ReadFile("/sys/class/net/" + dummy + "/mtu"); err != nil || strings.TrimSpace(string(b)) != "1400" {
		t.Errorf("%s mtu from outside = %q (%v), want 1400", dummy, b, err)
	}
}

// pkgSandboxUnit turns the installed rdmad.service into a oneshot unit that
// runs exe's helper test: the service type, the command and the restart
// and reload settings change, the directories get their own names (the
// real rdmad's must not be removed when this stops), and every hardening
// line stays as installed.
func pkgSandboxUnit(t *testing.T, text, exe, out string, env map[string]string) string {
	t.Helper()
	var b strings.Builder
	section := ""
	kept := 0
	for _, line := range strings.Split(text, "\n") {
		trim := strings.TrimSpace(line)
		if strings.HasPrefix(trim, "[") {
			section = trim
			if section == "[Install]" {
				continue
			}
			b.WriteString(line + "\n")
			if section == "[Service]" {
				b.WriteString("Type=oneshot\n")
				fmt.Fprintf(&b, "ExecStart=%s -test.run=^TestPackageSandboxHelper$ -test.v\n", exe)
				fmt.Fprintf(&b, "StandardOutput=truncate:%s\nStandardError=inherit\n", out)
				for k, v := range env {
					fmt.Fprintf(&b, "Environment=%s=%s\n", k, v)
				}
			}
			continue
		}
		if section == "[Install]" {
			continue
		}
		key, val, _ := strings.Cut(trim, "=")
		switch key {
		case "Type", "ExecStart", "ExecReload", "Restart", "RestartSec", "RestartPreventExitStatus", "WatchdogSec", "Documentation":
			continue
		case "RuntimeDirectory", "StateDirectory":
			line = key + "=" + val + "-pkgtest"
		}
		if section == "[Service]" && key != "" && !strings.HasPrefix(key, "#") {
			kept++
		}
		b.WriteString(line + "\n")
	}
	if kept < 30 {
		t.Fatalf("only %d [Service] lines kept from %s; is it the hardened unit?", kept, pkgUnitPath)
	}
	return b.String()
}

// TestPackageSandboxHelper is not a test of its own: TestPackageSandbox
// runs this binary with it inside the sandbox unit, where it performs each
// of pkgSandboxSteps and prints the results.
func TestPackageSandboxHelper(t *testing.T) {
	if os.Getenv(pkgHelperEnv) != "1" {
		t.Skip("helper of TestPackageSandbox; runs only inside its sandbox unit")
	}
	step := func(name string, f func() (string, error)) {
		info, err := f()
		s := pkgStep{Name: name, Info: info}
		if err != nil {
			s.Err = err.Error()
		}
		b, _ := json.Marshal(s)
		fmt.Printf("%s%s\n", pkgStepPrefix, b)
	}
	step("sysfs-read", func() (string, error) {
		b, err := os.ReadFile("/sys/class/infiniband/rxe0/ports/1/state")
		return strings.TrimSpace(string(b)), err
	})
	step("uverbs-open", func() (string, error) {
		m, _ := filepath.Glob("/dev/infiniband/uverbs*")
		if len(m) == 0 {
			return "", errors.New("no /dev/infiniband/uverbs* in the sandbox (BindPaths=/dev/infiniband)")
		}
		f, err := os.OpenFile(m[0], os.O_RDWR, 0)
		if err != nil {
			return "", err
		}
		return m[0], f.Close()
	})
	step("ibv_devinfo", func() (string, error) {
		// libibverbs itself: opens the device, queries it over uverbs.
		out, err := exec.Command("ibv_devinfo", "-d", "rxe0").CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("ibv_devinfo -d rxe0: %w: %s", err, out)
		}
		if !bytes.Contains(out, []byte("PORT_ACTIVE")) {
			return "", fmt.Errorf("ibv_devinfo -d rxe0 shows no PORT_ACTIVE: %s", out)
		}
		return "rxe0 PORT_ACTIVE", nil
	})
	step("rdma-netlink", func() (string, error) {
		// rdma(8) speaks RDMA netlink (NETLINK_RDMA), as libibverbs does.
		out, err := exec.Command("rdma", "link", "show", "rxe0/1").CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("rdma link show: %w: %s", err, out)
		}
		return strings.TrimSpace(string(out)), nil
	})
	step("rtnetlink-mtu", func() (string, error) {
		c, err := mtu.Open(mtu.Options{})
		if err != nil {
			return "", err
		}
		defer c.Close()
		dev := os.Getenv("PKG_DUMMY")
		if err := c.Set(dev, 1400); err != nil {
			return "", err
		}
		got, err := c.Observe(dev)
		if err == nil && got != 1400 {
			err = fmt.Errorf("mtu of %s is %d after setting 1400", dev, got)
		}
		return dev + " mtu 1400", err
	})
	step("uevent-netlink", func() (string, error) {
		fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_KOBJECT_UEVENT)
		if err != nil {
			return "", fmt.Errorf("socket(NETLINK_KOBJECT_UEVENT): %w", err)
		}
		defer unix.Close(fd)
		if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: 1}); err != nil {
			return "", fmt.Errorf("bind kernel uevent group: %w", err)
		}
		return "bound to group 1", nil
	})
	step("configfs-rdma_cm", func() (string, error) {
		c := roce.New(roce.Options{Root: roce.DefaultRoot}) // no mount: systemd mounts configfs
		want := roce.Settings{ToS: 106, Mode: roce.ModeV2}
		if err := c.Apply("rxe0", 1, want); err != nil {
			return "", err
		}
		got, err := c.Observe("rxe0", 1)
		if err == nil && got != want {
			err = fmt.Errorf("rdma_cm defaults of rxe0/1 = %+v after applying %+v", got, want)
		}
		return "rxe0/1 tos 106", err
	})
	step("memlock-mlock", func() (string, error) {
		// Pinning as memory registration does, under LimitMEMLOCK=infinity
		// and without CAP_IPC_LOCK.
		buf, err := unix.Mmap(-1, 0, 64<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			return "", err
		}
		defer unix.Munmap(buf)
		if err := unix.Mlock(buf); err != nil {
			return "", fmt.Errorf("mlock 64 MiB: %w", err)
		}
		return "64 MiB locked", unix.Munlock(buf)
	})
	step("memlock-raise", func() (string, error) {
		// Lower the hard limit, then raise it with rdmad's own code: that
		// needs CAP_SYS_RESOURCE and prlimit64 through the syscall filter.
		if err := memlock.Set(memlock.Limit{Soft: 32 << 20, Hard: 32 << 20}); err != nil {
			return "", err
		}
		l, err := memlock.Raise(128 << 20)
		return l.String(), err
	})
	step("limits.d-write", func() (string, error) {
		path := memlock.DefaultLimitsPath
		if _, err := os.Stat(path); err == nil {
			return "", fmt.Errorf("%s exists already; not touching it", path)
		}
		if _, err := memlock.WriteLimits(path, []memlock.Rule{{Domain: "@rdmad", Soft: 64 << 20, Hard: 64 << 20}}); err != nil {
			return "", err
		}
		removed, err := memlock.RemoveLimits(path)
		if err == nil && !removed {
			err = fmt.Errorf("RemoveLimits(%s) removed nothing", path)
		}
		return path + " written and removed", err
	})
	step("state-dir-write", func() (string, error) {
		dir := os.Getenv("STATE_DIRECTORY")
		if dir == "" {
			return "", errors.New("STATE_DIRECTORY unset")
		}
		p := filepath.Join(dir, "probe")
		if err := os.WriteFile(p, []byte("ok\n"), 0o600); err != nil {
			return "", err
		}
		return p, os.Remove(p)
	})
	// MemoryMax= and TasksMax= (issue #24 item 12) are in force, and the MR
	// pool's reader (internal/cgroupmem) sees the memory limit from inside
	// the sandbox (ProtectControlGroups= leaves the cgroup readable).
	step("cgroup-limits", func() (string, error) {
		l, err := cgroupmem.Own()
		if err != nil {
			return "", err
		}
		if !l.Limited || l.Max != 512<<20 {
			return "", fmt.Errorf("memory limit seen from the sandbox %+v, want MemoryMax=512M", l)
		}
		cg, err := os.ReadFile("/proc/self/cgroup")
		if err != nil {
			return "", err
		}
		_, path, _ := strings.Cut(strings.TrimSpace(string(cg)), "0::")
		pids, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", path, "pids.max"))
		if err != nil {
			return "", err
		}
		if got := strings.TrimSpace(string(pids)); got != "256" {
			return "", fmt.Errorf("pids.max %s, want TasksMax=256", got)
		}
		return fmt.Sprintf("memory.max %d in %s (%d in use), pids.max 256", l.Max, l.Cgroup, l.Current), nil
	})
	step("af-unix-dbus", func() (string, error) {
		c, err := dbus.ConnectSystemBus()
		if err != nil {
			return "", fmt.Errorf("connect to the system bus: %w", err)
		}
		defer c.Close()
		return "unique name " + c.Names()[0], nil
	})
	tcp := func(network, addr string) (string, error) {
		ln, err := net.Listen(network, addr)
		if err != nil {
			return "", err
		}
		defer ln.Close()
		go func() {
			if c, err := ln.Accept(); err == nil {
				c.Write([]byte("x"))
				c.Close()
			}
		}()
		c, err := net.DialTimeout(network, ln.Addr().String(), 10*time.Second)
		if err != nil {
			return "", err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		b := make([]byte, 1)
		if _, err := c.Read(b); err != nil {
			return "", fmt.Errorf("read from %s: %w", ln.Addr(), err)
		}
		return ln.Addr().String(), nil
	}
	step("af-inet-loopback", func() (string, error) { return tcp("tcp4", "127.0.0.1:0") })
	step("af-inet-node-address", func() (string, error) {
		// The node's fabric address (192.168.77.x): a private network
		// that IPAddressAllow= admits.
		a := os.Getenv("PKG_NODE_ADDR")
		if a == "" {
			return "", errors.New("PKG_NODE_ADDR unset")
		}
		return tcp("tcp4", net.JoinHostPort(a, "0"))
	})
	step("af-inet6-loopback", func() (string, error) { return tcp("tcp6", "[::1]:0") })
	step("denied-write-usr", func() (string, error) {
		err := os.WriteFile("/usr/pkgtest-should-fail", nil, 0o644)
		if err == nil {
			os.Remove("/usr/pkgtest-should-fail")
			return "", errors.New("wrote /usr/pkgtest-should-fail: ProtectSystem=strict not in effect")
		}
		if !errors.Is(err, syscall.EROFS) {
			return "", fmt.Errorf("write /usr: %w, want EROFS", err)
		}
		return "EROFS", nil
	})
	// /run outside rdmad's runtime directory: a root rdmad that could
	// write /run/systemd/system could leave a unit for the next
	// daemon-reload to run outside the sandbox.
	step("denied-write-run", func() (string, error) {
		p := "/run/systemd/system/pkgtest-should-fail.service"
		err := os.WriteFile(p, nil, 0o644)
		if err == nil {
			os.Remove(p)
			return "", errors.New("wrote " + p + ": /run is writable in the sandbox")
		}
		if !errors.Is(err, syscall.EROFS) {
			return "", fmt.Errorf("write %s: %w, want EROFS", p, err)
		}
		return "EROFS", nil
	})
	step("denied-mount", func() (string, error) {
		err := unix.Mount("tmpfs", "/tmp", "tmpfs", 0, "")
		if err == nil {
			unix.Unmount("/tmp", 0)
			return "", errors.New("mount succeeded: no CAP_SYS_ADMIN and @mount filtered, want EPERM")
		}
		if !errors.Is(err, syscall.EPERM) {
			return "", fmt.Errorf("mount: %w, want EPERM", err)
		}
		return "EPERM", nil
	})
	step("kmsg-read", func() (string, error) {
		// rdmad's kernel fault follower: /dev/kmsg bound into the
		// private /dev, readable (CAP_SYSLOG under dmesg_restrict=1).
		f := kmsg.New(kmsg.Options{})
		f.SetDevices(nil)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := f.Run(ctx); !errors.Is(err, context.DeadlineExceeded) {
			return "", fmt.Errorf("follow the kernel log: %v", err)
		}
		st := f.Stats()
		if st.Records == 0 {
			return "", errors.New("read no record of the kernel's buffer")
		}
		return fmt.Sprintf("%d records", st.Records), nil
	})
	step("denied-kmsg-write", func() (string, error) {
		// DeviceAllow=/dev/kmsg r: reading only.
		f, err := os.OpenFile("/dev/kmsg", os.O_WRONLY, 0)
		if err == nil {
			f.Close()
			return "", errors.New("opened /dev/kmsg for writing: DeviceAllow=/dev/kmsg r not in effect")
		}
		if !errors.Is(err, syscall.EPERM) {
			return "", fmt.Errorf("open /dev/kmsg for writing: %w, want EPERM", err)
		}
		return "EPERM", nil
	})
}

// TestPackageRestartAfterKill checks Restart=on-failure: SIGKILL, and
// systemd starts rdmad again.
func TestPackageRestartAfterKill(t *testing.T) {
	pkgRequire(t)
	pid := pkgWaitRunning(t)
	before, _ := strconv.Atoi(pkgShow(t, "NRestarts")["NRestarts"])
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	pkgWait(t, 60*time.Second, "restarted after kill -9", func() (bool, string) {
		u := pkgShow(t, "ActiveState", "MainPID", "NRestarts")
		n, _ := strconv.Atoi(u["NRestarts"])
		return u["ActiveState"] == "active" && u["MainPID"] != "0" && u["MainPID"] != strconv.Itoa(pid) && n == before+1, fmt.Sprint(u)
	})
	pkgWaitRunning(t)
}

// TestPackageWatchdog hangs rdmad's main loop (RDMAD_TEST_FAULT) under a
// short WatchdogSec= and checks that systemd notices, says so in the
// journal and restarts rdmad.
func TestPackageWatchdog(t *testing.T) {
	pkgRequire(t)
	pkgWaitRunning(t)
	dir := "/run/systemd/system/rdmad.service.d"
	dropIn := filepath.Join(dir, "50-pkgtest-watchdog.conf")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dropIn, []byte("[Service]\nEnvironment=RDMAD_TEST_FAULT=hang-on-sigusr2\nWatchdogSec=6s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.Remove(dropIn)
		os.Remove(dir)
		pkgRun("systemctl", "daemon-reload")
		if _, err := pkgRun("systemctl", "restart", "rdmad.service"); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		pkgWaitRunning(t)
	})
	pkgMustRun(t, "systemctl", "daemon-reload")
	pkgMustRun(t, "systemctl", "restart", "rdmad.service")
	pid := pkgWaitRunning(t)
	if got := pkgShow(t, "WatchdogUSec")["WatchdogUSec"]; got != "6s" {
		t.Fatalf("WatchdogUSec = %q with the drop-in, want 6s", got)
	}
	// The loop keeps pinging while it works: no restart for a few periods.
	time.Sleep(10 * time.Second)
	if got := pkgShow(t, "MainPID")["MainPID"]; got != strconv.Itoa(pid) {
		t.Fatalf("rdmad restarted (MainPID %s, was %d) before the fault: the watchdog fires on a healthy loop", got, pid)
	}
	since := time.Now().Add(-time.Second)
	if err := syscall.Kill(pid, syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	pkgWait(t, 90*time.Second, "restarted by the watchdog", func() (bool, string) {
		u := pkgShow(t, "ActiveState", "MainPID")
		return u["ActiveState"] == "active" && u["MainPID"] != "0" && u["MainPID"] != strconv.Itoa(pid), fmt.Sprint(u)
	})
	log := pkgMustRun(t, "journalctl", "--no-pager", "-u", "rdmad.service", "--since", "@"+strconv.FormatInt(since.Unix(), 10))
	if !strings.Contains(log, "Watchdog timeout") {
		t.Errorf("journal of rdmad.service since the fault has no \"Watchdog timeout\":\n%s", pkgTail(log, 30))
	}
}

// TestPackageStop checks that `systemctl stop` ends rdmad cleanly (exit 0)
// and within 5 s, then starts it again.
func TestPackageStop(t *testing.T) {
	pkgRequire(t)
	pkgWaitRunning(t)
	t.Cleanup(func() {
		if _, err := pkgRun("systemctl", "start", "rdmad.service"); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		pkgWaitRunning(t)
	})
	start := time.Now()
	pkgMustRun(t, "systemctl", "stop", "rdmad.service")
	took := time.Since(start)
	u := pkgShow(t, "ActiveState", "Result", "ExecMainStatus", "ExecMainCode")
	want := map[string]string{"ActiveState": "inactive", "Result": "success", "ExecMainStatus": "0", "ExecMainCode": "1"} // CLD_EXITED
	if diff := cmp.Diff(want, u); diff != "" {
		t.Errorf("after systemctl stop (-want +got):\n%s", diff)
	}
	if took > 5*time.Second {
		t.Errorf("systemctl stop took %v, want at most 5s", took)
	}
	if _, err := os.Stat("/run/rdmad/rdmad.sock"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket after stop: %v, want it gone", err)
	}
}

// TestPackageUpgradePurgeReinstall installs the .deb over itself (the
// upgrade path: try-restart), purges it and checks that nothing of it is
// left, then installs it afresh (postinst enables and starts it) so later
// tests find rdmad as the test bed left it.
func TestPackageUpgradePurgeReinstall(t *testing.T) {
	pkgRequire(t)
	debs, _ := filepath.Glob("/mnt/vm/project/deb/rdmad_*.deb")
	if len(debs) != 1 {
		t.Skipf("want the test bed's copy of the .deb in /mnt/vm/project/deb, found %v: test/vm/run stages it there in deb mode", debs)
	}
	deb := debs[0]
	pid := pkgWaitRunning(t)

	// Upgrade path: postinst configure <old-version> try-restarts.
	pkgMustRun(t, "dpkg", "-i", deb)
	pkgWait(t, 90*time.Second, "restarted by the upgrade", func() (bool, string) {
		u := pkgShow(t, "ActiveState", "MainPID")
		return u["ActiveState"] == "active" && u["MainPID"] != "0" && u["MainPID"] != strconv.Itoa(pid), fmt.Sprint(u)
	})
	if got := pkgMustRun(t, "systemctl", "is-enabled", "rdmad.service"); got != "enabled" {
		t.Errorf("after upgrade: is-enabled = %q, want enabled", got)
	}
	pkgWaitRunning(t)

	// Remove (configuration kept) and install again: postrm masked the
	// unit on remove, and postinst must unmask, enable and start it, or a
	// reinstalled node runs without its agent.
	pkgMustRun(t, "dpkg", "-r", "rdmad")
	if got, _ := pkgRun("systemctl", "is-enabled", "rdmad.service"); got != "masked" && got != "masked-runtime" {
		t.Logf("after dpkg -r: is-enabled = %q", got)
	}
	pkgMustRun(t, "dpkg", "-i", deb)
	if got, _ := pkgRun("systemctl", "is-enabled", "rdmad.service"); got != "enabled" {
		t.Errorf("after dpkg -r and dpkg -i: is-enabled = %q, want enabled (not masked)", got)
	}
	pkgWaitRunning(t)

	// Things an admin and rdmad add, which purge must remove too.
	if err := os.WriteFile("/etc/rdmad/rdmad.d/50-pkgtest.toml", []byte("[daemon]\nlog_level = \"debug\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("/var/lib/rdmad/pkgtest-state", []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	files := strings.Split(pkgMustRun(t, "dpkg", "-L", "rdmad"), "\n")
	// The test bed's drop-ins (the peers of a two-node bed) go with the
	// purge; the tests after this one need them back.
	dropins := pkgSaveDropins(t)
	reinstalled := false
	t.Cleanup(func() {
		if !reinstalled {
			pkgRun("dpkg", "-i", deb)
		}
		pkgRestoreDropins(t, dropins)
	})

	pkgMustRun(t, "dpkg", "--purge", "rdmad")
	if out, _ := pkgRun("dpkg-query", "-W", "-f=${Status}", "rdmad"); strings.Contains(out, "installed") && !strings.Contains(out, "not-installed") {
		t.Errorf("dpkg status after purge: %q", out)
	}
	for _, f := range files {
		if _, err := os.Lstat(f); err != nil {
			continue // gone
		}
		// Shared directories such as /usr/share/man/man8 and /lib (a
		// symlink to one on merged-/usr systems) stay.
		if fi, err := os.Stat(f); err == nil && fi.IsDir() && !strings.Contains(f, "rdmad") {
			continue
		}
		t.Errorf("after purge %s is still there", f)
	}
	for _, p := range []string{"/etc/rdmad", "/var/lib/rdmad", "/run/rdmad",
		"/etc/systemd/system/rdmad.service", "/etc/systemd/system/multi-user.target.wants/rdmad.service",
		"/etc/systemd/system/rdma-hw.target.wants/rdmad.service"} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("after purge %s: %v, want it gone", p, err)
		}
	}
	if out, _ := pkgRun("systemctl", "list-unit-files", "--no-legend", "rdmad.service"); out != "" {
		t.Errorf("systemctl list-unit-files after purge: %q, want no unit", out)
	}
	if u := pkgShow(t, "LoadState", "ActiveState"); u["LoadState"] != "not-found" || u["ActiveState"] != "inactive" {
		t.Errorf("rdmad.service after purge: %v, want not-found and inactive", u)
	}
	if out, err := pkgRun("pidof", "rdmad"); err == nil {
		t.Errorf("rdmad still runs after purge: pid %s", out)
	}

	// A fresh install: postinst enables and starts it by itself.
	pkgMustRun(t, "dpkg", "-i", deb)
	reinstalled = true
	if got := pkgMustRun(t, "systemctl", "is-enabled", "rdmad.service"); got != "enabled" {
		t.Errorf("after a fresh install: is-enabled = %q, want enabled", got)
	}
	pkgWaitRunning(t)
}

// pkgSaveDropins returns the test bed's drop-ins in /etc/rdmad/rdmad.d (all
// but this file's own 50-pkgtest.toml), by name.
func pkgSaveDropins(t *testing.T) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	paths, _ := filepath.Glob("/etc/rdmad/rdmad.d/*.toml")
	for _, p := range paths {
		if filepath.Base(p) == "50-pkgtest.toml" {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(p)] = b
	}
	return out
}

// pkgRestoreDropins writes the saved drop-ins back and reloads rdmad.
func pkgRestoreDropins(t *testing.T, saved map[string][]byte) {
	if len(saved) == 0 {
		return
	}
	os.MkdirAll("/etc/rdmad/rdmad.d", 0o755)
	for name, b := range saved {
		if err := os.WriteFile(filepath.Join("/etc/rdmad/rdmad.d", name), b, 0o644); err != nil {
			t.Errorf("restore drop-in %s: %v", name, err)
		}
	}
	if _, err := pkgRun("systemctl", "reload", "rdmad.service"); err != nil {
		t.Errorf("reload after restoring the drop-ins: %v", err)
	}
}
