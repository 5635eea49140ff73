package api

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon/access"
	"github.com/rdmad/rdmad/daemon/service/servicetest"
	"github.com/rdmad/rdmad/daemon/state"
	"github.com/rdmad/rdmad/test/bench/peersnap"
)

// TestStatusEncodedOnce: GET /v1/status is the snapshot as writeJSON
// encodes it, the same bytes for every request of one snapshot (encoded
// once, #29 item 3), and a published snapshot's own at once.
func TestStatusEncodedOnce(t *testing.T) {
	store := state.NewStore(*peersnap.Snapshot(3, 1))
	sock := filepath.Join(t.TempDir(), "rdmad.sock")
	ln, err := Listen(sock, SocketAccess{})
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(&servicetest.Backend{Store: store}, access.Roles{SelfUID: uint32(os.Getuid())})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln, time.Second) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	c := unixClient(sock)
	first := get(t, c, "/v1/status")
	if want := encodeJSON(store.Load()); !bytes.Equal(first, want) {
		t.Errorf("status is not the snapshot's JSON:\n%.300s\nwant\n%.300s", first, want)
	}
	cached := srv.status.cur.Load()
	if second := get(t, c, "/v1/status"); !bytes.Equal(second, first) || srv.status.cur.Load() != cached {
		t.Errorf("a second request of one snapshot was encoded anew or differs")
	}
	next := store.Update(func(s *apitype.Snapshot) { s.State = apitype.Degraded })
	var s apitype.Snapshot
	if err := json.Unmarshal(get(t, c, "/v1/status"), &s); err != nil || s.Seq != next.Seq || s.State != apitype.Degraded {
		t.Errorf("after a publish: seq %d state %q (%v), want seq %d degraded", s.Seq, s.State, err, next.Seq)
	}
}

// TestStatusAsksFresh: GET /v1/status calls SetFresh's function with the
// request's context before it loads the snapshot, so that the state that
// function waits for (the peer manager's figures) is the one served.
func TestStatusAsksFresh(t *testing.T) {
	store := state.NewStore(*peersnap.Snapshot(3, 1))
	sock := filepath.Join(t.TempDir(), "rdmad.sock")
	ln, err := Listen(sock, SocketAccess{})
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(&servicetest.Backend{Store: store}, access.Roles{SelfUID: uint32(os.Getuid())})
	asked := 0
	srv.SetFresh(func(ctx context.Context) {
		if ctx.Err() != nil {
			t.Errorf("fresh called with a context already done: %v", ctx.Err())
		}
		asked++
		store.Update(func(s *apitype.Snapshot) {
			// A new state, as the manager publishes: the older
			// snapshots keep theirs.
			s.Peers.Peers = slices.Clone(s.Peers.Peers)
			p := &s.Peers.Peers[0]
			p.Paths = slices.Clone(p.Paths)
			p.Paths[0].Sent = uint64(1000 + asked)
		})
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln, time.Second) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	c := unixClient(sock)
	for i := 1; i <= 2; i++ {
		var s apitype.Snapshot
		if err := json.Unmarshal(get(t, c, "/v1/status"), &s); err != nil {
			t.Fatal(err)
		}
		if got := s.Peers.Peers[0].Paths[0].Sent; asked != i || got != uint64(1000+i) {
			t.Errorf("request %d: fresh asked %d times, status shows sent %d; want %d asks and the state they made (sent %d)", i, asked, got, i, 1000+i)
		}
	}
	if get(t, c, "/v1/health"); asked != 2 {
		t.Errorf("GET /v1/health asked for fresh figures (%d asks); the verdict has none", asked)
	}
}
