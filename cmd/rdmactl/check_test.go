package main

import (
	"encoding/json"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/health"
)

// verdict is a verdict as rdmad decides it for a node of one device whose
// port is in portState.
func verdict(portState string) apitype.Health {
	s := &apitype.Snapshot{
		Components: map[string]apitype.Component{apitype.ComponentInventory: {State: apitype.OK},
			apitype.ComponentVerbs: {State: apitype.OK}},
		Devices: []apitype.Device{{Name: "rxe0", Uverbs: "/dev/infiniband/uverbs0",
			Ports: []apitype.Port{{Port: 1, State: portState, PhysState: "Disabled", Netdev: "eth0"}}}},
	}
	return health.Evaluate(health.Input{Snap: s, Now: time.Now(), Flaps: map[string]health.FlapState{}})
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name     string
		h        apitype.Health
		args     []string
		code     int
		out      string
		maxBytes int
	}{
		{"ok npd", verdict("ACTIVE"), nil, 0, "ok: every RDMA health check passes\n", 81},
		{"problem npd", verdict("DOWN"), nil, 1, "PortDown: rxe0/1 (eth0) is DOWN/Disabled: check the cable, the switch port...\n", 81},
		{"problem nhc", verdict("DOWN"), []string{"--format", "nhc"}, 1, "rdmad: PortDown problem: rxe0/1 (eth0) is DOWN/Disabled", 0},
		{"ok nhc", verdict("ACTIVE"), []string{"--format", "nhc"}, 0, "rdmad: healthy\n", 0},
		{"unknown", apitype.Health{Status: apitype.ConditionUnknown, Conditions: []apitype.Condition{
			{Type: apitype.CondNoDevice, Status: apitype.ConditionUnknown, Message: "the RDMA inventory has not been read yet"}}},
			nil, 2, "NoDevice: the RDMA inventory has not been read yet\n", 81},
		{"json passes rdmad's document", verdict("DOWN"), []string{"--json"}, 1, `"type":"PortDown","status":"problem"`, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock := fakeRdmad(t, map[string]http.HandlerFunc{"GET /v1/health": func(w http.ResponseWriter, r *http.Request) {
				b, _ := json.Marshal(tc.h)
				w.Write(b)
			}})
			code, out, errOut := rdmactl(t, append([]string{"--socket", sock, "check"}, tc.args...)...)
			if code != tc.code || !strings.Contains(out, tc.out) {
				t.Errorf("exit %d, output %q (stderr %q); want %d and %q", code, out, errOut, tc.code, tc.out)
			}
			if tc.maxBytes > 0 && (len(out) > tc.maxBytes || strings.Count(out, "\n") != 1) {
				t.Errorf("npd output is %d bytes, %d lines: %q", len(out), strings.Count(out, "\n"), out)
			}
		})
	}
}

// TestCheckOlderRdmad: an rdmad without /v1/health (404) is judged from
// its status, as rdmad itself would.
func TestCheckOlderRdmad(t *testing.T) {
	s := apitype.Snapshot{State: apitype.Running, Components: map[string]apitype.Component{
		apitype.ComponentInventory: {State: apitype.OK}}}
	sock := fakeRdmad(t, map[string]http.HandlerFunc{"GET /v1/status": answer(t, s),
		"GET /v1/health": func(w http.ResponseWriter, r *http.Request) { http.Error(w, `{"error":"no route"}`, 404) }})
	code, out, _ := rdmactl(t, "--socket", sock, "check")
	if code != 1 || !strings.HasPrefix(out, "NoDevice: no RDMA device") {
		t.Errorf("exit %d, %q; want 1 and NoDevice", code, out)
	}
}

// TestCheckWithoutRdmad: with no rdmad, rdmactl decides from its own
// inventory: this host has no RDMA device, which is a problem (1), not an
// unknown; the output says rdmad did not answer when nothing else is
// wrong (unknown, 2) — decided here from the verdict's conditions.
func TestCheckWithoutRdmad(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "none.sock")
	code, out, _ := rdmactl(t, "--socket", sock, "check", "--format", "nhc")
	h := localHealth("/", nil)
	want := 2
	if h.Status == apitype.ConditionProblem {
		want = 1
	}
	if code != want {
		t.Errorf("exit %d, want %d for the local verdict %s: %s", code, want, h.Status, out)
	}
	if c, _ := h.Condition(apitype.CondDaemon); c.Status != apitype.ConditionUnknown || !strings.Contains(c.Message, "rdmad does not answer") {
		t.Errorf("DaemonDegraded without rdmad: %+v", c)
	}
	if c, _ := h.Condition(apitype.CondLoopback); c.Status != apitype.ConditionUnknown {
		t.Errorf("LoopbackFailing without rdmad: %+v, want unknown", c)
	}
}

func TestCheckUsage(t *testing.T) {
	if code, _, errOut := rdmactl(t, "check", "--format", "xml"); code != 2 || !strings.Contains(errOut, `--format "xml" is not a format`) {
		t.Errorf("bad format: exit %d, %q", code, errOut)
	}
	if code, _, errOut := rdmactl(t, "check", "--timeout", "1h"); code != 2 || !strings.Contains(errOut, "100ms to 1m") {
		t.Errorf("bad timeout: exit %d, %q", code, errOut)
	}
}

// TestLocalHealth: rdmactl's own verdict from an inventory: the fixture's
// down port and device without a verbs node are problems; a node without
// devices is NoDevice; what only rdmad knows is unknown, never ok.
func TestLocalHealth(t *testing.T) {
	h := localHealth("../../inventory/testdata/roce-ib", errors.New("connect: no such file"))
	if h.Status != apitype.ConditionProblem {
		t.Fatalf("fixture: %s, want problem", h.Status)
	}
	for typ, want := range map[string]string{apitype.CondPortDown: "mlx5_0/2", apitype.CondVerbs: "mlx4_0"} {
		if c, _ := h.Condition(typ); c.Status != apitype.ConditionProblem || len(c.Objects) != 1 || c.Objects[0] != want {
			t.Errorf("%s: %+v, want a problem about %s", typ, c, want)
		}
	}
	for _, typ := range []string{apitype.CondLoopback, apitype.CondPeers, apitype.CondKernelFault, apitype.CondDaemon} {
		if c, _ := h.Condition(typ); c.Status != apitype.ConditionUnknown {
			t.Errorf("%s: %+v, want unknown without rdmad", typ, c)
		}
	}
	if c, _ := h.Condition(apitype.CondDaemon); !strings.Contains(c.Message, "connect: no such file") {
		t.Errorf("DaemonDegraded does not say why rdmad did not answer: %q", c.Message)
	}
	h = localHealth("../../inventory/testdata/empty", nil)
	if c, _ := h.Condition(apitype.CondNoDevice); h.Status != apitype.ConditionProblem || c.Status != apitype.ConditionProblem {
		t.Errorf("no devices: %s, NoDevice %+v", h.Status, c)
	}
}
