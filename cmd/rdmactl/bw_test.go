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

// TestBWLoopback runs rdmactl bw --loopback against a fake rdmad: the
// query (the port, the queue pairs), the table's loopback row and its
// threshold line, and the usage errors decided before rdmad is asked.
func TestBWLoopback(t *testing.T) {
	var query string
	res := apitype.BandwidthResult{Loopback: true, Op: "write", Size: 65536, QPs: 4, Duration: time.Second, Elapsed: time.Second,
		Messages: 20000, Bytes: 20000 * 65536, Gbps: 10.486, MsgRate: 20000, Local: "rxe0/1", Polling: "busy", MinGbps: 12, Low: true}
	sock := fakeRdmad(t, map[string]http.HandlerFunc{
		"POST /v1/bw": func(w http.ResponseWriter, r *http.Request) {
			query = r.URL.RawQuery
			answer(t, res)(w, r)
		},
	})
	code, out, errs := rdmactl(t, "--socket", sock, "bw", "--loopback", "rxe0:1", "--qps", "4", "--duration", "1s")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if query != "duration=1s&loopback=rxe0%3A1&op=write&qps=4&size=65536" {
		t.Errorf("query %q", query)
	}
	for _, want := range []string{"QPS", "loopback", "WRITE", "10.486", "rxe0/1", "below the loopback threshold of rxe0/1, 12.000 Gb/s", "LoopbackBandwidthLow"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\r") {
		t.Errorf("a progress line on a buffer, not a terminal:\n%q", out)
	}
	if code, _, _ := rdmactl(t, "--socket", sock, "bw", "--loopback"); code != exitOK || query != "duration=5s&loopback=&op=write&size=65536" {
		t.Errorf("--loopback alone: exit %d, query %q; want loopback= (the first ACTIVE port)", code, query)
	}
	code, out, _ = rdmactl(t, "--socket", sock, "--json", "bw", "--loopback", "rxe0")
	var got map[string]any
	if err := json.Unmarshal([]byte(out), &got); code != exitOK || err != nil || got["loopback"] != true || got["qps"] != 4.0 || got["min_gbps"] != 12.0 || got["low"] != true {
		t.Errorf("--json: exit %d, %v, %s; want loopback, qps, min_gbps and low", code, err, out)
	}
	before := query
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bw", "--loopback", "rxe0", "--qps", "17"}, `--qps "17" is out of range; use 1 to 16 queue pairs`},
		{[]string{"bw", "--loopback", "rxe0", "--qps", "0"}, `--qps "0" is out of range`},
		{[]string{"bw", "node2", "--qps", "x"}, `--qps "x" is out of range`},
		{[]string{"bw", "--loopback", "rxe0:port"}, `--loopback "rxe0:port": name a device and optionally its port`},
		{[]string{"bw", "--loopback", "a", "b"}, `unexpected argument "b"`},
		{[]string{"bw", "--qps", "2"}, "say which peer"},
	} {
		code, _, errs := rdmactl(t, append([]string{"--socket", sock}, tc.args...)...)
		if code != exitUsage || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 saying %q", tc.args, code, errs, tc.want)
		}
	}
	if query != before {
		t.Errorf("a usage error reached rdmad: %q", query)
	}
}

// TestBWNotRun: an rdmad that runs no bandwidth tests answers 501; the
// test did not run, which is exit 3 as rdmactl bw's help says (1 is for an
// rdmad that could not be asked), and rdmad's reason is printed.
func TestBWNotRun(t *testing.T) {
	sock := fakeRdmad(t, map[string]http.HandlerFunc{
		"POST /v1/bw": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotImplemented)
			json.NewEncoder(w).Encode(apitype.ErrorBody{Error: "this rdmad runs no bandwidth tests"})
		},
	})
	for _, args := range [][]string{{"bw", "--loopback"}, {"bw", "node2"}} {
		code, _, errs := rdmactl(t, append([]string{"--socket", sock}, args...)...)
		if code != exitDegraded || !strings.Contains(errs, "runs no bandwidth tests") {
			t.Errorf("%v: exit %d, stderr %q; want 3 with rdmad's reason", args, code, errs)
		}
	}
	if code, _, _ := rdmactl(t, "--socket", t.TempDir()+"/none.sock", "bw", "--loopback"); code != exitError {
		t.Errorf("bw against no rdmad: exit %d, want 1 (rdmad could not be asked)", code)
	}
}

// TestBWProgress: on a terminal rdmactl bw writes a progress line in place
// while the test runs and erases it before the result; with --json, or
// not on a terminal (TestBW, TestBWLoopback), it writes none.
func TestBWProgress(t *testing.T) {
	res := apitype.BandwidthResult{Loopback: true, Op: "write", Size: 65536, QPs: 1, Duration: 500 * time.Millisecond, Gbps: 1, Local: "rxe0/1"}
	sock := fakeRdmad(t, map[string]http.HandlerFunc{
		"POST /v1/bw": func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(700 * time.Millisecond) // the test runs
			answer(t, res)(w, r)
		},
	})
	code, out := onTerminalOf(t, 80, "--socket", sock, "bw", "--loopback", "rxe0", "--duration", "500ms")
	if code != exitOK {
		t.Fatalf("exit %d: %q", code, out)
	}
	head, table, found := strings.Cut(out, "PEER")
	if !found || !strings.Contains(head, "\rbw: write loopback of rxe0 [") || !strings.Contains(head, "of 500ms") {
		t.Errorf("no progress line before the table:\n%q", out)
	}
	if !strings.HasSuffix(head, "\r") || strings.Contains(table, "\r") {
		t.Errorf("the progress line is not erased before the table:\n%q", out)
	}
	for _, l := range strings.Split(head, "\r") {
		if len(l) > 79 {
			t.Errorf("a progress line of %d bytes on 80 columns: %q", len(l), l)
		}
	}
	_, out = onTerminalOf(t, 80, "--socket", sock, "--json", "bw", "--loopback", "rxe0", "--duration", "500ms")
	if strings.Contains(out, "\r") || !strings.HasPrefix(strings.TrimSpace(out), "{") {
		t.Errorf("--json on a terminal: %q; want the JSON alone", out)
	}
}

// TestProgressLine: the bar fills with the time elapsed of the duration,
// and past it the line says the test is finishing.
func TestProgressLine(t *testing.T) {
	for _, tc := range []struct {
		elapsed time.Duration
		want    string
	}{
		{0, "bw: write to p [                    ] 0s of 5s"},
		{2500 * time.Millisecond, "bw: write to p [==========          ] 2.5s of 5s"},
		{5 * time.Second, "bw: write to p [====================] 5s of 5s, finishing"},
		{9 * time.Second, "bw: write to p [====================] 5s of 5s, finishing"},
	} {
		if got := progressLine("bw: write to p", tc.elapsed, 5*time.Second); got != tc.want {
			t.Errorf("progressLine(%s) = %q, want %q", tc.elapsed, got, tc.want)
		}
	}
	if got := plainText("a\x1b[2Jb"); got != `"a\x1b[2Jb"` {
		t.Errorf("plainText of an escape = %q; want it quoted", got)
	}
}
