//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// requireVM skips t unless it runs inside the test VM, where guest/init sets
// RDMAD_VM=1 after creating rxe0 and starting rdmad.
func requireVM(t *testing.T) {
	t.Helper()
	if os.Getenv("RDMAD_VM") != "1" {
		t.Skip("not inside the rdmad test VM (RDMAD_VM unset): these tests need Soft-RoCE and rdmad under systemd; run test/vm/e2e")
	}
}

// nodeAddr returns this node's address on the test link (e.g. 192.168.77.1).
func nodeAddr(t *testing.T) string {
	t.Helper()
	a := os.Getenv("RDMAD_NODE_ADDR")
	if a == "" {
		t.Fatal("RDMAD_NODE_ADDR is empty: test/vm/run's guest/init should set it")
	}
	return a
}

// cmdTimeout bounds every command: TCG makes everything slow, nothing
// should take this long.
const cmdTimeout = 60 * time.Second

// run runs name with args and returns its stdout; a failure carries the
// command line, exit status and stderr.
func run(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w; stderr: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// mustRun is run that fails t on error.
func mustRun(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := run(name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// peersJSON decodes node 1's `rdmactl --json peers` into v and returns its
// text: exit status 3 (a peer not up) still prints the peers.
func peersJSON(t *testing.T, v any) string {
	t.Helper()
	out, err := run("rdmactl", "--json", "peers")
	if err != nil && !strings.Contains(err.Error(), "exit status 3") {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("rdmactl --json peers: %v in %q", err, out)
	}
	return out
}

// unit is the part of `systemctl show rdmad` the tests look at.
type unit struct {
	ActiveState string
	SubState    string
	MainPID     int
	NRestarts   int
	StatusText  string
}

func showUnit(t *testing.T) unit {
	t.Helper()
	out := mustRun(t, "systemctl", "show", "--property=ActiveState,SubState,MainPID,NRestarts,StatusText", "rdmad.service")
	var u unit
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		k, v, _ := strings.Cut(line, "=")
		switch k {
		case "ActiveState":
			u.ActiveState = v
		case "SubState":
			u.SubState = v
		case "MainPID":
			u.MainPID, _ = strconv.Atoi(v)
		case "NRestarts":
			u.NRestarts, _ = strconv.Atoi(v)
		case "StatusText":
			u.StatusText = v
		}
	}
	return u
}

// Status is the part of GET /v1/status (rdmactl status --json) the tests
// assert on.
type Status struct {
	Version    string               `json:"version"`
	State      string               `json:"state"`
	Devices    []Device             `json:"devices"`
	Components map[string]Component `json:"components"`
}

// A Device is an RDMA device in the status.
type Device struct {
	Name     string `json:"name"`
	NodeGUID string `json:"node_guid"`
	Ports    []Port `json:"ports"`
}

// A Port is one port of a Device.
type Port struct {
	Port      int    `json:"port"`
	State     string `json:"state"`
	PhysState string `json:"phys_state"`
	LinkLayer string `json:"link_layer"`
	Netdev    string `json:"netdev"`
	GIDs      []GID  `json:"gids"`
	// Transitions is state_transitions, kept across restarts.
	Transitions uint64 `json:"state_transitions"`
}

// A GID is one entry of a port's GID table.
type GID struct {
	Index  int    `json:"index"`
	GID    string `json:"gid"`
	Type   string `json:"type"`
	Netdev string `json:"netdev"`
}

// A Component is the health of one of rdmad's supervised parts.
type Component struct {
	State string `json:"state"`
	Error string `json:"error"`
}

// status runs `rdmactl status --json` and decodes it. rdmactl exits 3 when
// the daemon is degraded; the JSON is still the status, so only
// undecodable output is an error.
func status() (Status, error) {
	out, err := run("rdmactl", "status", "--json")
	var s Status
	if derr := json.Unmarshal([]byte(out), &s); derr != nil {
		if err != nil {
			return s, err
		}
		return s, fmt.Errorf("rdmactl status --json: decode %q: %w", out, derr)
	}
	return s, nil
}

func mustStatus(t *testing.T) Status {
	t.Helper()
	s, err := status()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// device returns the device named name in s.
func (s Status) device(name string) (Device, bool) {
	for _, d := range s.Devices {
		if d.Name == name {
			return d, true
		}
	}
	return Device{}, false
}

// port returns port n of d.
func (d Device) port(n int) (Port, bool) {
	for _, p := range d.Ports {
		if p.Port == n {
			return p, true
		}
	}
	return Port{}, false
}

// waitFor polls cond every 200 ms until it reports true, and returns how
// long that took; when timeout passes first it fails t with what cond last
// said.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) time.Duration {
	t.Helper()
	deadline := time.Now().Add(timeout)
	start := time.Now()
	for {
		ok, last := cond()
		if ok {
			took := time.Since(start).Round(10 * time.Millisecond)
			t.Logf("%s after %v", what, took)
			return took
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; last: %s", what, timeout, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitActive waits until rdmad.service is active and answers status, so a
// test starts from a running daemon even after an earlier test killed it.
func waitActive(t *testing.T) unit {
	t.Helper()
	var u unit
	waitFor(t, 60*time.Second, "rdmad active and answering", func() (bool, string) {
		u = showUnit(t)
		if u.ActiveState != "active" {
			return false, fmt.Sprintf("%+v", u)
		}
		if _, err := status(); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	return u
}
