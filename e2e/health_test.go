//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

//e2e:nodes 2

// The health verdict on the Soft-RoCE bed (docs/HEALTH.md, issue #25's
// proof): rdmactl check answers a scheduler's question with its exit code
// (0 ok, 1 problem, 2 unknown) and one line, a port down, a flapping port
// and a kernel fault each raise their condition, and the node is healthy
// again once the cause is gone.

// healthDiag logs, when t failed, what rdmad's unit and journal say, so
// that a failure on the bed (a restart, a stall) is explained in the log.
// The journal comes first and what failed last: CI's report quotes the
// lines before a test's FAIL, which the journal would otherwise fill. The
// test's own checks go through the returned diag's Errorf so that they are
// said again at the end; the verdict rdmactl check gives then follows.
func healthDiag(t *testing.T) *diag {
	d := &diag{t: t, since: fmt.Sprintf("@%d", time.Now().Add(-5*time.Minute).Unix())}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		d.logJournal()
		if code, out, err := checkCode(); err == nil {
			t.Logf("rdmactl check now: exit %d: %s", code, strings.TrimSpace(out))
		}
		for _, m := range d.failed {
			t.Logf("failed: %s", m)
		}
	})
	return d
}

// logJournal logs rdmad's unit, its journal and the kernel log since
// d.since.
func (d *diag) logJournal() {
	t := d.t
	if out, err := run("systemctl", "show", "rdmad", "-p", "NRestarts,ActiveState,ExecMainStatus,ActiveEnterTimestamp"); err == nil {
		t.Logf("rdmad unit: %s", strings.ReplaceAll(strings.TrimSpace(out), "\n", ", "))
	}
	if out, err := run("journalctl", "-u", "rdmad", "--since", d.since, "-n", "200", "--no-pager", "-o", "short-monotonic"); err == nil {
		t.Logf("rdmad's journal:\n%s", out)
	}
	if out, err := run("journalctl", "-k", "--since", d.since, "-n", "40", "--no-pager", "-o", "short-monotonic"); err == nil {
		t.Logf("the kernel log:\n%s", out)
	}
}

// A diag records a test's failures for healthDiag to say again.
type diag struct {
	t      *testing.T
	since  string // journalctl --since
	failed []string
}

func (d *diag) Errorf(format string, args ...any) {
	d.t.Helper()
	m := fmt.Sprintf(format, args...)
	d.failed = append(d.failed, m)
	d.t.Error(m)
}

// checkCode runs `rdmactl check` and returns its exit code and output.
func checkCode(args ...string) (int, string, error) {
	cmd := exec.Command("rdmactl", append([]string{"check"}, args...)...)
	out, err := cmd.Output()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(out), nil
	}
	return 0, string(out), err
}

// checkNow runs `rdmactl check` with args and returns its exit code and
// output.
func checkNow(t *testing.T, args ...string) (int, string) {
	t.Helper()
	code, out, err := checkCode(args...)
	if err != nil {
		t.Fatalf("rdmactl check: %v", err)
	}
	return code, out
}

type healthDoc struct {
	Healthy    bool   `json:"healthy"`
	Status     string `json:"status"`
	Conditions []struct {
		Type    string   `json:"type"`
		Status  string   `json:"status"`
		Reason  string   `json:"reason"`
		Message string   `json:"message"`
		Objects []string `json:"objects"`
	} `json:"conditions"`
}

func (h healthDoc) cond(typ string) (status, message string, objects []string) {
	for _, c := range h.Conditions {
		if c.Type == typ {
			return c.Status, c.Message, c.Objects
		}
	}
	return "absent", "", nil
}

func healthNow(t *testing.T) healthDoc {
	t.Helper()
	_, out := checkNow(t, "--json")
	var h healthDoc
	if err := json.Unmarshal([]byte(out), &h); err != nil {
		t.Fatalf("rdmactl check --json: %v in %q", err, out)
	}
	return h
}

// waitHealthy waits until rdmactl check exits 0: after a test that made
// the node unhealthy, later tests need it healthy.
func waitHealthy(t *testing.T, limit time.Duration) time.Duration {
	t.Helper()
	return waitFor(t, limit, "rdmactl check exits 0", func() (bool, string) {
		code, out := checkNow(t)
		return code == 0, fmt.Sprintf("exit %d: %s", code, out)
	})
}

