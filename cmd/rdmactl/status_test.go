package main

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/health"
)

// TestPrintStatusNoDevice: without an RDMA device the status says that
// nothing can be proven and what to do about it.
func TestPrintStatusNoDevice(t *testing.T) {
	s := &apitype.Snapshot{Version: "t", State: apitype.Degraded, Devices: []apitype.Device{},
		Components: map[string]apitype.Component{"inventory": {State: apitype.Unavailable, Error: apitype.NoDevice, Since: time.Now()}}}
	var b bytes.Buffer
	printStatus(&b, s, &shortener{full: true})
	for _, want := range []string{"DEGRADED: no RDMA device: rdmad can prove nothing on this node", "rdma link add rxe0 type rxe netdev eth0", "ls /sys/class/infiniband"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, b.String())
		}
	}
	if s.Healthy() {
		t.Errorf("a snapshot without devices is healthy; rdmactl status would exit 0")
	}
}

// TestPrintStatusNoDeviceOnce: with the verdict's NoDevice problem shown,
// the no-device text (two sentences of what to do) is printed once, by the
// health block; the DEGRADED line and the inventory's row point at it.
func TestPrintStatusNoDeviceOnce(t *testing.T) {
	s := &apitype.Snapshot{Version: "t", State: apitype.Degraded, Devices: []apitype.Device{},
		Components: map[string]apitype.Component{"inventory": {State: apitype.Unavailable, Error: apitype.NoDevice, Since: time.Now()}},
		Health: apitype.Health{Status: apitype.ConditionProblem, Conditions: []apitype.Condition{
			{Type: apitype.CondNoDevice, Status: apitype.ConditionProblem, Reason: "NoRDMADevice", Message: apitype.NoDevice}}}}
	var b bytes.Buffer
	printStatus(&b, s, &shortener{full: true})
	out := b.String()
	if n := strings.Count(out, "rdma link add rxe0"); n != 1 {
		t.Errorf("the no-device advice is printed %d times, want once:\n%s", n, out)
	}
	for _, want := range []string{"NoDevice problem (NoRDMADevice): no RDMA device: rdmad can prove nothing",
		"DEGRADED: no RDMA device (NoDevice above says what to do).", "no RDMA device (see NoDevice above)"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	for _, l := range strings.Split(out, "\n") {
		if len(l) > 120 && !strings.Contains(l, "NoDevice problem") {
			t.Errorf("a line of %d columns:\n%s", len(l), l)
		}
	}
}

// cellUnder returns the cell under header's column name in line, both rows of
// one table.
func cellUnder(t *testing.T, header, line, name string) string {
	t.Helper()
	i := strings.Index(header, name)
	if i < 0 || i >= len(line) {
		t.Fatalf("no column %s in %q (row %q)", name, header, line)
	}
	return strings.Fields(line[i:])[0]
}

// TestPrintStatusLoopbackClass: the loopback table shows the traffic class
// each port's probe runs in (a probe of class 0 tests the best-effort
// class, not RDMA's).
func TestPrintStatusLoopbackClass(t *testing.T) {
	s := &apitype.Snapshot{Version: "t", State: apitype.Running, Devices: []apitype.Device{{Name: "rxe0"}},
		Loopback: []apitype.LoopbackPort{
			{Device: "rxe0", Port: 1, State: "ok", TrafficClass: 106},
			{Device: "mlx5_0", Port: 1, State: "ok"},
		}}
	var b bytes.Buffer
	printStatus(&b, s, &shortener{full: true})
	lines := strings.Split(b.String(), "\n")
	var header string
	got := map[string]string{}
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l, "LOOPBACK"):
			header = l
		case header != "" && (strings.HasPrefix(l, "rxe0 ") || strings.HasPrefix(l, "mlx5_0 ")):
			got[strings.Fields(l)[0]] = cellUnder(t, header, l, "TCLASS")
		}
	}
	if got["rxe0"] != "106" || got["mlx5_0"] != "0" {
		t.Errorf("TCLASS: got %v, want rxe0 106 and mlx5_0 0:\n%s", got, b.String())
	}
}

