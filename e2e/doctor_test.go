//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// doctorReport is `rdmactl --json doctor`.
type doctorReport struct {
	Worst  string `json:"worst"`
	Checks []struct {
		ID      string `json:"id"`
		Verdict string `json:"verdict"`
		Message string `json:"message"`
		Fix     string `json:"fix"`
	} `json:"checks"`
}

func (r doctorReport) verdict(id string) (verdict, message string) {
	for _, c := range r.Checks {
		if c.ID == id {
			return c.Verdict, c.Message
		}
	}
	return "", ""
}

// doctorRun runs rdmactl doctor (prefixed by wrap, e.g. prlimit) and
// returns its report and exit code.
func doctorRun(t *testing.T, wrap ...string) (doctorReport, int) {
	t.Helper()
	args := append(wrap, "rdmactl", "--json", "doctor", "--", "--interval", "1s")
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s: %v", strings.Join(args, " "), err)
	}
	var r doctorReport
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("%s: exit %d, output is not the JSON report: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, err, stdout.String(), stderr.String())
	}
	return r, code
}

// doctorWait runs doctor until check id has verdict want (the kernel
// updates GIDs and port states asynchronously), failing t after 20s.
func doctorWait(t *testing.T, id, want string) doctorReport {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		r, code := doctorRun(t)
		v, msg := r.verdict(id)
		if v == want {
			if want == "fail" && code != 3 {
				t.Errorf("doctor exit code %d with a failing check, want 3", code)
			}
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("doctor check %s: %s (%s), want %s within 20s", id, v, msg, want)
		}
		time.Sleep(time.Second)
	}
}

// doctorSysfs reads a sysfs file, "" when it cannot.
func doctorSysfs(path string) string {
	b, _ := os.ReadFile(path)
	return strings.TrimSpace(string(b))
}

// doctorWaitFor polls cond for up to 20s; cleanups use it to leave the VM
// as they found it for the tests that follow.
func doctorWaitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Errorf("restore: %s did not happen within 20s", what)
			return
		}
	}
}

// doctorHasGID reports whether rxe0 port 1 has the IPv4-mapped GID of addr.
func doctorHasGID(addr string) bool {
	out, _ := exec.Command("sh", "-c", "cat /sys/class/infiniband/rxe0/ports/1/gids/* 2>/dev/null").Output()
	return strings.Contains(string(out), ipv4GIDSuffix(addr))
}

// ipv4GIDSuffix is how sysfs prints the IPv4-mapped GID's last 32 bits.
func ipv4GIDSuffix(addr string) string {
	a, err := netip.ParseAddr(addr)
	if err != nil || !a.Is4() {
		return "not an IPv4 address: " + addr
	}
	b := a.As4()
	return fmt.Sprintf("ffff:%02x%02x:%02x%02x", b[0], b[1], b[2], b[3])
}

// TestDoctorHealthy: on the test bed's rxe0, the device, verbs, port and
// GID checks pass and the daemon answers.
func TestDoctorHealthy(t *testing.T) {
	requireVM(t)
	waitActive(t)
	r, code := doctorRun(t)
	for _, id := range []string{"daemon", "devices", "uverbs", "ports", "gid"} {
		if v, msg := r.verdict(id); v != "ok" {
			t.Errorf("doctor check %s: %s (%s), want ok", id, v, msg)
		}
	}
	if v, msg := r.verdict("mtu"); v != "ok" || !strings.Contains(msg, "RDMA MTU") {
		t.Errorf("doctor check mtu: %s (%s), want ok with the RDMA MTU", v, msg)
	}
	if want := map[string]int{"ok": 0, "skip": 0, "warn": 3, "fail": 3}[r.Worst]; code != want {
		t.Errorf("doctor exit code %d with worst verdict %s, want %d", code, r.Worst, want)
	}
	t.Logf("doctor: worst %s, exit %d: %+v", r.Worst, code, r.Checks)
}

// TestDoctorGIDWithoutAddress: removing eth0's address removes the RoCE v2
// GID behind it, and the gid check fails.
func TestDoctorGIDWithoutAddress(t *testing.T) {
	requireVM(t)
	waitActive(t)
	addr := nodeAddr(t)
	out := mustRun(t, "ip", "-o", "-4", "addr", "show", "dev", "eth0")
	var cidr string
	for _, f := range strings.Fields(out) {
		if strings.HasPrefix(f, addr+"/") {
			cidr = f
		}
	}
	if cidr == "" {
		t.Fatalf("eth0 does not have %s: %s", addr, out)
	}
	mustRun(t, "ip", "addr", "del", cidr, "dev", "eth0")
	t.Cleanup(func() {
		if _, err := run("ip", "addr", "add", cidr, "dev", "eth0"); err != nil {
			t.Errorf("restore eth0's address: %v", err)
		}
		doctorWaitFor(t, "rxe0's GID for "+addr, func() bool { return doctorHasGID(addr) })
	})
	r := doctorWait(t, "gid", "fail")
	_, msg := r.verdict("gid")
	if !strings.Contains(msg, "eth0 has no IPv4 or global IPv6 address") {
		t.Errorf("gid check message %q does not say eth0 lost its address", msg)
	}
}

// TestDoctorPortDown: with eth0 down, rxe0's port is down and the ports
// check fails.
func TestDoctorPortDown(t *testing.T) {
	requireVM(t)
	waitActive(t)
	addr := nodeAddr(t)
	mustRun(t, "ip", "link", "set", "eth0", "down")
	t.Cleanup(func() {
		if _, err := run("ip", "link", "set", "eth0", "up"); err != nil {
			t.Errorf("restore eth0: %v", err)
		}
		doctorWaitFor(t, "rxe0 port 1 ACTIVE", func() bool {
			return strings.HasSuffix(doctorSysfs("/sys/class/infiniband/rxe0/ports/1/state"), "ACTIVE")
		})
		doctorWaitFor(t, "rxe0's GID for "+addr, func() bool { return doctorHasGID(addr) })
	})
	r := doctorWait(t, "ports", "fail")
	_, msg := r.verdict("ports")
	if !strings.Contains(msg, "rxe0/1 is DOWN") {
		t.Errorf("ports check message %q does not name rxe0/1 DOWN", msg)
	}
}

// TestDoctorMemlock: a process with a 64 KiB RLIMIT_MEMLOCK gets a
// memlock-user warning about its own limit (rdmactl runs that check in the
// caller's session; rdmad runs the rest).
func TestDoctorMemlock(t *testing.T) {
	requireVM(t)
	waitActive(t)
	r, code := doctorRun(t, "prlimit", "--memlock=65536:65536")
	v, msg := r.verdict("memlock-user")
	if v != "warn" && v != "fail" || !strings.Contains(msg, "you may lock 64KiB") {
		t.Errorf("memlock check under prlimit 64KiB: %s (%s), want a warning about your 64KiB limit", v, msg)
	}
	if code != 3 {
		t.Errorf("doctor exit code %d with a memlock warning, want 3", code)
	}
}
