package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
)

// TestBW runs rdmactl bw against a fake rdmad: the query it sends, the
// table and the JSON it prints, and the exit code of a refusal.
func TestBW(t *testing.T) {
	var query string
	res := apitype.BandwidthResult{Peer: "node2", Address: "192.168.77.2", Op: "write", Size: 65536, Duration: 3 * time.Second,
		Elapsed: 3 * time.Second, Messages: 30000, Bytes: 30000 * 65536, Gbps: 5.243, MsgRate: 10000, Local: "rxe0/1", Polling: "busy"}
	sock := fakeRdmad(t, map[string]http.HandlerFunc{
		"POST /v1/bw": func(w http.ResponseWriter, r *http.Request) {
			query = r.URL.RawQuery
			if r.URL.Query().Get("peer") == "refuser" {
				w.WriteHeader(http.StatusUnprocessableEntity)
				json.NewEncoder(w).Encode(map[string]string{"error": "bw: 192.168.77.2 refused the bandwidth test: bandwidth tests are disabled there; set [probe] bandwidth = true in its rdmad.toml and reload it"})
				return
			}
			answer(t, res)(w, r)
		},
	})
	code, out, errs := rdmactl(t, "--socket", sock, "bw", "node2", "--op", "write", "--size", "64KiB", "--duration", "3s")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if query != "duration=3s&op=write&peer=node2&size=65536" {
		t.Errorf("query %q", query)
	}
	for _, want := range []string{"PEER", "Gb/s", "MSG/S", "node2 (192.168.77.2)", "WRITE", "65536", "3s", "5.243", "10000", "rxe0/1", "busy-polled"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = rdmactl(t, "--socket", sock, "--json", "bw", "node2")
	var got map[string]any
	if err := json.Unmarshal([]byte(out), &got); code != exitOK || err != nil || got["gbps"] != 5.243 || got["msg_rate"] != 10000.0 {
		t.Errorf("--json: exit %d, %v, %s; want gbps and msg_rate", code, err, out)
	}
	if query != "duration=5s&op=write&peer=node2&size=65536" {
		t.Errorf("defaults: query %q", query)
	}
	code, _, errs = rdmactl(t, "--socket", sock, "bw", "refuser", "--op", "read")
	if code != exitDegraded || !strings.Contains(errs, "[probe] bandwidth = true") {
		t.Errorf("refusal: exit %d, stderr %q; want 3 and the reason", code, errs)
	}
}
