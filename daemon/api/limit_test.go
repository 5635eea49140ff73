package api_test

// These tests perform the lock-out attacks of issue #13 for real: helper
// processes (this test binary, re-executed under setpriv as unprivileged
// uids in the socket group) flood the real api.Server on a real Unix
// socket, and the tests check that root and the admin group are still
// served at once, that the flooders are told why they are refused, and that
// what they hold is bounded and recycled.

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
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client"
	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon/access"
	"github.com/rdmad/rdmad/daemon/api"
	"github.com/rdmad/rdmad/daemon/service/servicetest"
	"github.com/rdmad/rdmad/daemon/state"
	"github.com/rdmad/rdmad/daemon/watch"
	"github.com/rdmad/rdmad/internal/syncbuf"
	"github.com/rdmad/rdmad/internal/testenv"
)

// The helper's environment: its mode, the socket and the flood's size.
const (
	envMode = "RDMAD_LIMIT_HELPER"
	envSock = "RDMAD_LIMIT_SOCK"
	// reportPrefix marks the helper's one line of results on stdout.
	reportPrefix = "LIMIT-REPORT "
)

// The flood of the report in issue #13, from one read-only uid.
const (
	floodWatches    = 32
	floodKeepAlives = 32
	floodIdle       = 400
)

// env is what the attack tests share: a directory every uid can enter
// holding the socket and a copy of this test binary, and unused ids.
type env struct {
	dir, bin, sock string
	sockGID        uint32
	adminGID       uint32
	free           []uint32 // unused uids, to run helpers as
}

func newEnv(t *testing.T) *env {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the attack runs from other uids through setpriv")
	}
	testenv.Tool(t, "setpriv", "apt-get install util-linux: it runs the helpers as other uids")
	// t.TempDir is 0700 under a 0700 parent: the helpers' uids could not
	// reach the socket or the binary.
	dir, bin := api.SharedDir(t)
	e := &env{dir: dir, bin: bin, sock: filepath.Join(dir, "rdmad.sock")}
	// Ids nobody uses, so that no real account's groups get in the way.
	// The uids and gids come from separate ranges: a helper's uid must not
	// be mistaken for a group it is not meant to have.
	var gids []uint32
	for id := uint32(63000); id < 65000 && len(gids) < 2; id++ {
		if _, err := user.LookupGroupId(strconv.FormatUint(uint64(id), 10)); err != nil {
			gids = append(gids, id)
		}
	}
	for id := uint32(61000); id < 63000 && len(e.free) < 8; id++ {
		if _, err := user.LookupId(strconv.FormatUint(uint64(id), 10)); err != nil {
			e.free = append(e.free, id)
		}
	}
	if len(gids) < 2 || len(e.free) < 8 {
		t.Skip("no unused uids in 61000-63000 or gids in 63000-65000 to run the helpers as")
	}
	e.sockGID, e.adminGID = gids[0], gids[1]
	return e
}

// server is a running api.Server with the watch hub on /v1/watch.
type server struct {
	store *state.Store
	hub   *watch.Hub
	logs  *syncbuf.Buffer
}

// serve starts the real server on e.sock (mode 0660, group e.sockGID),
// with the limits lim and the hub's options hopts.
func (e *env) serve(t *testing.T, lim api.Limits, hopts watch.Options) *server {
	t.Helper()
	ln, err := net.Listen("unix", e.sock)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(e.sock, 0, int(e.sockGID)); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(e.sock, 0o660); err != nil {
		t.Fatal(err)
	}
	srv := &server{store: state.NewStore(apitype.Snapshot{Version: "test", State: apitype.Running}), logs: &syncbuf.Buffer{}}
	log := slog.New(slog.NewTextHandler(srv.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	hopts.Logger = log
	// As the daemon identifies watchers (daemon/sinks.go).
	hopts.Identify = func(r *http.Request) watch.Watcher {
		p := api.PeerFrom(r.Context())
		return watch.Watcher{UID: p.UID, Known: p.Known, PID: p.PID, Admin: api.ClassFrom(r.Context()) == api.ClassAdmin}
	}
	srv.hub = watch.NewHub(srv.store, hopts)
	s := api.NewServer(&servicetest.Backend{Store: srv.store},
		access.Roles{SelfUID: 0, ReadGID: access.GID(e.sockGID), AdminGID: access.GID(e.adminGID)})
	s.SetLogger(log)
	s.Handle("/v1/watch", http.MethodGet, access.Watch, srv.hub)

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); srv.hub.Run(ctx) }()
	go func() {
		defer wg.Done()
		if err := s.ServeLimits(ctx, ln, time.Second, lim); err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		if t.Failed() {
			t.Logf("server log:\n%s", srv.logs.String())
		}
	})
	return srv
}

