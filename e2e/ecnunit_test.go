//go:build e2e

package e2e

// ECN under the shipped units (issue #24 item 11). rdmad.service keeps /sys
// read-only; rdmad-ecn@<netdev>.service opens exactly
// /sys/class/net/<netdev>/ecn (docs/SECURITY.md, "ECN under systemd").
//
// The bed's netdevs are virtio NICs under Soft-RoCE: they have no ecn
// directory, so the real files cannot be written here. What is proved, and
// how:
//
//   - TestPackageECNUnit: the installed template is the one that opens
//     only the ecn directory (systemctl show resolves it for the bed's
//     netdev), and its real ExecStart runs: `rdmad --write-ecn` starts under
//     its sandbox (system call filter, no capability, no socket), reads the
//     want file rdmad would leave, refuses a group-writable one, and says
//     the netdev has no ecn files.
//   - TestPackageECNSandbox: the mechanism, with a copy of the installed unit
//     whose one ReadWritePaths= word is changed from "ecn" to "queues" (a
//     directory every netdev has, behind the same /sys/class/net symlink)
//     and whose ExecStart is this binary's helper: in that unit's mount
//     namespace the directory is a read-write bind mount of its resolved
//     /sys/devices/... path and can be opened for writing, while the
//     netdev's other attributes, another netdev's and the rest of /sys fail
//     with EROFS; in rdmad's mount namespace (nsenter) all of them fail with
//     EROFS.
//
// Not proved here: that mlx5's ecn store handlers accept a write from uid
// 0 without capabilities (only a ConnectX shows that; the files are 0644
// root's and sysfs checks only the mode), and rdmad's own fallback from
// EROFS to the unit end to end (it starts the unit only for a netdev with
// ecn files; the host tests drive it: policy TestECNThroughUnit, daemon/
// unitjob TestStart). Opening for writing is the test, not writing: the
// mount's read-only flag is checked at open(2), and no attribute changes.

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/policy/ecn"
)

const (
	ecnUnitPath = "/lib/systemd/system/rdmad-ecn@.service"
	// ecnHelperEnv selects TestPackageECNSandboxHelper's mode: "unit" inside
	// the test copy of the unit, "rdmad" in rdmad's mount namespace.
	ecnHelperEnv = "RDMAD_ECN_SANDBOX_HELPER"
	ecnNetdevEnv = "RDMAD_ECN_NETDEV"
	// ecnRWLine is the one opening of the installed template.
	ecnRWLine = "ReadWritePaths=-/sys/class/net/%I/ecn"
)

// ecnNetdev returns the netdev under rxe0: the bed's virtio NIC.
func ecnNetdev(t *testing.T) string {
	t.Helper()
	if b, err := os.ReadFile("/sys/class/infiniband/rxe0/ports/1/gid_attrs/ndevs/0"); err == nil {
		if nd := strings.TrimSpace(string(b)); nd != "" {
			return nd
		}
	}
	out := pkgMustRun(t, "rdma", "link", "show", "rxe0/1")
	f := strings.Fields(out)
	for i := 0; i+1 < len(f); i++ {
		if f[i] == "netdev" {
			return f[i+1]
		}
	}
	t.Fatalf("no netdev for rxe0 in %q", out)
	return ""
}

// ecnShow returns systemctl show's properties of unit.
func ecnShow(t *testing.T, unit string, props ...string) map[string]string {
	t.Helper()
	out := pkgMustRun(t, "systemctl", "show", "--property="+strings.Join(props, ","), unit)
	m := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			m[k] = v
		}
	}
	return m
}

// ecnJournal waits until the journal of unit's last invocation holds
// want, and returns it.
func ecnJournal(t *testing.T, unit, want string) string {
	t.Helper()
	id := ecnShow(t, unit, "InvocationID")["InvocationID"]
	if id == "" {
		t.Fatalf("%s has no InvocationID: it never ran", unit)
	}
	var got string
	pkgWait(t, 15*time.Second, fmt.Sprintf("journal of %s has %q", unit, want), func() (bool, string) {
		got, _ = pkgRun("journalctl", "--no-pager", "-o", "cat", "_SYSTEMD_INVOCATION_ID="+id)
		return strings.Contains(got, want), got
	})
	return got
}