// healthDropin writes a [health] drop-in and reloads; the cleanup removes
// it and reloads again.
func healthDropin(t *testing.T, name, body string) {
	t.Helper()
	path := "/etc/rdmad/rdmad.d/" + name
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	mustRun(t, "rdmactl", "reload")
	t.Cleanup(func() {
		os.Remove(path)
		if _, err := run("rdmactl", "reload"); err != nil {
			t.Errorf("reload after removing %s: %v", path, err)
		}
	})
}

// TestHealthPortDown: a healthy node answers 0; eth0 down makes rdmactl
// check answer 1 naming the port (the time it took is logged), and 0
// again once the link is back and the probes answer.
func TestHealthPortDown(t *testing.T) {
	peersOther(t)
	d := healthDiag(t)
	waitActive(t)
	waitHealthy(t, 90*time.Second)
	code, out := checkNow(t)
	if out != "ok: every RDMA health check passes\n" {
		d.Errorf("healthy: exit %d, %q", code, out)
	}
	if st, _, _ := healthNow(t).cond("PortDown"); st != "ok" {
		d.Errorf("PortDown %s on a healthy node", st)
	}

	mustRun(t, "ip", "link", "set", "eth0", "down")
	downAt := time.Now()
	restored := false
	restore := func() {
		if restored {
			return
		}
		restored = true
		if _, err := run("ip", "link", "set", "eth0", "up"); err != nil {
			d.Errorf("restore eth0: %v", err)
		}
	}
	t.Cleanup(restore)
	waitFor(t, 10*time.Second, "rdmactl check exits 1 naming rxe0/1", func() (bool, string) {
		code, out := checkNow(t)
		return code == 1 && strings.HasPrefix(out, "PortDown: rxe0/1"), fmt.Sprintf("exit %d: %q", code, out)
	})
	// Reported, not asserted: the bound is waitFor's.
	t.Logf("PortDown %v after eth0 went down", time.Since(downAt).Round(time.Millisecond))
	if st, _, objs := healthNow(t).cond("PortDown"); st != "problem" || len(objs) != 1 || objs[0] != "rxe0/1" {
		d.Errorf("PortDown %s about %v, want a problem about rxe0/1", st, objs)
	}
	if _, out := checkNow(t, "--format", "nhc"); !strings.Contains(out, "rdmad: PortDown problem: rxe0/1 (eth0)") {
		d.Errorf("nhc format: %q", out)
	}
	restore()
	back := waitHealthy(t, 90*time.Second)
	t.Logf("healthy again %v after eth0 came back", back)
}

// TestHealthFlapping: four down/up cycles within a minute raise
// PortFlapping on rxe0/1 (the default is 3 downs in 10 minutes); a short
// quiet window (a drop-in) lets it clear within the test.
func TestHealthFlapping(t *testing.T) {
	peersOther(t)
	d := healthDiag(t)
	before0 := waitActive(t)
	t.Cleanup(func() {
		if u := showUnit(t); u.NRestarts != before0.NRestarts || u.MainPID != before0.MainPID {
			d.Errorf("rdmad restarted while the port flapped: %+v, before %+v", u, before0)
		}
	})
	healthDropin(t, "80-e2e-flap.toml", "[health]\nflap_downs = 3\nflap_window = \"2m\"\nflap_quiet = \"20s\"\n")
	waitHealthy(t, 90*time.Second)
	before := healthNow(t)
	if st, _, _ := before.cond("PortFlapping"); st != "ok" {
		t.Fatalf("PortFlapping %s before the flaps", st)
	}
	for i := range 4 {
		mustRun(t, "ip", "link", "set", "eth0", "down")
		waitFor(t, 10*time.Second, fmt.Sprintf("cycle %d: rxe0/1 down", i+1), func() (bool, string) {
			st, _, _ := healthNow(t).cond("PortDown")
			return st == "problem", st
		})
		mustRun(t, "ip", "link", "set", "eth0", "up")
		waitFor(t, 20*time.Second, fmt.Sprintf("cycle %d: rxe0/1 active", i+1), func() (bool, string) {
			st, _, _ := healthNow(t).cond("PortDown")
			return st == "ok", st
		})
	}
	h := healthNow(t)
	st, msg, objs := h.cond("PortFlapping")
	if st != "problem" || len(objs) != 1 || objs[0] != "rxe0/1" || !strings.Contains(msg, "went down") {
		d.Errorf("after 4 cycles: PortFlapping %s (%s) about %v, want a problem about rxe0/1", st, msg, objs)
	}
	if code, _ := checkNow(t); code != 1 {
		d.Errorf("rdmactl check exits %d while flapping, want 1", code)
	}
	out := mustRun(t, "journalctl", "-u", "rdmad", "--since", "-3min", "-o", "cat", "MESSAGE_ID=260c6d4f2f37462587436606e2e134ff")
	if !strings.Contains(out, "rxe0/1") {
		d.Errorf("no port flapping journal entry naming rxe0/1: %q", out)
	}
	waitFor(t, 60*time.Second, "PortFlapping clears after the quiet window", func() (bool, string) {
		st, _, _ := healthNow(t).cond("PortFlapping")
		return st == "ok", st
	})
	waitHealthy(t, 90*time.Second)
}

