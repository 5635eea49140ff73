package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/test/bench/peersnap"
)

// rdmactl at scale (docs/BENCHMARKS.md, "Peer probes at scale (host)"):
// rdmactl status --json and rdmactl peers --json against a fake rdmad
// that answers the status of a node probing 1,000 or 10,000 peers,
// encoded as rdmad encodes it, from bytes made once (rdmad's own cost is
// the daemon/api benchmarks'). One op is one whole command, socket to
// output.
//
//	go test -run '^$' -bench 'JSON' -benchtime 20x ./cmd/rdmactl

func BenchmarkStatusJSON1000(b *testing.B)  { benchCommand(b, 1000, "status", "--json") }
func BenchmarkStatusJSON10000(b *testing.B) { benchCommand(b, 10000, "status", "--json") }
func BenchmarkPeersJSON1000(b *testing.B)   { benchCommand(b, 1000, "peers", "--json") }
func BenchmarkPeersJSON10000(b *testing.B)  { benchCommand(b, 10000, "peers", "--json") }

// statusServer serves the status of n peers as rdmad encodes it.
func statusServer(tb testing.TB, n int) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(peersnap.Snapshot(n, 100)); err != nil {
		tb.Fatal(err)
	}
	body := buf.Bytes()
	return fakeRdmad(tb, map[string]http.HandlerFunc{"GET /v1/status": func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Write(body)
	}})
}

func benchCommand(b *testing.B, n int, args ...string) {
	sock := statusServer(b, n)
	args = append([]string{"--socket", sock}, args...)
	var out countWriter
	b.ReportAllocs()
	for b.Loop() {
		out = 0
		if code := run(context.Background(), args, &out, io.Discard); code > exitDegraded {
			b.Fatalf("rdmactl %v: exit %d", args, code)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/cmd")
	b.ReportMetric(float64(out), "bytes")
}

// A countWriter counts what is written to it.
type countWriter int

func (c *countWriter) Write(p []byte) (int, error) {
	*c += countWriter(len(p))
	return len(p), nil
}

// TestJSONPassedThrough: status --json prints rdmad's answer byte for
// byte and peers --json its peers as printJSON printed them decoded and
// encoded again, with the exit codes of the decoded status (#29 item 3).
func TestJSONPassedThrough(t *testing.T) {
	snap := peersnap.Snapshot(3, 1)
	snap.Peers.Peers[1].State = apitype.PeerDown
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.Encode(snap)
	body := buf.Bytes()
	sock := fakeRdmad(t, map[string]http.HandlerFunc{"GET /v1/status": func(w http.ResponseWriter, r *http.Request) { w.Write(body) }})

	code, out, errOut := rdmactl(t, "--socket", sock, "status", "--json")
	var full apitype.Snapshot
	json.Unmarshal(body, &full)
	wantCode := exitOK
	if !full.Healthy() {
		wantCode = exitDegraded
	}
	if code != wantCode || out != string(body) || errOut != "" {
		t.Errorf("status --json: exit %d (want %d), stderr %q, stdout is the answer: %v", code, wantCode, errOut, out == string(body))
	}
	code, out, errOut = rdmactl(t, "--socket", sock, "peers", "--json")
	var want bytes.Buffer
	printJSON(&want, full.Peers)
	if code != exitDegraded || out != want.String() || errOut != "" {
		t.Errorf("peers --json: exit %d (want %d, a peer is down), stderr %q, stdout:\n%s\nwant:\n%s", code, exitDegraded, errOut, out, want.String())
	}
}

// TestJSONNotPassedThrough: an answer that is not one JSON value (a
// terminal sequence after it, a second value) is refused, not printed; one
// that is JSON but would not stay JSON behind the escaping of what a
// terminal acts on (CR line ends, invalid UTF-8 in a string) is printed
// decoded and encoded again, valid JSON.
func TestJSONNotPassedThrough(t *testing.T) {
	for name, body := range map[string]string{
		"escape after": `{"version": "x"}` + "\x1b[2J",
		"two values":   `{"version": "x"} {"version": "y"}`,
		"escape raw":   "{\"version\": \"x\x1b[2J\"}",
	} {
		sock := fakeRdmad(t, map[string]http.HandlerFunc{"GET /v1/status": func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body) }})
		for _, cmd := range []string{"status", "peers"} {
			code, out, errOut := rdmactl(t, "--socket", sock, cmd, "--json")
			if code != exitError || out != "" || !strings.Contains(errOut, "JSON") {
				t.Errorf("%s: %s --json: exit %d, stdout %q, stderr %q; want exit 1 and an error", name, cmd, code, out, errOut)
			}
		}
	}
	body := "{\r\n  \"version\": \"x\xffy\",\r\n  \"peers\": {\"peers\": [{\"name\": \"p\xfe\", \"state\": \"up\"}]}\r\n}\r\n"
	sock := fakeRdmad(t, map[string]http.HandlerFunc{"GET /v1/status": func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body) }})
	for _, cmd := range []string{"status", "peers"} {
		_, out, errOut := rdmactl(t, "--socket", sock, cmd, "--json")
		if !json.Valid([]byte(out)) || !strings.Contains(out, "x\uFFFDy") && !strings.Contains(out, "p\uFFFD") {
			t.Errorf("%s --json of an answer with CR and invalid UTF-8: not valid JSON or not re-encoded (stderr %q):\n%q", cmd, errOut, out)
		}
	}
}