func TestPackageECNUnit(t *testing.T) {
	pkgRequire(t)
	pkgWaitRunning(t)
	nd := ecnNetdev(t)
	if err := ecn.ValidNetdev(nd); err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile(ecnUnitPath)
	if err != nil {
		t.Fatalf("the package installs no template: %v", err)
	}
	var rw []string
	for _, line := range strings.Split(string(text), "\n") {
		if strings.HasPrefix(line, "ReadWritePaths=") {
			rw = append(rw, line)
		}
	}
	if len(rw) != 1 || rw[0] != ecnRWLine {
		t.Fatalf("%s: ReadWritePaths lines %q, want exactly %q", ecnUnitPath, rw, ecnRWLine)
	}

	unit := ecn.UnitName(nd)
	p := ecnShow(t, unit, "ReadWritePaths", "ProtectKernelTunables", "CapabilityBoundingSet", "RestrictAddressFamilies", "UnitFileState", "ExecStart", "NoNewPrivileges")
	if want := "-/sys/class/net/" + nd + "/ecn"; p["ReadWritePaths"] != want {
		t.Errorf("%s ReadWritePaths=%q, want %q", unit, p["ReadWritePaths"], want)
	}
	if p["ProtectKernelTunables"] != "yes" || p["NoNewPrivileges"] != "yes" || p["CapabilityBoundingSet"] != "" {
		t.Errorf("%s sandbox: %v", unit, p)
	}
	if p["UnitFileState"] != "static" {
		t.Errorf("%s UnitFileState=%q, want static (rdmad starts it; nothing enables it)", unit, p["UnitFileState"])
	}
	if !strings.Contains(p["ExecStart"], "argv[]=/usr/sbin/rdmad --write-ecn "+nd+" ") {
		t.Errorf("%s ExecStart=%s, want rdmad --write-ecn %s", unit, p["ExecStart"], nd)
	}

	// The real ExecStart, with a want file as rdmad leaves it.
	t.Cleanup(func() {
		ecn.RemoveWantFile(ecn.WantDir, nd)
		pkgRun("systemctl", "reset-failed", unit)
	})
	if err := ecn.WriteWantFile(ecn.WantDir, nd, ecn.Want{NP: []int{3}}); err != nil {
		t.Fatal(err)
	}
	if _, err := pkgRun("systemctl", "start", unit); err == nil {
		t.Errorf("systemctl start %s succeeded on a netdev without ecn files", unit)
	}
	if r := ecnShow(t, unit, "Result", "ExecMainStatus"); r["Result"] != "exit-code" || r["ExecMainStatus"] != "1" {
		t.Errorf("%s: %v, want Result=exit-code ExecMainStatus=1 (rdmad's error exit, not a sandbox kill or 226/NAMESPACE)", unit, r)
	}
	ecnJournal(t, unit, "has no /sys/class/net/"+nd+"/ecn")

	// A want file others may write is refused before anything is opened.
	if err := os.Chmod(filepath.Join(ecn.WantDir, nd), 0o620); err != nil {
		t.Fatal(err)
	}
	pkgRun("systemctl", "reset-failed", unit)
	if _, err := pkgRun("systemctl", "start", unit); err == nil {
		t.Errorf("systemctl start %s succeeded with a group-writable want file", unit)
	}
	ecnJournal(t, unit, "not writable by others")
}