// TestHealthKernelFault: a kernel message of severity err naming an RDMA
// device raises KernelFault on it (the time it took is logged); one
// naming a device that does not exist raises nothing. The device is an
// rxe link made for the test on a veth of its own (rxe takes one device
// per netdev: a second one on eth0 is refused with an err line naming
// eth0, which is a fault of rxe0). The time the fault took is logged,
// and over 2 s rdmad's journal too (at debug level: its uevents and
// inventory reads) with the kernel log; the bound is 30 s, since under
// TCG one device event holds the main loop for seconds. Deleting the
// device and restarting rdmad leaves no fault behind: the restart reads
// the kernel's buffer again, and the line names no device then.
func TestHealthKernelFault(t *testing.T) {
	peersOther(t)
	d := healthDiag(t)
	d.since = fmt.Sprintf("@%d", time.Now().Unix())
	waitActive(t)
	// At debug level the journal dates the main loop's work (uevents,
	// inventory reads) should the fault come late.
	healthDropin(t, "80-e2e-kf-debug.toml", "[daemon]\nlog_level = \"debug\"\n")
	const dev, veth = "rxekf", "kfveth0"
	mustRun(t, "ip", "link", "add", veth, "type", "veth", "peer", "name", veth+"p")
	mustRun(t, "ip", "link", "set", veth, "up")
	mustRun(t, "ip", "link", "set", veth+"p", "up")
	t.Cleanup(func() { run("ip", "link", "del", veth) })
	mustRun(t, "rdma", "link", "add", dev, "type", "rxe", "netdev", veth)
	t.Cleanup(func() {
		run("rdma", "link", "del", dev)
		run("ip", "link", "del", veth)
		if _, err := run("systemctl", "restart", "rdmad"); err != nil {
			d.Errorf("restart rdmad: %v", err)
		}
		waitActive(t)
		waitHealthy(t, 120*time.Second)
	})
	waitFor(t, 30*time.Second, "rdmad lists "+dev, func() (bool, string) {
		s, err := status()
		if err != nil {
			return false, err.Error()
		}
		_, ok := s.device(dev)
		return ok, "not listed"
	})
	token := fmt.Sprintf("e2e-%d", time.Now().UnixNano())
	kmsg := func(line string) {
		if err := os.WriteFile("/dev/kmsg", []byte(line), 0); err != nil {
			t.Fatalf("write /dev/kmsg: %v", err)
		}
	}
	kmsg("<3>infiniband rxe9: rdmad test fault of another device " + token + "\n")
	kmsg("<3>infiniband " + dev + ": rdmad test fault " + token + "\n")
	wrote := time.Now()
	waitFor(t, 30*time.Second, "KernelFault on "+dev, func() (bool, string) {
		st, msg, objs := healthNow(t).cond("KernelFault")
		return st == "problem" && len(objs) == 1 && objs[0] == dev && strings.Contains(msg, token), st + ": " + msg
	})
	// The latency is reported, not asserted (0.76 s on a quiet host; the
	// poll adds up to 200 ms and each rdmactl run a few hundred under TCG).
	took := time.Since(wrote)
	t.Logf("KernelFault %v after the write", took.Round(time.Millisecond))
	if took > 2*time.Second {
		t.Logf("slow (0.76 s on a quiet host); what rdmad and the kernel did meanwhile:")
		d.logJournal()
	}
	if _, msg, objs := healthNow(t).cond("KernelFault"); strings.Contains(msg, "rxe9") || len(objs) != 1 {
		d.Errorf("a line naming rxe9 (no such device) counted: %v %q", objs, msg)
	}
	if code, out := checkNow(t); code != 1 || !strings.HasPrefix(out, "KernelFault: "+dev) {
		d.Errorf("rdmactl check: exit %d, %q; want 1 naming the kernel fault of %s", code, out, dev)
	}
	var st struct {
		KernelFaults []struct {
			Device, Pattern, Line string
			Count                 int
		} `json:"kernel_faults"`
	}
	out, _ := run("rdmactl", "--json", "status") // exit 3: degraded
	if err := json.Unmarshal([]byte(out), &st); err != nil || len(st.KernelFaults) != 1 || st.KernelFaults[0].Device != dev ||
		st.KernelFaults[0].Pattern != "err" || !strings.Contains(st.KernelFaults[0].Line, token) {
		d.Errorf("status kernel_faults %+v (%v), want one err fault of %s with the line", st.KernelFaults, err, dev)
	}
	metrics := tclassMetrics(t)
	if !strings.Contains(metrics, `rdmad_kernel_fault_messages{device="`+dev+`",pattern="err"} 1`) {
		d.Errorf("metrics lack rdmad_kernel_fault_messages for %s", dev)
	}
	if !strings.Contains(metrics, `rdmad_health_condition{status="problem",type="KernelFault"} 1`) {
		d.Errorf("metrics lack the KernelFault problem")
	}
}

