package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
)

// watchStream answers GET /v1/watch with events, then ends the stream, or
// holds it open until the client leaves when hold is set.
func watchStream(t *testing.T, hold bool, events ...apitype.Event) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		for _, ev := range events {
			ev.Time = time.Now()
			b, _ := json.Marshal(ev)
			w.Write(append(b, '\n'))
		}
		w.(http.Flusher).Flush()
		if hold {
			<-r.Context().Done()
		}
	}
}

// TestWatchExitCodes: watch ends with 0 only when interrupted; whenever the
// stream ends otherwise (rdmad stops, drops the watcher, goes away) it
// says why and exits 1, as rdmactl(8) says.
func TestWatchExitCodes(t *testing.T) {
	hello := apitype.Event{Seq: 1, Type: apitype.EventHello, Message: "watching"}
	link := apitype.Event{Seq: 2, Type: apitype.EventLink, Object: "mlx5_0/1", From: "ACTIVE", To: "DOWN"}
	for _, tc := range []struct {
		name   string
		h      http.HandlerFunc
		cancel bool
		code   int
		stderr string
	}{
		{"rdmad stops", watchStream(t, false, hello, link, apitype.Event{Seq: 2, Type: apitype.EventBye, Message: "rdmad is stopping"}), false,
			exitError, "rdmactl watch: rdmad is stopping and ended the stream"},
		{"dropped", watchStream(t, false, hello, apitype.Event{Seq: 2, Type: apitype.EventDropped, Message: "too slow"}), false,
			exitError, "rdmactl watch: rdmad dropped this watcher for reading too slowly; run it again"},
		{"connection ends", watchStream(t, false, hello, link), false,
			exitError, "rdmactl watch: rdmad closed the stream without saying why"},
		{"interrupted", watchStream(t, true, hello, link), true, exitOK, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock := fakeRdmad(t, map[string]http.HandlerFunc{"GET /v1/watch": tc.h})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var out syncBuffer
			var errb bytes.Buffer
			done := make(chan int)
			go func() { done <- run(ctx, []string{"--socket", sock, "watch"}, &out, &errb) }()
			if tc.cancel {
				for !strings.Contains(out.String(), "mlx5_0/1") {
					time.Sleep(10 * time.Millisecond)
				}
				cancel()
			}
			code := <-done
			if code != tc.code {
				t.Errorf("exit %d, want %d; stderr %q", code, tc.code, errb.String())
			}
			if !strings.Contains(errb.String(), tc.stderr) || (tc.stderr == "" && errb.Len() > 0) {
				t.Errorf("stderr %q, want %q", errb.String(), tc.stderr)
			}
			if !strings.Contains(out.String(), "mlx5_0/1: ACTIVE -> DOWN") && tc.name != "dropped" {
				t.Errorf("the link event was not printed:\n%s", out.String())
			}
		})
	}
	// The man page says the same.
	man, err := os.ReadFile("../../packaging/man/rdmactl.8")
	if err != nil {
		t.Fatal(err)
	}
	page := string(man)
	entry := page[strings.Index(page, ".B watch\n"):]
	entry = strings.Join(strings.Fields(entry[:strings.Index(entry, "\n.TP")]), " ")
	for _, want := range []string{"Exits 0 when interrupted", "1 when the stream ends any other way", "rdmad stops", "drops", "never exits 3"} {
		if !strings.Contains(entry, want) {
			t.Errorf("rdmactl(8) on watch lacks %q: %s", want, entry)
		}
	}
}

// syncBuffer is a bytes.Buffer for one writer and one reader goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
