package main

import (
	"bytes"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/test/bench/peersnap"
)

// rawControls reports the first byte or rune of s a terminal would act on
// (what safeWriter escapes), or "".
func rawControls(s string) string {
	for _, r := range s {
		if r == '\n' || r == '\t' {
			continue
		}
		if r < 0x20 || r == 0x7f || unsafeRune(r) {
			return fmt.Sprintf("%U", r)
		}
	}
	return ""
}

// TestHostileSocketEscaped is issue #24's defence in depth: whatever
// answers on the socket, what rdmactl prints of it (names, groups,
// reasons, an error body) carries no terminal sequence, bidi control or
// invalid UTF-8: each is escaped where it was.
func TestHostileSocketEscaped(t *testing.T) {
	snap := apitype.Snapshot{Version: "x\x1b]0;owned\x07", State: apitype.Running, Summary: "running\x1b[2J",
		Devices: []apitype.Device{{Name: "mlx5_0\u202eevil"}},
		Peers: apitype.Peers{Configured: 1, Peers: []apitype.Peer{{Name: "192.0.2.17", Group: "tor\x1b[31ma\xff", State: apitype.PeerDown,
			Reason: "lost\u009bline\u2028two"}}}}
	sock := fakeRdmad(t, map[string]http.HandlerFunc{
		"GET /v1/status": answer(t, snap),
		"POST /v1/reload": func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusInternalServerError)
			w.Write([]byte("\x1b[2J\x1b[1;1Hyour disk is full\r\n"))
		},
	})
	for _, args := range [][]string{{"status"}, {"peers"}, {"status", "--json"}, {"peers", "--json"}, {"reload"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			_, out, errOut := rdmactl(t, append([]string{"--socket", sock}, args...)...)
			for name, s := range map[string]string{"stdout": out, "stderr": errOut} {
				if c := rawControls(s); c != "" {
					t.Errorf("%s carries %s raw:\n%q", name, c, s)
				}
			}
			switch args[0] {
			case "peers":
				// The JSON answer's invalid byte arrives as U+FFFD; the
				// ESC and the C1 control are rdmactl's to escape.
				if !strings.Contains(out, `tor\x1b[31ma`) && !strings.Contains(out, `tor\u001b[31ma`) || !strings.Contains(out, `lost\u009bline\u2028two`) {
					t.Errorf("the group and reason are not shown escaped:\n%s", out)
				}
			case "reload":
				if !strings.Contains(errOut, `\x1b[2J\x1b[1;1Hyour disk is full\x0d`) {
					t.Errorf("the error body is not shown escaped:\n%s", errOut)
				}
			}
		})
	}
}

// TestSafeWriterSplitRunes: a rune split across writes passes whole, and
// an incomplete one at the end is escaped on flush.
func TestSafeWriterSplitRunes(t *testing.T) {
	var b bytes.Buffer
	w, flush := newSafeWriter(&b)
	rlo := []byte("\u202e")
	fmt.Fprint(w, "a\u00e9")
	w.Write(rlo[:1])
	w.Write(rlo[1:])
	w.Write([]byte("b\xe2\x82"))
	flush()
	if want := `aé\u202eb\xe2\x82`; b.String() != want {
		t.Errorf("got %q, want %q", b.String(), want)
	}
}

// TestHostileSocketHugeAnswer is issue #24's memory blow-up: a fake
// server's 63 MiB reply drove rdmactl peers to 17.7 GB for six minutes.
// Now rdmactl stops at the bound of an answer, in values or in bytes,
// with an error saying so, quickly and without holding much memory.
func TestHostileSocketHugeAnswer(t *testing.T) {
	const size = 63 << 20
	stream := func(head, unit, tail string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(head))
			chunk := []byte(strings.Repeat(unit, (64<<10)/len(unit)))
			for n := 0; n < size; n += len(chunk) {
				if _, err := w.Write(chunk); err != nil {
					return // rdmactl stopped reading
				}
			}
			w.Write([]byte(tail))
		}
	}
	for _, tt := range []struct {
		name, head, unit, tail, want string
	}{
		{"many peers", `{"peers":{"peers":[{}`, `,{}`, `]}}`, "more than 2000000 JSON values"},
		{"one long string", `{"version":"`, `a`, `"}`, "more than 32 MiB"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sock := fakeRdmad(t, map[string]http.HandlerFunc{"GET /v1/status": stream(tt.head, tt.unit, tt.tail)})
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			start := time.Now()
			code, out, errOut := rdmactl(t, "--socket", sock, "peers")
			took := time.Since(start)
			runtime.ReadMemStats(&after)
			alloc := after.TotalAlloc - before.TotalAlloc
			t.Logf("exit %d in %v, %d MiB allocated: %s", code, took, alloc>>20, errOut)
			if code == 0 || !strings.Contains(errOut, tt.want) || !strings.Contains(errOut, "stopped reading") || out != "" {
				t.Errorf("exit %d, stderr %q; want a failure saying %q and stopped reading", code, errOut, tt.want)
			}
			if took > 20*time.Second {
				t.Errorf("took %v to give up", took)
			}
			if alloc > 512<<20 {
				t.Errorf("%d MiB allocated for a %d MiB answer; want the bound's worth", alloc>>20, size>>20)
			}
		})
	}
}

// TestAnswerBoundFitsScale: the bounds leave room for what a real rdmad
// sends: the status of a node probing 10,000 peers is read whole.
func TestAnswerBoundFitsScale(t *testing.T) {
	sock := fakeRdmad(t, map[string]http.HandlerFunc{"GET /v1/status": answer(t, peersnap.Snapshot(10000, 100))})
	code, out, errOut := rdmactl(t, "--socket", sock, "peers", "--json")
	// exitDegraded: some of the generated peers are not up.
	if code != exitOK && code != exitDegraded || errOut != "" || !strings.Contains(out, peersnap.Addr(9999).String()) {
		t.Errorf("rdmactl peers of 10,000: exit %d, %s", code, errOut)
	}
}