func TestPackageECNSandbox(t *testing.T) {
	pkgRequire(t)
	pid := pkgWaitRunning(t)
	nd := ecnNetdev(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile(ecnUnitPath)
	if err != nil {
		t.Fatal(err)
	}

	// The installed unit with its one opening moved from ecn to queues
	// (which the virtio netdev has) and this binary's helper as ExecStart.
	const tmpl = "rdmad-ecnpkgtest@.service"
	out := "/run/rdmad-ecnpkgtest.out"
	var b strings.Builder
	replaced := 0
	for _, line := range strings.Split(string(text), "\n") {
		key, _, _ := strings.Cut(line, "=")
		switch {
		case line == ecnRWLine:
			line = "ReadWritePaths=-/sys/class/net/%I/queues"
			replaced++
		case key == "ExecStart":
			line = fmt.Sprintf("ExecStart=%s -test.run=^TestPackageECNSandboxHelper$ -test.v\n", exe) +
				fmt.Sprintf("Environment=%s=unit %s=%%I\n", ecnHelperEnv, ecnNetdevEnv) +
				fmt.Sprintf("StandardOutput=truncate:%s\nStandardError=inherit", out)
		case key == "Documentation":
			continue
		}
		b.WriteString(line + "\n")
	}
	if replaced != 1 {
		t.Fatalf("%s has no line %q to move", ecnUnitPath, ecnRWLine)
	}
	path := filepath.Join("/run/systemd/system", tmpl)
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	inst := strings.Replace(ecn.UnitName(nd), "rdmad-ecn@", "rdmad-ecnpkgtest@", 1)
	t.Cleanup(func() {
		pkgRun("systemctl", "reset-failed", inst)
		os.Remove(path)
		os.Remove(out)
		pkgRun("systemctl", "daemon-reload")
	})
	pkgMustRun(t, "systemctl", "daemon-reload")
	_, runErr := pkgRun("systemctl", "start", inst) // oneshot: returns when done
	res, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("helper output: %v (systemctl start: %v)", err, runErr)
	}
	ecnSteps(t, "unit", string(res), ecnUnitSteps)
	if runErr != nil {
		t.Errorf("the sandbox copy failed: %v", runErr)
	}

	// rdmad's mount namespace: all of it read-only.
	cmd := exec.Command("nsenter", "-t", strconv.Itoa(pid), "-m", "--", exe, "-test.run=^TestPackageECNSandboxHelper$", "-test.v")
	cmd.Env = append(os.Environ(), ecnHelperEnv+"=rdmad", ecnNetdevEnv+"="+nd)
	rout, rerr := cmd.CombinedOutput()
	ecnSteps(t, "rdmad", string(rout), ecnRdmadSteps)
	if rerr != nil {
		t.Errorf("helper in rdmad's namespace: %v", rerr)
	}
}

// ecnSteps checks that every step of want reported success in out.
func ecnSteps(t *testing.T, where, out string, want []string) {
	t.Helper()
	got := map[string]pkgStep{}
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(line, pkgStepPrefix); ok {
			var s pkgStep
			if err := json.Unmarshal([]byte(rest), &s); err != nil {
				t.Errorf("%s helper line %q: %v", where, line, err)
				continue
			}
			got[s.Name] = s
		}
	}
	for _, name := range want {
		s, ok := got[name]
		switch {
		case !ok:
			t.Errorf("%s step %s: no result; helper output:\n%s", where, name, pkgTail(out, 30))
		case s.Err != "":
			t.Errorf("%s step %s: %s", where, name, s.Err)
		default:
			t.Logf("%s step %s: ok %s", where, name, s.Info)
		}
	}
}

var (
	ecnUnitSteps  = []string{"opening-writable", "opening-rw-bind", "netdev-attr-readonly", "other-netdev-readonly", "sys-readonly", "sys-ro-mount", "no-capabilities", "no-sockets", "run-readonly"}
	ecnRdmadSteps = []string{"opening-readonly", "netdev-attr-readonly", "other-netdev-readonly", "sys-readonly"}
)

// openWrite opens path for writing and closes it without writing: the
// read-only mount flag is checked at open(2).
func openWrite(path string) error {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	return unix.Close(fd)
}

func wantEROFS(path string) (string, error) {
	err := openWrite(path)
	if errors.Is(err, unix.EROFS) {
		return path + ": EROFS", nil
	}
	return "", fmt.Errorf("open %s for writing: %v, want EROFS", path, err)
}

// mountOf returns the mountinfo line whose mount point is dir.
func mountOf(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var found []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 5 && fields[4] == dir {
			found = fields // the last one is on top
		}
	}
	if found == nil {
		return nil, fmt.Errorf("no mount at %s in /proc/self/mountinfo", dir)
	}
	return found, sc.Err()
}

func mountRW(fields []string) bool {
	for _, o := range strings.Split(fields[5], ",") {
		if o == "rw" {
			return true
		}
	}
	return false
}