// A helper is a helper process running as another uid.
type helper struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *bufio.Scanner
	stderr *syncbuf.Buffer
}

// start runs this test binary's TestLimitHelper in mode as uid, with the
// socket group and, for an admin, the admin group.
func (e *env) start(t *testing.T, mode string, uid uint32, admin bool) *helper {
	t.Helper()
	groups := strconv.FormatUint(uint64(e.sockGID), 10)
	if admin {
		groups += "," + strconv.FormatUint(uint64(e.adminGID), 10)
	}
	// The primary group is the socket group, as for a user whose account
	// was created with it; the supplementary groups say it again.
	cmd := exec.Command("setpriv", "--reuid="+strconv.FormatUint(uint64(uid), 10), "--regid="+strconv.FormatUint(uint64(e.sockGID), 10),
		"--groups="+groups, "--", e.bin, "-test.run=^TestLimitHelper$", "-test.count=1")
	cmd.Dir = e.dir
	cmd.Env = append(os.Environ(), envMode+"="+mode, envSock+"="+e.sock)
	h := &helper{cmd: cmd, stderr: &syncbuf.Buffer{}}
	cmd.Stderr = h.stderr
	var err error
	if h.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	h.out = bufio.NewScanner(stdout)
	h.out.Buffer(nil, 1<<20)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start helper %s as uid %d: %v", mode, uid, err)
	}
	t.Cleanup(h.stop)
	return h
}

// report waits for the helper's report and decodes it into v.
func (h *helper) report(t *testing.T, v any) {
	t.Helper()
	for h.out.Scan() {
		if line, ok := strings.CutPrefix(h.out.Text(), reportPrefix); ok {
			if err := json.Unmarshal([]byte(line), v); err != nil {
				t.Fatalf("helper report %q: %v", line, err)
			}
			return
		}
	}
	t.Fatalf("helper %v ended without a report: %v\nstderr:\n%s", h.cmd.Args, h.out.Err(), h.stderr.String())
}

// stop lets the helper go (it holds its connections until stdin closes)
// and waits for it.
func (h *helper) stop() {
	h.stdin.Close()
	done := make(chan struct{})
	go func() { h.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		h.cmd.Process.Kill()
		<-done
	}
}

// floodReport is what a flooder saw: for each kind of connection, how
// many ended which way ("200", "503: message", "closed", "held", "error:
// ...").
type floodReport struct {
	UID       uint32
	Watches   map[string]int
	KeepAlive map[string]int
	Idle      map[string]int
}

// statusReport is what one GET /v1/status (and, optionally, a watch) from a
// helper saw.
type statusReport struct {
	Code      int
	Error     string
	Millis    float64
	WatchOK   bool
	WatchErr  string
	ClosedBy  string
	ServedFor float64
}

// TestLimitHelper is the helper process's body; it does nothing in a
// normal test run.
func TestLimitHelper(t *testing.T) {
	mode := os.Getenv(envMode)
	if mode == "" {
		t.Skip("the helper process of the limit tests; they run it")
	}
	sock := os.Getenv(envSock)
	var rep any
	switch mode {
	case "flood":
		rep = flood(sock)
	case "status":
		rep = statusOnce(sock, false)
	case "status+watch":
		rep = statusOnce(sock, true)
	case "keepalive":
		rep = keepAliveForever(sock)
	case "slow-headers", "slow-body":
		rep = slowSend(sock, slowHeads[mode])
	default:
		fmt.Fprintf(os.Stderr, "unknown helper mode %q\n", mode)
		os.Exit(2)
	}
	b, _ := json.Marshal(rep)
	fmt.Printf("%s%s\n", reportPrefix, b)
	// Hold every connection until the test lets go.
	io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}