// TestPrintStatusPendingRestart: keys whose new value waits for a restart
// are named under the config line, with what that means.
func TestPrintStatusPendingRestart(t *testing.T) {
	s := &apitype.Snapshot{Version: "t", State: apitype.Running, Config: apitype.Config{Path: "/etc/rdmad/rdmad.toml", Generation: 4,
		PendingRestart: []string{"daemon.socket", "metrics.listen"}}}
	var b bytes.Buffer
	printStatus(&b, s, &shortener{full: true})
	out := b.String()
	for _, want := range []string{
		"config: /etc/rdmad/rdmad.toml, generation 4, loaded never: ok\n" +
			"  restart needed for daemon.socket: rdmad runs on with the old value until it restarts (systemctl restart rdmad)\n" +
			"  restart needed for metrics.listen: rdmad runs on with the old value until it restarts (systemctl restart rdmad)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	s.Config.PendingRestart = nil
	b.Reset()
	printStatus(&b, s, &shortener{full: true})
	if strings.Contains(b.String(), "restart needed") {
		t.Errorf("status names a restart when none is pending:\n%s", b.String())
	}
}

// TestReloadRestartNeeded: rdmactl reload names the keys the new
// configuration changed that take effect only at a restart; the load
// itself succeeded (exit 0).
func TestReloadRestartNeeded(t *testing.T) {
	sock := fakeRdmad(t, map[string]http.HandlerFunc{"POST /v1/reload": answer(t, apitype.ReloadResult{OK: true, Generation: 5, RestartNeeded: []string{"daemon.socket"}})})
	code, out, errs := rdmactl(t, "--socket", sock, "reload")
	want := "configuration loaded (generation 5)\n" +
		"restart needed for daemon.socket: rdmad runs on with the old value until it restarts (systemctl restart rdmad)\n"
	if code != exitOK || out != want {
		t.Errorf("reload: exit %d, stdout %q (stderr %q); want 0 and %q", code, out, errs, want)
	}
	sock = fakeRdmad(t, map[string]http.HandlerFunc{"POST /v1/reload": answer(t, apitype.ReloadResult{OK: true, Generation: 6})})
	if code, out, _ := rdmactl(t, "--socket", sock, "reload"); code != exitOK || out != "configuration loaded (generation 6)\n" {
		t.Errorf("reload without a restart needed: exit %d, stdout %q", code, out)
	}
}

// TestPeersComponentReason: when the peer probes are disabled or
// unavailable, rdmactl peers says why: the component's reason, where the
// daemon puts it (never in its error).
func TestPeersComponentReason(t *testing.T) {
	const why = "no [[peer]], [probe] peers_file or [probe] allow configured: nobody to probe or answer"
	s := apitype.Snapshot{Version: "t", State: apitype.Running,
		Components: map[string]apitype.Component{apitype.ComponentPeers: {State: apitype.Disabled, Reason: why}}}
	sock := fakeRdmad(t, map[string]http.HandlerFunc{"GET /v1/status": answer(t, s)})
	_, out, _ := rdmactl(t, "--socket", sock, "peers")
	if want := "Peer probes: disabled: " + why + "\n"; !strings.HasPrefix(out, want) {
		t.Errorf("peers does not say why the probes are off; want %q first:\n%s", want, out)
	}
}

// TestPrintStatusRefusedFile is issue #41 item 8 in rdmactl status: a
// refused input file is a line under the config line naming the file,
// why and what runs instead, with the fix on its own line, whole even on
// a narrow terminal; and the verdict's InputRefused condition.
func TestPrintStatusRefusedFile(t *testing.T) {
	s := &apitype.Snapshot{Version: "t", State: apitype.Degraded, Config: apitype.Config{Path: "/etc/rdmad/rdmad.toml", Generation: 2},
		RefusedFiles: []apitype.RefusedFile{{Key: "probe.peers_file", Path: "/etc/rdmad/peers",
			Why:  "writable by group or others (mode 0666): it decides whom rdmad trusts",
			Kept: "the 12 peers read from it before stay in force", Fix: "chmod go-w /etc/rdmad/peers, then rdmactl reload"}}}
	s.Health = health.Evaluate(health.Input{Snap: s, Now: time.Now()})
	var b bytes.Buffer
	sh := &shortener{width: 60}
	printStatus(&b, s, sh)
	out := b.String()
	for _, want := range []string{
		"config: /etc/rdmad/rdmad.toml, generation 2, loaded never: ok\n" +
			"  refused probe.peers_file /etc/rdmad/peers: writable by group or others (mode 0666): it decides whom rdmad trusts; the 12 peers read from it before stay in force\n" +
			"    fix: chmod go-w /etc/rdmad/peers, then rdmactl reload\n",
		// The condition's line is cut to the terminal: the lines above
		// are what carries the fix there.
		"health: PROBLEM\n  InputRefused problem (FileRefused): probe.peers_file",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
}

// TestPrintStatusKernelNonFatal: the kernel log's non-fatal faults (a
// link down), which are no problem of the verdict, show under the health
// line; fatal ones show as the KernelFault problem, not there.
func TestPrintStatusKernelNonFatal(t *testing.T) {
	s := &apitype.Snapshot{Version: "t", State: apitype.Running, Devices: []apitype.Device{},
		Health: apitype.Health{Status: apitype.ConditionOK, Healthy: true},
		KernelFaults: []apitype.KernelFault{
			{Device: "mlx5_0", Pattern: "link-down", Class: apitype.KernelNonFatal, Netdev: "ens1f0np0", Count: 2, Last: time.Now()},
			{Device: "mlx5_1", Pattern: "mlx5-health", Class: apitype.KernelFatal, Count: 1, Last: time.Now()},
		}}
	var b bytes.Buffer
	printStatus(&b, s, &shortener{full: true})
	if !strings.Contains(b.String(), "  kernel log, non-fatal: mlx5_0 ens1f0np0 link-down, 2× (last just now)\n") {
		t.Errorf("status lacks the non-fatal link down:\n%s", b.String())
	}
	if strings.Contains(b.String(), "mlx5-health") {
		t.Errorf("status lists a fatal fault as non-fatal:\n%s", b.String())
	}
}
