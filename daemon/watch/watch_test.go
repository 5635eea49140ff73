package watch_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/rdmad/rdmad/client"
	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon/state"
	"github.com/rdmad/rdmad/daemon/watch"
	"github.com/rdmad/rdmad/internal/syncbuf"
)

func TestDiff(t *testing.T) {
	port := func(st, phys string) apitype.Port { return apitype.Port{Port: 1, State: st, PhysState: phys} }
	base := apitype.Snapshot{
		Seq: 1, State: apitype.Running, Config: apitype.Config{Generation: 1},
		Devices:    []apitype.Device{{Name: "rxe0", Ports: []apitype.Port{port("ACTIVE", "LinkUp")}}},
		Components: map[string]apitype.Component{"api": {State: apitype.OK}},
		Peers: apitype.Peers{Peers: []apitype.Peer{
			{Name: "node2", State: apitype.PeerUp}, {Name: "node3", State: apitype.PeerUp}}},
		Policy: apitype.PolicyState{Policies: []apitype.PolicyStatus{{Name: "fabric", Targets: []apitype.Target{
			{Kind: "mtu", Object: "eth0", Desired: "9000", Actual: "9000", State: apitype.InSync}}}}},
	}
	tests := []struct {
		name   string
		change func(s *apitype.Snapshot)
		want   []apitype.Event
	}{
		{"nothing watched changed", func(s *apitype.Snapshot) { s.Summary = "x" }, nil},
		{"port goes down", func(s *apitype.Snapshot) {
			s.Devices = []apitype.Device{{Name: "rxe0", Ports: []apitype.Port{port("DOWN", "Disabled")}}}
		}, []apitype.Event{{Type: apitype.EventLink, Object: "rxe0/1", From: "ACTIVE/LinkUp", To: "DOWN/Disabled"}}},
		{"device removed and another added", func(s *apitype.Snapshot) {
			s.Devices = []apitype.Device{{Name: "rxe1", Ports: []apitype.Port{port("ACTIVE", "LinkUp")}}}
		}, []apitype.Event{
			{Type: apitype.EventLink, Object: "rxe0/1", From: "ACTIVE/LinkUp", To: apitype.Absent},
			{Type: apitype.EventLink, Object: "rxe1/1", From: apitype.Absent, To: "ACTIVE/LinkUp"},
		}},
		{"reload fails, daemon degrades", func(s *apitype.Snapshot) {
			s.State, s.Summary = apitype.Degraded, "degraded; config error"
			s.Config.Error = "rdmad.toml:2: bad"
			s.Components = map[string]apitype.Component{"api": {State: apitype.OK}, "config": {State: apitype.Error, Error: "rejected"}}
		}, []apitype.Event{
			{Type: apitype.EventDaemon, Object: "rdmad", From: apitype.Running, To: apitype.Degraded, Message: "degraded; config error"},
			{Type: apitype.EventConfig, Object: "error", From: "ok", To: "error", Message: "rdmad.toml:2: bad"},
			{Type: apitype.EventComponent, Object: "config", From: apitype.Absent, To: apitype.Error, Message: "rejected"},
		}},
		{"reload succeeds", func(s *apitype.Snapshot) { s.Config.Generation = 2 }, []apitype.Event{
			{Type: apitype.EventConfig, Object: "generation", From: "1", To: "2", Message: "configuration loaded"},
		}},
		{"policy drifts", func(s *apitype.Snapshot) {
			s.Policy = apitype.PolicyState{Policies: []apitype.PolicyStatus{{Name: "fabric", Targets: []apitype.Target{
				{Kind: "mtu", Object: "eth0", Desired: "9000", Actual: "1500", State: apitype.Drifted}}}}}
		}, []apitype.Event{{Type: apitype.EventPolicy, Object: "fabric/mtu/eth0", From: apitype.InSync, To: apitype.Drifted, Message: "desired 9000, actual 1500"}}},
		// Peers: the same diff as D-Bus's PeerStateChanged, plus the
		// peers no longer probed ("absent"); a new peer in state unknown
		// is no change.
		{"peer goes down, one dropped, one new", func(s *apitype.Snapshot) {
			s.Peers = apitype.Peers{Peers: []apitype.Peer{
				{Name: "node2", State: apitype.PeerDown, Reason: "control endpoint does not answer"},
				{Name: "node4", State: apitype.PeerUnknown}}}
		}, []apitype.Event{
			{Type: apitype.EventPeer, Object: "node2", From: apitype.PeerUp, To: apitype.PeerDown, Message: "control endpoint does not answer"},
			{Type: apitype.EventPeer, Object: "node3", From: apitype.PeerUp, To: apitype.Absent},
		}},
		{"phys state alone changes", func(s *apitype.Snapshot) {
			s.Devices = []apitype.Device{{Name: "rxe0", Ports: []apitype.Port{port("ACTIVE", "LinkErrorRecovery")}}}
		}, []apitype.Event{{Type: apitype.EventLink, Object: "rxe0/1", From: "ACTIVE/LinkUp", To: "ACTIVE/LinkErrorRecovery"}}},
		{"component recovers", func(s *apitype.Snapshot) {
			s.Components = map[string]apitype.Component{"api": {State: apitype.Error, Error: "socket gone"}}
		}, []apitype.Event{{Type: apitype.EventComponent, Object: "api", From: apitype.OK, To: apitype.Error, Message: "socket gone"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prev := base
			next := base
			next.Seq = 2
			tt.change(&next)
			got := state.Compare(&prev, &next).Events(next.Summary)
			for i := range tt.want {
				tt.want[i].Seq = 2
			}
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Diff (-want +got):\n%s", diff)
			}
		})
	}
}