// TestHealthNoDevice: with rxe0 deleted (and the test's other devices
// gone), rdmactl check answers 1 naming NoDevice; rxe0 comes back after.
func TestHealthNoDevice(t *testing.T) {
	peersOther(t)
	d := healthDiag(t)
	waitActive(t)
	waitHealthy(t, 90*time.Second)
	mustRun(t, "rdma", "link", "del", "rxe0")
	t.Cleanup(func() {
		if _, err := run("rdma", "link", "add", "rxe0", "type", "rxe", "netdev", "eth0"); err != nil {
			d.Errorf("re-add rxe0: %v", err)
		}
		waitHealthy(t, 120*time.Second)
	})
	waitFor(t, 10*time.Second, "rdmactl check exits 1 with NoDevice", func() (bool, string) {
		code, out := checkNow(t)
		return code == 1 && strings.HasPrefix(out, "NoDevice: no RDMA device"), fmt.Sprintf("exit %d: %q", code, out)
	})
}

// TestHealthDBusDevice: the device object carries its own Health and the
// loopback probes' ProbeState.
func TestHealthDBusDevice(t *testing.T) {
	peersOther(t)
	d := healthDiag(t)
	waitActive(t)
	waitHealthy(t, 90*time.Second)
	dbusReady(t)
	out := mustRun(t, "busctl", "get-property", "org.rdmad.Agent1", "/org/rdmad/Agent1/device/rxe0", "org.rdmad.Agent1.Device", "HealthStatus")
	if strings.TrimSpace(out) != `s "ok"` {
		d.Errorf("rxe0 HealthStatus %q", out)
	}
	out = mustRun(t, "busctl", "get-property", "org.rdmad.Agent1", "/org/rdmad/Agent1/device/rxe0", "org.rdmad.Agent1.Device", "ProbeState")
	if strings.TrimSpace(out) != `s "ok"` {
		d.Errorf("rxe0 ProbeState %q", out)
	}
	out = mustRun(t, "busctl", "get-property", "org.rdmad.Agent1", "/org/rdmad/Agent1", "org.rdmad.Agent1", "HealthStatus")
	if strings.TrimSpace(out) != `s "ok"` {
		d.Errorf("agent HealthStatus %q", out)
	}
}
