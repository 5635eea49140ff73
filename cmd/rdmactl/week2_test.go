package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
)

// refuse answers with rdmad's error body and status code.
func refuse(code int, msg string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(map[string]string{"error": msg})
	}
}

// TestSameCauseSameExit: rdmad's 422 (it could not do what was asked of
// that peer) is exit 3 for probe and bw alike, and the message is rdmad's
// without the HTTP status; another error status is 1 for both (#27 item 4).
func TestSameCauseSameExit(t *testing.T) {
	const msg = `peers: "192.0.2.9" is not a configured peer; add it as a [[peer]] or to [probe] peers_file`
	sock := fakeRdmad(t, map[string]http.HandlerFunc{
		"POST /v1/probe": refuse(http.StatusUnprocessableEntity, msg),
		"POST /v1/bw":    refuse(http.StatusUnprocessableEntity, msg),
	})
	busy := fakeRdmad(t, map[string]http.HandlerFunc{
		"POST /v1/probe": refuse(http.StatusServiceUnavailable, "rdmad is stopping"),
		"POST /v1/bw":    refuse(http.StatusServiceUnavailable, "rdmad is stopping"),
	})
	for _, cmd := range []string{"probe", "bw"} {
		code, _, errs := rdmactl(t, "--socket", sock, cmd, "192.0.2.9")
		if code != exitDegraded || errs != "rdmactl: "+msg+"\n" {
			t.Errorf("%s, rdmad's 422: exit %d, stderr %q; want %d and %q", cmd, code, errs, exitDegraded, "rdmactl: "+msg+"\n")
		}
		code, _, errs = rdmactl(t, "--socket", busy, cmd, "192.0.2.9")
		if code != exitError || strings.Contains(errs, "503") || !strings.Contains(errs, "rdmad is stopping") {
			t.Errorf("%s, rdmad's 503: exit %d, stderr %q; want %d and the message without its status", cmd, code, errs, exitError)
		}
	}
}

// TestPeersBrokenKeyFile: when the peer probes could not start (a fleet
// key file that cannot be read), rdmactl peers says that, exits 3, and does
// not tell to declare peers that are declared.
func TestPeersBrokenKeyFile(t *testing.T) {
	const keyErr = "probe: read key file /etc/rdmad/fleet.key: permission denied; peer probes are not started until the key can be read"
	s := apitype.Snapshot{Version: "t", State: apitype.Degraded,
		Peers: apitype.Peers{Configured: 3},
		Components: map[string]apitype.Component{
			apitype.ComponentPeers: {State: apitype.Error, Error: keyErr, Since: time.Now()},
		}}
	sock := fakeRdmad(t, map[string]http.HandlerFunc{"GET /v1/status": answer(t, s)})
	code, out, errs := rdmactl(t, "--socket", sock, "peers")
	if code != exitDegraded || !strings.Contains(out, keyErr) || strings.Contains(out, "declare [[peer]]") {
		t.Errorf("exit %d, stdout %q, stderr %q; want %d, the key file's error and no \"declare [[peer]]\"", code, out, errs, exitDegraded)
	}
	// Without the failure, no peer is still the configuration's matter.
	s.Components = map[string]apitype.Component{apitype.ComponentPeers: {State: apitype.Disabled, Reason: "no [[peer]]", Since: time.Now()}}
	s.Peers.Configured = 0
	sock = fakeRdmad(t, map[string]http.HandlerFunc{"GET /v1/status": answer(t, s)})
	if code, out, _ := rdmactl(t, "--socket", sock, "peers"); code != exitOK || !strings.Contains(out, "declare [[peer]]") {
		t.Errorf("no peers configured: exit %d, %q; want 0 and the hint to declare them", code, out)
	}
}

// TestDoctorAccessDenied: rdmad refusing the caller runs the local checks,
// as when rdmad is down, and the daemon check says why and what to do.
func TestDoctorAccessDenied(t *testing.T) {
	sock := fakeRdmad(t, map[string]http.HandlerFunc{
		"GET /v1/doctor": refuse(http.StatusForbidden, "GET /v1/doctor needs root or a member of [daemon] admin_group"),
	})
	code, out, errs := rdmactl(t, "--socket", sock, "doctor", "--interval", "0")
	if code == exitError {
		t.Fatalf("doctor refused by access: exit 1, stderr %q; want the local checks", errs)
	}
	for _, want := range []string{"rdmad refused this caller", "admin_group", "socket_group", "memlock-user"} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor refused by access lacks %q:\n%s", want, out)
		}
	}
}

// TestShortVersion: -V is --version.
func TestShortVersion(t *testing.T) {
	for _, flag := range []string{"-V", "--version"} {
		code, out, errs := rdmactl(t, flag)
		if code != exitOK || out != "rdmactl "+version+"\n" {
			t.Errorf("%s: exit %d, %q, %q", flag, code, out, errs)
		}
	}
}