// flip publishes a snapshot that changes component "probe" and returns its
// seq. Each call yields exactly one event.
func flip(store *state.Store, i int, pad int) uint64 {
	st := apitype.OK
	if i%2 == 1 {
		st = apitype.Error
	}
	msg := fmt.Sprintf("flip %d %s", i, strings.Repeat("x", pad))
	return store.Update(func(s *apitype.Snapshot) {
		state.SetComponent(s, "probe", st, errors.New(msg), time.Now())
	}).Seq
}

func newStore() *state.Store {
	return state.NewStore(apitype.Snapshot{Version: "test", State: apitype.Running})
}

func runHub(t *testing.T, h *watch.Hub) context.CancelFunc {
	ctx, cancel := context.WithCancel(context.Background())
	go h.Run(ctx)
	t.Cleanup(func() {
		cancel()
		select {
		case <-h.Done():
		case <-time.After(5 * time.Second):
			t.Error("hub did not stop 5s after cancel")
		}
	})
	return cancel
}

// TestSlowSubscriber: a subscriber that never reads is dropped once its
// buffer is full, while the publisher and a fast subscriber go on: the fast
// one sees every event, in order.
func TestSlowSubscriber(t *testing.T) {
	store := newStore()
	h := watch.NewHub(store, watch.Options{Buffer: 4})
	slow, err := h.Subscribe()
	if err != nil {
		t.Fatal(err)
	}
	fast, err := h.Subscribe()
	if err != nil {
		t.Fatal(err)
	}
	runHub(t, h)

	const n = 50
	for i := 0; i < n; i++ {
		start := time.Now()
		seq := flip(store, i, 0)
		if d := time.Since(start); d > time.Second {
			t.Fatalf("publishing snapshot %d took %v", i, d)
		}
		// Wait for the event so that the hub sees every snapshot and the
		// fast subscriber's events can be checked one by one.
		select {
		case ev := <-fast.C:
			if ev.Seq != seq || ev.Type != apitype.EventComponent || ev.Object != "probe" || !strings.HasPrefix(ev.Message, fmt.Sprintf("flip %d ", i)) {
				t.Fatalf("fast subscriber: event %d is %+v, want the flip of seq %d", i, ev, seq)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("fast subscriber got no event for snapshot %d within 5s (hub blocked?)", seq)
		}
	}
	select {
	case <-slow.Dropped():
	default:
		t.Fatal("the slow subscriber was not dropped after 50 events with a buffer of 4")
	}
	if got := len(slow.C); got != 4 {
		t.Errorf("slow subscriber holds %d events, want its buffer (4)", got)
	}
	if got := h.Clients(); got != 1 {
		t.Errorf("Clients() = %d after the drop, want 1", got)
	}
	select {
	case <-fast.Dropped():
		t.Error("the fast subscriber was dropped")
	default:
	}
}

func TestMaxClients(t *testing.T) {
	h := watch.NewHub(newStore(), watch.Options{MaxClients: 2})
	var subs []*watch.Sub
	for i := 0; i < 2; i++ {
		s, err := h.Subscribe()
		if err != nil {
			t.Fatalf("subscriber %d: %v", i, err)
		}
		subs = append(subs, s)
	}
	if _, err := h.Subscribe(); !errors.Is(err, watch.ErrTooManyClients) {
		t.Fatalf("third subscriber: %v, want ErrTooManyClients", err)
	}
	h.Unsubscribe(subs[0])
	if _, err := h.Subscribe(); err != nil {
		t.Fatalf("subscriber after one left: %v", err)
	}
}

// serve serves the hub as /v1/watch on a Unix socket with a short
// ReadTimeout, like the API server's but shorter, so that a stream that
// outlives it proves the handler lifts it.
func serve(t *testing.T, h *watch.Hub) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "rdmad.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /v1/watch", h)
	srv := &http.Server{Handler: mux, ReadTimeout: 200 * time.Millisecond, ReadHeaderTimeout: 200 * time.Millisecond}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return sock
}