// flood is the attack of issue #13: 32 watches, 32 keep-alive connections
// and 400 idle ones from one read-only uid, all held open. It reads the
// answers (to report them), never the watch streams.
func flood(sock string) floodReport {
	rep := floodReport{UID: uint32(os.Getuid()), Watches: map[string]int{}, KeepAlive: map[string]int{}, Idle: map[string]int{}}
	var held []net.Conn
	request := func(req string) string {
		c, err := net.Dial("unix", sock)
		if err != nil {
			return "error: " + err.Error()
		}
		held = append(held, c)
		c.SetDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(c)
		if _, err := io.WriteString(c, req); err != nil {
			return "error: " + err.Error()
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return "error: " + err.Error()
		}
		if resp.StatusCode == http.StatusOK && strings.Contains(req, "/v1/watch") {
			// The hello line says the stream is open; nothing more is
			// ever read from it.
			if _, err := br.ReadString('\n'); err != nil {
				return "error: hello: " + err.Error()
			}
			return "200"
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if resp.StatusCode == http.StatusOK {
			return "200"
		}
		var eb apitype.ErrorBody
		json.Unmarshal(body, &eb)
		return fmt.Sprintf("%d: %s", resp.StatusCode, eb.Error)
	}
	for range floodWatches {
		rep.Watches[request("GET /v1/watch HTTP/1.1\r\nHost: rdmad\r\n\r\n")]++
	}
	for range floodKeepAlives {
		rep.KeepAlive[request("GET /v1/status HTTP/1.1\r\nHost: rdmad\r\n\r\n")]++
	}
	var idle []net.Conn
	for range floodIdle {
		c, err := net.Dial("unix", sock)
		if err != nil {
			rep.Idle["error: "+err.Error()]++
			continue
		}
		idle = append(idle, c)
	}
	// Which idle connections did rdmad close? A refused one has the 503
	// (or just the end) to read; a held one has nothing until the
	// deadline.
	var mu sync.Mutex
	var wg sync.WaitGroup
	deadline := time.Now().Add(3 * time.Second)
	for _, c := range idle {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.SetReadDeadline(deadline)
			b, err := io.ReadAll(c)
			what := "closed"
			switch {
			case errors.Is(err, os.ErrDeadlineExceeded):
				what = "held"
			case strings.HasPrefix(string(b), "HTTP/1.1 503"):
				what = "503"
			}
			mu.Lock()
			rep.Idle[what]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	// Held until the process exits: a connection nothing refers to is
	// closed by its finalizer at the next garbage collection, which gave
	// slots back in the middle of the test (a reader served with the
	// general pool "full", a flooder's watches gone without a drop).
	holding = append(holding, held...)
	holding = append(holding, idle...)
	return rep
}

// holding keeps the flooder's connections reachable until its process
// exits.
var holding []net.Conn

// statusOnce times one GET /v1/status on a new connection and, with watch,
// opens a watch and reads its hello.
func statusOnce(sock string, watchToo bool) statusReport {
	var rep statusReport
	c := client.New(sock)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	_, err := c.Status(ctx)
	rep.Millis = float64(time.Since(start).Microseconds()) / 1000
	var ae *client.APIError
	switch {
	case err == nil:
		rep.Code = 200
	case errors.As(err, &ae):
		rep.Code, rep.Error = ae.Status, ae.Message
	default:
		rep.Error = err.Error()
	}
	if watchToo {
		st, err := c.Watch(ctx)
		if err != nil {
			rep.WatchErr = err.Error()
		} else {
			rep.WatchOK = true
			st.Close()
		}
	}
	return rep
}

// keepAliveForever tries to keep one connection forever by sending a
// request every 200 ms, well within every timeout; it reports how rdmad
// ended it.
func keepAliveForever(sock string) statusReport {
	var rep statusReport
	c, err := net.Dial("unix", sock)
	if err != nil {
		rep.Error = err.Error()
		return rep
	}
	defer c.Close()
	start := time.Now()
	br := bufio.NewReader(c)
	for time.Since(start) < 20*time.Second {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, "GET /v1/status HTTP/1.1\r\nHost: rdmad\r\n\r\n"); err != nil {
			rep.ClosedBy = "write: " + err.Error()
			break
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			rep.ClosedBy = "read: " + err.Error()
			break
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		rep.Code = resp.StatusCode
		if resp.Close {
			// "Connection: close": the next read must be the end.
			_, err := br.ReadByte()
			rep.ClosedBy = fmt.Sprintf("Connection: close, then %v", err)
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	rep.ServedFor = time.Since(start).Seconds()
	return rep
}

// rootStatus times GET /v1/status from this (root) process on a new
// connection.
func rootStatus(sock string) (time.Duration, error) {
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}}
	start := time.Now()
	resp, err := hc.Get("http://rdmad/v1/status")
	if err != nil {
		return time.Since(start), err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return time.Since(start), fmt.Errorf("status %d", resp.StatusCode)
	}
	return time.Since(start), nil
}

// TestLockOutByReaders: four read-only uids each perform the flood of
// issue #13 (32 watches, 32 keep-alive, 400 idle connections, held open),
// which together fill the general connection pool and the general watches.
// Root's and an admin's GET /v1/status still answer within 1 s, during and
// after the flood; admins still get watches; the flooders and an innocent
// reader are told which limit refused them; the flooders' watches, which
// never read, are dropped with a log line; and everything is given back
// when the flooders go.
func TestLockOutByReaders(t *testing.T) {
	e := newEnv(t)
	const flooders = 4
	// General watches for exactly the four flooders' per-uid share, so
	// that they fill it and the admins need the reserved ones.
	hopts := watch.Options{MaxClients: flooders * watch.DefaultMaxPerUID, WriteTimeout: time.Second, Heartbeat: 200 * time.Millisecond}
	srv := e.serve(t, api.DefaultLimits(), hopts)
	floodUIDs, readerUID, adminUID := e.free[:flooders], e.free[flooders], e.free[flooders+1]

	// Root's status, again and again while the flood goes on.
	stop := make(chan struct{})
	var slowest time.Duration
	var rootErrs []error
	var probes int
	probing := make(chan struct{})
	go func() {
		defer close(probing)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			d, err := rootStatus(e.sock)
			probes++
			slowest = max(slowest, d)
			if err != nil {
				rootErrs = append(rootErrs, err)
			}
		}
	}()

	var hs []*helper
	for _, uid := range floodUIDs {
		hs = append(hs, e.start(t, "flood", uid, false))
	}
	reps := make([]floodReport, flooders)
	for i, h := range hs {
		h.report(t, &reps[i])
	}
	close(stop)
	<-probing
	if len(rootErrs) > 0 || slowest >= time.Second {
		t.Errorf("root's GET /v1/status during the flood: slowest %v of %d, errors %v; want every answer within 1s", slowest, probes, rootErrs)
	}
	t.Logf("root's GET /v1/status during the flood: %d requests, slowest %v", probes, slowest)

	// What each flooder got: its per-uid share, and a clear refusal for
	// the rest.
	for _, r := range reps {
		perUIDConns := fmt.Sprintf("503: uid %d already holds %d connections to rdmad", r.UID, api.MaxConnsPerUID)
		perUIDWatches := fmt.Sprintf("503: uid %d already has %d watches open", r.UID, watch.DefaultMaxPerUID)
		count := func(m map[string]int, prefix string) int {
			n := 0
			for k, v := range m {
				if strings.HasPrefix(k, prefix) {
					n += v
				}
			}
			return n
		}
		wantWatch := watch.DefaultMaxPerUID
		if got := r.Watches["200"]; got != wantWatch {
			t.Errorf("uid %d: %d watches open, want %d (its bound): %v", r.UID, got, wantWatch, r.Watches)
		}
		// Its first MaxConnsPerUID connections reach the hub, which
		// refuses watches beyond the uid's bound; the listener refuses
		// the connections beyond the uid's bound.
		if got, want := count(r.Watches, perUIDWatches), api.MaxConnsPerUID-wantWatch; got != want {
			t.Errorf("uid %d: %d watches refused for the per-uid watch bound, want %d: %v", r.UID, got, want, r.Watches)
		}
		if got, want := count(r.Watches, perUIDConns), floodWatches-api.MaxConnsPerUID; got != want {
			t.Errorf("uid %d: %d watch connections refused for the per-uid connection bound, want %d: %v", r.UID, got, want, r.Watches)
		}
		if got := count(r.KeepAlive, perUIDConns); got != floodKeepAlives {
			t.Errorf("uid %d: %d of %d keep-alive connections refused with the per-uid bound, want all: %v", r.UID, got, floodKeepAlives, r.KeepAlive)
		}
		for k := range r.KeepAlive {
			if !strings.Contains(k, "admin_group") || !strings.Contains(k, "close some of its clients") {
				t.Errorf("uid %d: refusal %q does not say what to do", r.UID, k)
			}
		}
		if r.Idle["held"] != 0 || r.Idle["503"]+r.Idle["closed"] != floodIdle {
			t.Errorf("uid %d: idle connections %v; want all %d closed at once", r.UID, r.Idle, floodIdle)
		}
	}

	// The general pool is full of flooders now: root and an admin are
	// still served at once, on the reserved connections and watches.
	if d, err := rootStatus(e.sock); err != nil || d >= time.Second {
		t.Errorf("root's GET /v1/status with the general pool full: %v, %v; want 200 within 1s", d, err)
	}
	rootWatch, err := client.New(e.sock).Watch(context.Background())
	if err != nil {
		t.Fatalf("root's watch with the general watches full: %v", err)
	}
	defer rootWatch.Close()
	var adm statusReport
	e.start(t, "status+watch", adminUID, true).report(t, &adm)
	if adm.Code != 200 || adm.Millis >= 1000 || !adm.WatchOK {
		t.Errorf("admin's GET /v1/status and watch with the general pool full: %+v; want 200 within 1s and a watch", adm)
	}
	// An innocent reader is refused, and told why and by whom.
	var rd statusReport
	e.start(t, "status", readerUID, false).report(t, &rd)
	if rd.Code != http.StatusServiceUnavailable || !strings.Contains(rd.Error, fmt.Sprintf("already serves %d connections", api.MaxConns)) {
		t.Errorf("a reader with the general pool full: %+v; want 503 naming the limit of %d connections", rd, api.MaxConns)
	}
	if !strings.Contains(srv.logs.String(), "refused a connection over its limit") {
		t.Errorf("no log line about the refused connections")
	}

	// The flooders' watches never read: events that fill their socket
	// buffers drop them by the write deadline, while root's watch reads
	// every event (and skips the heartbeats it got meanwhile).
	for i := range 64 {
		seq := srv.store.Update(func(s *apitype.Snapshot) {
			state.SetComponent(s, "probe", []string{apitype.OK, apitype.Error}[i%2], errors.New(strings.Repeat("x", 16<<10)), time.Now())
		}).Seq
		ev, err := rootWatch.Next()
		if err != nil || ev.Seq != seq {
			t.Fatalf("root's watch, event %d: %+v, %v; want seq %d", i, ev.Seq, err, seq)
		}
	}
	waitFor(t, func() bool { return srv.hub.Clients() == 1 }, "the flooders' watches dropped")
	for _, uid := range floodUIDs {
		if !strings.Contains(srv.logs.String(), fmt.Sprintf("dropped a client that stopped reading\" uid=%d", uid)) {
			t.Errorf("no log line about dropping uid %d's watches:\n%s", uid, srv.logs.String())
		}
	}

	// The flooders go: their connections are given back, and the reader
	// who was refused is served.
	for _, h := range hs {
		h.stop()
	}
	waitFor(t, func() bool {
		var r statusReport
		e.start(t, "status", readerUID, false).report(t, &r)
		return r.Code == 200
	}, "a reader served once the flooders are gone")
}

// TestSlowSenders: a reader who sends headers or a body a byte at a time,
// or who keeps one connection alive with a request every 200 ms, is cut off
// (here with a connection age of 1 s instead of a minute), while root's
// keep-alive connection is not recycled.
func TestSlowSenders(t *testing.T) {
	e := newEnv(t)
	lim := api.DefaultLimits()
	lim.MaxAge = time.Second
	e.serve(t, lim, watch.Options{})

	// The keep-alive reader, in its own process.
	ka := e.start(t, "keepalive", e.free[0], false)

	// Slow senders, each from its own reader uid.
	slow := map[string]*helper{
		"slow-headers": e.start(t, "slow-headers", e.free[1], false),
		"slow-body":    e.start(t, "slow-body", e.free[2], false),
	}

	// Root on one keep-alive connection: never told to close.
	c, err := net.Dial("unix", e.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for start := time.Now(); time.Since(start) < 2500*time.Millisecond; time.Sleep(200 * time.Millisecond) {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, "GET /v1/status HTTP/1.1\r\nHost: rdmad\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("root's keep-alive connection after %v: %v", time.Since(start), err)
		}
		io.Copy(io.Discard, resp.Body)
		if resp.Close {
			t.Fatalf("root's keep-alive connection was closed after %v; only non-admins' are recycled", time.Since(start))
		}
	}

	var kr statusReport
	ka.report(t, &kr)
	if !strings.HasPrefix(kr.ClosedBy, "Connection: close, then EOF") || kr.ServedFor > 5 {
		t.Errorf("a reader keeping a connection alive: %+v; want it closed (Connection: close, EOF) about 1s in", kr)
	}
	// ReadHeaderTimeout is 5 s, ReadTimeout (the body) 10 s.
	for mode, limit := range map[string]float64{"slow-headers": 8, "slow-body": 14} {
		var r statusReport
		slow[mode].report(t, &r)
		if r.Error != "" || r.ClosedBy == "still open" || r.ServedFor > limit {
			t.Errorf("%s: %+v; want the connection ended within %vs", mode, r, limit)
		}
		t.Logf("%s: cut after %.1fs (%s)", mode, r.ServedFor, r.ClosedBy)
	}
}

// The slow senders' requests: they trickle the rest a byte at a time.
var slowHeads = map[string]string{
	"slow-headers": "GET /v1/status HTTP/1.1\r\nHost: rdmad\r\nX-Slow: ",
	"slow-body":    "GET /v1/status HTTP/1.1\r\nHost: rdmad\r\nContent-Length: 60000\r\n\r\n",
}

// slowSend sends head, then a byte every 100 ms, and reports when rdmad
// ended the connection.
func slowSend(sock, head string) statusReport {
	var rep statusReport
	c, err := net.Dial("unix", sock)
	if err != nil {
		rep.Error = err.Error()
		return rep
	}
	defer c.Close()
	start := time.Now()
	ended := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, c)
		ended <- err
	}()
	if _, err := io.WriteString(c, head); err != nil {
		rep.Error = err.Error()
		return rep
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	giveUp := time.After(30 * time.Second)
	for rep.ClosedBy == "" {
		select {
		case err := <-ended:
			rep.ClosedBy = fmt.Sprintf("end of stream (%v)", err)
		case <-tick.C:
			if _, err := c.Write([]byte("a")); err != nil {
				rep.ClosedBy = "write: " + err.Error()
			}
		case <-giveUp:
			rep.ClosedBy = "still open"
		}
	}
	rep.ServedFor = time.Since(start).Seconds()
	return rep
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