// TestPackageECNSandboxHelper is not a test of its own: TestPackageECNSandbox
// runs this binary with it in the sandbox copy of rdmad-ecn@.service and in
// rdmad's mount namespace.
func TestPackageECNSandboxHelper(t *testing.T) {
	mode := os.Getenv(ecnHelperEnv)
	if mode == "" {
		t.Skip("helper of TestPackageECNSandbox; runs only inside its sandbox or rdmad's namespace")
	}
	nd := os.Getenv(ecnNetdevEnv)
	step := func(name string, f func() (string, error)) {
		info, err := f()
		s := pkgStep{Name: name, Info: info}
		if err != nil {
			s.Err = err.Error()
		}
		b, _ := json.Marshal(s)
		fmt.Printf("%s%s\n", pkgStepPrefix, b)
	}
	if err := ecn.ValidNetdev(nd); err != nil {
		step("netdev", func() (string, error) { return "", err })
		return
	}
	// The opening (queues in the test copy, as ecn in the shipped unit)
	// and an attribute below it.
	opening := "/sys/class/net/" + nd + "/queues"
	attr := opening + "/rx-0/rps_cpus"
	if mode == "unit" {
		step("opening-writable", func() (string, error) {
			if err := openWrite(attr); err != nil {
				return "", fmt.Errorf("open %s for writing: %w (the opening is not writable)", attr, err)
			}
			return attr + " opens for writing", nil
		})
		step("opening-rw-bind", func() (string, error) {
			real, err := filepath.EvalSymlinks(opening)
			if err != nil {
				return "", err
			}
			m, err := mountOf(real)
			if err != nil {
				return "", fmt.Errorf("%w (systemd did not bind-mount the resolved path of %s)", err, opening)
			}
			if !mountRW(m) {
				return "", fmt.Errorf("mount at %s has options %s, want rw", real, m[5])
			}
			return real + " " + m[5], nil
		})
	} else {
		step("opening-readonly", func() (string, error) { return wantEROFS(attr) })
	}
	step("netdev-attr-readonly", func() (string, error) { return wantEROFS("/sys/class/net/" + nd + "/mtu") })
	step("other-netdev-readonly", func() (string, error) { return wantEROFS("/sys/class/net/lo/queues/rx-0/rps_cpus") })
	step("sys-readonly", func() (string, error) {
		for _, p := range []string{"/sys/bus/pci/rescan", "/sys/kernel/uevent_helper", "/sys/power/state"} {
			if _, err := os.Stat(p); err == nil {
				return wantEROFS(p)
			}
		}
		return "", errors.New("none of the probe attributes exists")
	})
	if mode != "unit" {
		return
	}
	step("sys-ro-mount", func() (string, error) {
		m, err := mountOf("/sys")
		if err != nil {
			return "", err
		}
		if mountRW(m) {
			return "", fmt.Errorf("/sys is mounted %s, want ro", m[5])
		}
		return "/sys " + m[5], nil
	})
	step("no-capabilities", func() (string, error) {
		b, err := os.ReadFile("/proc/self/status")
		if err != nil {
			return "", err
		}
		got := map[string]string{}
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok {
				got[k] = strings.TrimSpace(v)
			}
		}
		for k, want := range map[string]string{"CapEff": "0000000000000000", "CapBnd": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2"} {
			if got[k] != want {
				return "", fmt.Errorf("%s = %q, want %q", k, got[k], want)
			}
		}
		return "CapEff 0, CapBnd 0, NoNewPrivs, seccomp", nil
	})
	step("no-sockets", func() (string, error) {
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err == nil {
			unix.Close(fd)
			return "", errors.New("socket(AF_UNIX) succeeded; RestrictAddressFamilies=none should refuse it")
		}
		return "socket(AF_UNIX): " + err.Error(), nil
	})
	step("run-readonly", func() (string, error) {
		// The writer cannot leave or change a want file: rdmad's
		// runtime directory is read-only here.
		p := filepath.Join(filepath.Dir(ecn.WantDir), "ecnpkgtest")
		err := os.WriteFile(p, []byte("np=3\n"), 0o600)
		if err == nil {
			os.Remove(p)
			return "", fmt.Errorf("created %s", p)
		}
		if !errors.Is(err, unix.EROFS) {
			return "", fmt.Errorf("create %s: %v, want EROFS", p, err)
		}
		return err.Error(), nil
	})
}