// rawWatch opens /v1/watch without reading anything back.
func rawWatch(t *testing.T, sock string) net.Conn {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, "GET /v1/watch HTTP/1.1\r\nHost: rdmad\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestHTTPSlowClient: over a real socket, a client that stops reading is
// dropped with a final line while a fast client (the typed client) gets
// every event in order, also after the server's ReadTimeout.
func TestHTTPSlowClient(t *testing.T) {
	store := newStore()
	h := watch.NewHub(store, watch.Options{Buffer: 8, WriteTimeout: 5 * time.Second})
	runHub(t, h)
	sock := serve(t, h)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fast, err := client.New(sock).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer fast.Close()
	if fast.Hello.Seq != store.Load().Seq {
		t.Errorf("hello seq %d, want the current %d", fast.Hello.Seq, store.Load().Seq)
	}
	slow := rawWatch(t, sock)
	waitFor(t, func() bool { return h.Clients() == 2 }, "both clients subscribed")

	// Outlive the server's ReadTimeout before anything happens.
	time.Sleep(500 * time.Millisecond)

	// 8 KiB per event: a few hundred fill the socket buffers, so the slow
	// client's handler blocks in Write and its queue fills up.
	const n = 400
	for i := 0; i < n; i++ {
		seq := flip(store, i, 8<<10)
		ev, err := fast.Next()
		if err != nil {
			t.Fatalf("fast client, event %d: %v", i, err)
		}
		if ev.Seq != seq || ev.Object != "probe" || !strings.HasPrefix(ev.Message, fmt.Sprintf("flip %d ", i)) {
			t.Fatalf("fast client: event %d is seq %d %s %q, want the flip of seq %d", i, ev.Seq, ev.Object, ev.Message[:min(20, len(ev.Message))], seq)
		}
	}
	waitFor(t, func() bool { return h.Clients() == 1 }, "the slow client dropped")

	// Now read what the slow client was sent: the hello, events in order,
	// and the final "dropped" line, then the end of the stream.
	slow.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(slow), nil)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	var evs []apitype.Event
	for sc.Scan() {
		var ev apitype.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("slow client line %q: %v", sc.Bytes(), err)
		}
		evs = append(evs, ev)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("slow client: reading the stream: %v (want a clean end after the dropped line)", err)
	}
	if len(evs) < 2 || evs[0].Type != apitype.EventHello || evs[len(evs)-1].Type != apitype.EventDropped {
		t.Fatalf("slow client got %d lines; want hello ... dropped; first %+v", len(evs), evs[0])
	}
	last := evs[len(evs)-1]
	if len(evs) > 2 && last.Seq != evs[len(evs)-2].Seq {
		t.Errorf("dropped line says seq %d, want the last event sent (%d)", last.Seq, evs[len(evs)-2].Seq)
	}
	if !strings.Contains(last.Message, "reconnect") {
		t.Errorf("dropped message %q does not say what to do", last.Message)
	}
	for i := 2; i < len(evs)-1; i++ {
		if evs[i].Seq != evs[i-1].Seq+1 {
			t.Errorf("slow client: event %d has seq %d after %d; want consecutive events before the drop", i, evs[i].Seq, evs[i-1].Seq)
			break
		}
	}
	t.Logf("slow client received %d of %d events before it was dropped", len(evs)-2, n)
}

// TestHTTPLimitAndBye: a client beyond MaxClients gets 503 with a JSON
// error; stopping the hub ends open streams with a "bye" line.
func TestHTTPLimitAndBye(t *testing.T) {
	store := newStore()
	h := watch.NewHub(store, watch.Options{MaxClients: 1})
	cancel := runHub(t, h)
	sock := serve(t, h)
	ctx := context.Background()
	c := client.New(sock)
	st, err := c.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()

	_, err = c.Watch(ctx)
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable || !strings.Contains(ae.Message, "limit") {
		t.Fatalf("second watcher: %v; want a 503 APIError naming the limit", err)
	}

	seq := flip(store, 1, 0)
	if ev, err := st.Next(); err != nil || ev.Seq != seq {
		t.Fatalf("event: %+v, %v; want seq %d", ev, err, seq)
	}
	cancel()
	ev, err := st.Next()
	if err != nil || ev.Type != apitype.EventBye {
		t.Fatalf("after stop: %+v, %v; want a bye line", ev, err)
	}
	if _, err := st.Next(); err != io.EOF {
		t.Fatalf("after bye: %v, want io.EOF", err)
	}
	if _, err := c.Watch(ctx); !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable {
		t.Fatalf("watch after stop: %v, want 503", err)
	}
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestWatchBounds: per-uid bounds for watchers outside the admin group, and
// the reserved watches only admins may take once the general pool is full.
func TestWatchBounds(t *testing.T) {
	store := newStore()
	h := watch.NewHub(store, watch.Options{MaxClients: 4, Reserved: 2, MaxPerUID: 2, Buffer: 1})
	reader := func(uid uint32) watch.Watcher { return watch.Watcher{UID: uid, Known: true} }
	admin := watch.Watcher{UID: 0, Known: true, Admin: true}

	var a []*watch.Sub
	for i := 0; i < 2; i++ {
		s, err := h.SubscribeAs(reader(1000))
		if err != nil {
			t.Fatalf("uid 1000, watch %d: %v", i, err)
		}
		a = append(a, s)
	}
	if _, err := h.SubscribeAs(reader(1000)); !errors.Is(err, watch.ErrTooManyForUID) {
		t.Fatalf("uid 1000, third watch: %v, want ErrTooManyForUID", err)
	}
	// Peers without credentials share one bucket rather than pass as uid 0.
	for i := 0; i < 2; i++ {
		if _, err := h.SubscribeAs(watch.Watcher{}); err != nil {
			t.Fatalf("unknown peer, watch %d: %v", i, err)
		}
	}
	if _, err := h.SubscribeAs(watch.Watcher{}); !errors.Is(err, watch.ErrTooManyForUID) {
		t.Fatalf("unknown peer, third watch: %v, want ErrTooManyForUID", err)
	}
	// The general pool (4) is full: another reader is refused, admins get
	// the reserved two, and no more.
	if _, err := h.SubscribeAs(reader(1001)); !errors.Is(err, watch.ErrTooManyClients) {
		t.Fatalf("uid 1001 with the pool full: %v, want ErrTooManyClients", err)
	}
	for i := 0; i < 2; i++ {
		if _, err := h.SubscribeAs(admin); err != nil {
			t.Fatalf("admin, reserved watch %d: %v", i, err)
		}
	}
	if _, err := h.SubscribeAs(admin); !errors.Is(err, watch.ErrTooManyClients) {
		t.Fatalf("admin beyond the reserved watches: %v, want ErrTooManyClients", err)
	}
	if got := h.Clients(); got != 6 {
		t.Fatalf("Clients() = %d, want 6", got)
	}

	// A reader leaving frees a general watch for another reader: the
	// admins' watches are the reserved ones, not general ones.
	h.Unsubscribe(a[0])
	if _, err := h.SubscribeAs(reader(1001)); err != nil {
		t.Fatalf("uid 1001 after a reader left: %v", err)
	}
	if _, err := h.SubscribeAs(reader(1002)); !errors.Is(err, watch.ErrTooManyClients) {
		t.Fatalf("uid 1002 with the pool full again: %v, want ErrTooManyClients", err)
	}
	runHub(t, h)
	// A buffer of 1: the second event drops every subscriber that did not
	// read the first. Wait for the first so the hub does not merge both
	// snapshots into one event.
	flip(store, 0, 0)
	waitFor(t, func() bool { return len(a[1].C) == 1 }, "the first event queued")
	flip(store, 1, 0)
	select {
	case <-a[1].Dropped():
	case <-time.After(5 * time.Second):
		t.Fatal("a subscriber with a full buffer was not dropped")
	}
	waitFor(t, func() bool { return h.Clients() == 0 }, "every non-reading subscriber dropped")
	for i := 0; i < 2; i++ {
		if _, err := h.SubscribeAs(reader(1000)); err != nil {
			t.Fatalf("uid 1000 after its watches were dropped, watch %d: %v", i, err)
		}
	}
}

// TestWatchAdminsUseReservedFirst: admins' watches take the reserved ones
// before general ones, so root watching does not shrink readers' share;
// beyond the reserved ones they share the general pool.
func TestWatchAdminsUseReservedFirst(t *testing.T) {
	h := watch.NewHub(newStore(), watch.Options{MaxClients: 2, Reserved: 1, MaxPerUID: 2})
	admin := watch.Watcher{UID: 0, Known: true, Admin: true}
	if _, err := h.SubscribeAs(admin); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if _, err := h.SubscribeAs(watch.Watcher{UID: 1000 + uint32(i), Known: true}); err != nil {
			t.Fatalf("reader %d with an admin watching: %v", i, err)
		}
	}
	if _, err := h.SubscribeAs(admin); !errors.Is(err, watch.ErrTooManyClients) {
		t.Fatalf("admin beyond MaxClients+Reserved: %v, want ErrTooManyClients", err)
	}

	// Two admins: the second takes a general watch, so one reader fits.
	h = watch.NewHub(newStore(), watch.Options{MaxClients: 2, Reserved: 1, MaxPerUID: 2})
	for i := 0; i < 2; i++ {
		if _, err := h.SubscribeAs(admin); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.SubscribeAs(watch.Watcher{UID: 1000, Known: true}); err != nil {
		t.Fatalf("reader with two admins watching: %v", err)
	}
	if _, err := h.SubscribeAs(watch.Watcher{UID: 1001, Known: true}); !errors.Is(err, watch.ErrTooManyClients) {
		t.Fatalf("second reader with an admin in a general watch: %v, want ErrTooManyClients", err)
	}
}

// TestHTTPNonReaderWriteDeadline: a client that stops reading before its
// queue overflows is dropped by the write deadline of the line it blocks
// on, with a log line, while a reading client goes on.
func TestHTTPNonReaderWriteDeadline(t *testing.T) {
	store := newStore()
	var logs syncbuf.Buffer
	h := watch.NewHub(store, watch.Options{Buffer: 10000, WriteTimeout: 300 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	runHub(t, h)
	sock := serve(t, h)

	fast, err := client.New(sock).Watch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer fast.Close()
	rawWatch(t, sock)
	waitFor(t, func() bool { return h.Clients() == 2 }, "both clients subscribed")

	// 128 lines of 16 KiB: 2 MiB, far more than the socket buffers hold,
	// and far fewer than the queue holds, so only the deadline can drop.
	for i := 0; i < 128; i++ {
		seq := flip(store, i, 16<<10)
		if ev, err := fast.Next(); err != nil || ev.Seq != seq {
			t.Fatalf("reading client, event %d: seq %d, %v; want seq %d", i, ev.Seq, err, seq)
		}
	}
	waitFor(t, func() bool { return h.Clients() == 1 }, "the non-reading client dropped")
	waitFor(t, func() bool { return strings.Contains(logs.String(), "dropped a client that stopped reading") },
		"the log line about the dropped client")
	if strings.Contains(logs.String(), "fell behind") {
		t.Errorf("the client was dropped for its queue, not by the write deadline:\n%s", logs.String())
	}
}

// TestHeartbeat: a quiet stream carries heartbeat lines that an old client
// can decode as an event, and that the typed client skips.
func TestHeartbeat(t *testing.T) {
	store := newStore()
	h := watch.NewHub(store, watch.Options{Heartbeat: 50 * time.Millisecond})
	runHub(t, h)
	sock := serve(t, h)

	raw := rawWatch(t, sock)
	raw.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(raw), nil)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	var lines []apitype.Event
	for len(lines) < 4 && sc.Scan() {
		var ev apitype.Event // what an old client decodes every line into
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("line %q is not an event: %v", sc.Bytes(), err)
		}
		lines = append(lines, ev)
	}
	if len(lines) < 4 {
		t.Fatalf("got %d lines before the stream ended (%v), want hello and 3 heartbeats", len(lines), sc.Err())
	}
	if lines[0].Type != apitype.EventHello {
		t.Fatalf("first line %+v, want hello", lines[0])
	}
	for _, ev := range lines[1:] {
		if ev.Type != apitype.EventHeartbeat || ev.Seq != lines[0].Seq || ev.Time.IsZero() {
			t.Errorf("quiet stream sent %+v, want a heartbeat with the hello's seq %d and a time", ev, lines[0].Seq)
		}
	}

	st, err := client.New(sock).Watch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	time.Sleep(300 * time.Millisecond) // several heartbeats queue up unread
	seq := flip(store, 1, 0)
	ev, err := st.Next()
	if err != nil || ev.Type != apitype.EventComponent || ev.Seq != seq {
		t.Fatalf("Next after heartbeats: %+v, %v; want the component event of seq %d", ev, err, seq)
	}
	time.Sleep(300 * time.Millisecond)
	seq = flip(store, 2, 0)
	b, err := st.NextRaw()
	if err != nil || !strings.Contains(string(b), `"type":"component"`) {
		t.Fatalf("NextRaw after heartbeats: %s, %v; want the component event of seq %d", b, err, seq)
	}
}

// TestHTTPIdentify: the hub bounds HTTP watchers as Options.Identify says
// who they are (the daemon passes the API's credentials): a reader's
// second watch beyond MaxPerUID is refused naming its uid, while an admin's
// is not bounded per uid.
func TestHTTPIdentify(t *testing.T) {
	store := newStore()
	var admin atomic.Bool
	h := watch.NewHub(store, watch.Options{MaxClients: 4, MaxPerUID: 1, Identify: func(*http.Request) watch.Watcher {
		return watch.Watcher{UID: 1000, Known: true, PID: 42, Admin: admin.Load()}
	}})
	runHub(t, h)
	sock := serve(t, h)
	c := client.New(sock)
	ctx := context.Background()
	st, err := c.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	_, err = c.Watch(ctx)
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable || !strings.Contains(ae.Message, "uid 1000 already has 1 watches") {
		t.Fatalf("the reader's second watch: %v; want a 503 naming uid 1000's limit", err)
	}
	admin.Store(true)
	st2, err := c.Watch(ctx)
	if err != nil {
		t.Fatalf("an admin's second watch of the same uid: %v", err)
	}
	st2.Close()
}
