// Package watch serves GET /v1/watch: a newline-delimited JSON stream of
// changes of rdmad's state.
//
// One goroutine per Hub (not per client) follows the state, turns
// each snapshot it sees into events with state.Compare (the diff D-Bus
// signals use too) and fans them out to the clients through bounded
// per-client queues. A client that falls behind is dropped with a final
// "dropped" line; nothing a client does can block the daemon.
package watch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon/state"
)

// Defaults of Options.
const (
	// DefaultMaxClients stays well below the API's MaxConns (daemon/api)
	// so that watchers cannot take every connection of the API.
	DefaultMaxClients = 32
	// DefaultReserved more watches are kept for root and the admin group,
	// so that readers holding every general watch do not lock them out.
	DefaultReserved = 8
	// DefaultMaxPerUID bounds the watches of one uid outside the admin
	// group: `rdmactl watch` in a few terminals and an agent fit; it takes
	// eight reader accounts to fill the general watches.
	DefaultMaxPerUID = 4
	// DefaultHeartbeat is how long a stream may stay quiet before rdmad
	// sends a heartbeat line: clients see the daemon is alive, and each
	// heartbeat is a write with a deadline, like an event.
	DefaultHeartbeat = 15 * time.Second
	// DefaultBuffer is how many events a client may fall behind before it
	// is dropped.
	DefaultBuffer = 256
	// DefaultWriteTimeout bounds one line's write to a client that stopped
	// reading.
	DefaultWriteTimeout = 10 * time.Second
)

// Errors of Subscribe.
var (
	ErrTooManyClients = errors.New("watch: too many watchers")
	ErrTooManyForUID  = errors.New("watch: too many watchers of this uid")
	ErrStopped        = errors.New("watch: rdmad is stopping")
)

// unknownUID is the per-uid bucket of watchers without credentials.
const unknownUID = ^uint32(0)

// Options configure a Hub. Zero values mean the defaults.
type Options struct {
	// MaxClients is the general pool of watches, open to every peer.
	MaxClients int
	// Reserved watches beyond MaxClients are the admins' alone; they use
	// them first, then the general ones.
	Reserved int
	// MaxPerUID bounds the watches of one uid outside the admin group.
	MaxPerUID int
	Buffer    int
	// WriteTimeout bounds each line's write: a client whose socket buffer
	// stays full that long has stopped reading and is dropped.
	WriteTimeout time.Duration
	// Heartbeat is the quiet time after which a heartbeat line is sent.
	Heartbeat time.Duration
	// Logger gets a line for every client dropped; slog.Default() if nil.
	Logger *slog.Logger
	// Identify says who sent a request to ServeHTTP, for the bounds on
	// watches; the server that hands the hub its requests knows (the API
	// reads the peer's credentials at connect). Nil treats every request
	// as a peer without credentials outside the admin group.
	Identify func(*http.Request) Watcher
}

// A Hub turns the snapshots of a store into events for its clients.
type Hub struct {
	store state.Reader
	opts  Options
	done  chan struct{} // closed when Run returns

	mu      sync.Mutex
	prev    *apitype.Snapshot // the last snapshot diffed; its Seq starts new streams
	clients map[*Sub]struct{}
	perUID  map[uint32]int // watches of each non-admin uid
	admins  int            // watches of admins
	stopped bool
}

// A Watcher is who subscribes, for the bounds on watches.
type Watcher struct {
	// UID is the peer's uid.
	UID uint32
	// Known is false for a peer without credentials; all such peers share
	// one per-uid bound.
	Known bool
	// Admin is root, rdmad's own user or the admin group: not bounded per
	// uid, and the reserved watches are theirs.
	Admin bool
	// PID is the peer's pid, for logs only.
	PID int32
}

// A Sub is one client's subscription.
type Sub struct {
	// C delivers the client's events in order.
	C <-chan apitype.Event
	// Hello is the stream's first line: the snapshot after which C's
	// events start.
	Hello apitype.Event

	c       chan apitype.Event
	dropped chan struct{} // closed when the hub dropped the client
	bounded bool          // counted in perUID under key
	key     uint32
	admin   bool // counted in admins
}

// Dropped returns a channel that is closed when the hub drops the client
// for falling more than Options.Buffer events behind.
func (s *Sub) Dropped() <-chan struct{} { return s.dropped }

// NewHub returns a Hub following store; it produces events once Run runs.
func NewHub(store state.Reader, opts Options) *Hub {
	if opts.MaxClients <= 0 {
		opts.MaxClients = DefaultMaxClients
	}
	if opts.Buffer <= 0 {
		opts.Buffer = DefaultBuffer
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = DefaultWriteTimeout
	}
	if opts.Reserved <= 0 {
		opts.Reserved = DefaultReserved
	}
	if opts.MaxPerUID <= 0 {
		opts.MaxPerUID = DefaultMaxPerUID
	}
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = DefaultHeartbeat
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Identify == nil {
		opts.Identify = func(*http.Request) Watcher { return Watcher{} }
	}
	return &Hub{store: store, opts: opts, done: make(chan struct{}), prev: store.Load(),
		clients: map[*Sub]struct{}{}, perUID: map[uint32]int{}}
}

// Done returns a channel that is closed when Run has returned.
func (h *Hub) Done() <-chan struct{} { return h.done }

// Run follows the store until ctx is cancelled. It is the hub's only
// goroutine; call it once.
func (h *Hub) Run(ctx context.Context) {
	defer func() {
		h.mu.Lock()
		h.stopped = true
		h.clients = map[*Sub]struct{}{}
		h.perUID = map[uint32]int{}
		h.admins = 0
		h.mu.Unlock()
		close(h.done)
	}()
	h.mu.Lock()
	prev := h.prev
	h.mu.Unlock()
	for {
		// Changed before Load: a snapshot published in between closes
		// the channel we hold, so nothing is missed.
		changed := h.store.Changed()
		if cur := h.store.Load(); cur.Seq != prev.Seq {
			h.publish(prev, cur)
			prev = cur
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

func (h *Hub) publish(prev, cur *apitype.Snapshot) {
	evs := state.Compare(prev, cur).Events(cur.Summary)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.prev = cur
	for s := range h.clients {
		for _, ev := range evs {
			select {
			case s.c <- ev:
			default:
				// Never wait for a client: drop it, and its handler
				// says so on the stream.
				h.remove(s)
				close(s.dropped)
			}
			if _, ok := h.clients[s]; !ok {
				break
			}
		}
	}
}

// Subscribe adds an in-process client, bounded by MaxClients only. Its
// events start after the snapshot in Hello.
func (h *Hub) Subscribe() (*Sub, error) {
	return h.subscribe(nil)
}

// SubscribeAs adds a client for w: an admin may use the reserved watches
// once MaxClients are taken; anyone else is bounded by MaxClients and by
// MaxPerUID for its uid.
func (h *Hub) SubscribeAs(w Watcher) (*Sub, error) {
	return h.subscribe(&w)
}

func (h *Hub) subscribe(w *Watcher) (*Sub, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return nil, ErrStopped
	}
	bounded, key := w != nil && !w.Admin, uint32(0)
	if bounded {
		key = w.UID
		if !w.Known {
			key = unknownUID
		}
		// The uid's own bound first: it is the one that peer can act on.
		if h.perUID[key] >= h.opts.MaxPerUID {
			return nil, ErrTooManyForUID
		}
	}
	// Admins use the reserved watches first and the general ones after,
	// so root's watches never take a reader's and readers never take
	// root's; all together never exceed MaxClients+Reserved.
	admin := w != nil && w.Admin
	if admin {
		if len(h.clients) >= h.opts.MaxClients+h.opts.Reserved {
			return nil, ErrTooManyClients
		}
	} else if len(h.clients)-h.admins+max(0, h.admins-h.opts.Reserved) >= h.opts.MaxClients {
		return nil, ErrTooManyClients
	}
	c := make(chan apitype.Event, h.opts.Buffer)
	s := &Sub{C: c, c: c, dropped: make(chan struct{}), bounded: bounded, key: key, admin: admin,
		Hello: apitype.Event{Seq: h.prev.Seq, Time: time.Now(), Type: apitype.EventHello,
			Message: fmt.Sprintf("rdmad %s is %s; events follow snapshot %d (GET /v1/status for the full state)", h.prev.Version, h.prev.State, h.prev.Seq)}}
	if bounded {
		h.perUID[key]++
	}
	if admin {
		h.admins++
	}
	h.clients[s] = struct{}{}
	return s, nil
}

// remove forgets s; h.mu is held.
func (h *Hub) remove(s *Sub) {
	if _, ok := h.clients[s]; !ok {
		return
	}
	delete(h.clients, s)
	if s.admin {
		h.admins--
	}
	if s.bounded {
		if h.perUID[s.key]--; h.perUID[s.key] <= 0 {
			delete(h.perUID, s.key)
		}
	}
}

// Unsubscribe removes a client; its channel receives nothing more.
func (h *Hub) Unsubscribe(s *Sub) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.remove(s)
}

// Clients returns the number of subscribed clients.
func (h *Hub) Clients() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.clients)
}

// ServeHTTP serves GET /v1/watch: the hello line, then one JSON event per
// line, flushed as it happens, and a heartbeat line after each quiet
// Options.Heartbeat, until the client goes away, stops reading (no line
// written within Options.WriteTimeout), falls behind (a final "dropped"
// line) or rdmad stops (a final "bye" line).
func (h *Hub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	who := h.opts.Identify(r)
	log := h.opts.Logger.With("uid", who.UID, "pid", who.PID)
	if !who.Known {
		log = h.opts.Logger.With("uid", "unknown")
	}
	s, err := h.SubscribeAs(who)
	if err != nil {
		var msg string
		switch {
		case errors.Is(err, ErrStopped):
			msg = "rdmad is stopping; reconnect when it is back"
		case errors.Is(err, ErrTooManyForUID):
			msg = fmt.Sprintf("uid %d already has %d watches open, the limit for a user outside [daemon] admin_group; close one of them or poll GET /v1/status instead",
				who.UID, h.opts.MaxPerUID)
		case who.Admin:
			msg = fmt.Sprintf("%d clients already watch rdmad (the limit, including %d reserved for root and [daemon] admin_group); close one or poll GET /v1/status instead",
				h.opts.MaxClients+h.opts.Reserved, h.opts.Reserved)
		default:
			msg = fmt.Sprintf("%d clients already watch rdmad (the limit for users outside [daemon] admin_group); close one or poll GET /v1/status instead",
				h.opts.MaxClients)
		}
		// A refusal costs the peer a request on a bounded connection, so
		// it is not worth a warning each time.
		log.Debug("watch: refused a watcher", "reason", msg)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "5")
		w.WriteHeader(http.StatusServiceUnavailable)
		json.NewEncoder(w).Encode(apitype.ErrorBody{Error: msg})
		return
	}
	defer h.Unsubscribe(s)

	rc := http.NewResponseController(w)
	// The API server's ReadTimeout would cancel the request once it
	// expires, ending every stream after a few seconds: lift it here.
	// Nothing more is read from a watch connection.
	_ = rc.SetReadDeadline(time.Time{})
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)

	// The heartbeat timer restarts with every line written, so a busy
	// stream carries no heartbeats.
	heartbeat := time.NewTimer(h.opts.Heartbeat)
	defer heartbeat.Stop()
	sent := s.Hello.Seq // seq of the last event written
	write := func(ev apitype.Event, timeout time.Duration) error {
		b, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		// A deadline per line: a client that does not read fills its
		// socket buffer, the write blocks, and the deadline drops it
		// instead of letting it hold this goroutine and its watch forever.
		_ = rc.SetWriteDeadline(time.Now().Add(timeout))
		if _, err := w.Write(append(b, '\n')); err != nil {
			return err
		}
		if err := rc.Flush(); err != nil {
			return err
		}
		sent = ev.Seq
		heartbeat.Reset(h.opts.Heartbeat)
		return nil
	}
	// send writes an event and says whether the stream goes on.
	send := func(ev apitype.Event) bool {
		err := write(ev, h.opts.WriteTimeout)
		switch {
		case err == nil:
			return true
		case errors.Is(err, os.ErrDeadlineExceeded):
			log.Warn("watch: dropped a client that stopped reading", "timeout", h.opts.WriteTimeout,
				"seq", sent, "event", ev.Type)
		case r.Context().Err() == nil:
			log.Debug("watch: client went away", "err", err)
		}
		return false
	}
	final := func(typ, msg string) {
		// Short: the client may be the reason we stop.
		_ = write(apitype.Event{Seq: sent, Time: time.Now(), Type: typ, Message: msg}, time.Second)
	}

	if !send(s.Hello) {
		return
	}
	for {
		select {
		case ev := <-s.C:
			if !send(ev) {
				return
			}
		case <-heartbeat.C:
			if !send(apitype.Event{Seq: sent, Time: time.Now(), Type: apitype.EventHeartbeat}) {
				return
			}
		case <-s.dropped:
			log.Warn("watch: dropped a client that fell behind", "behind", h.opts.Buffer, "seq", sent)
			final(apitype.EventDropped, fmt.Sprintf("this client fell more than %d events behind and is dropped; the last event sent was from snapshot %d: reconnect and read GET /v1/status to resync",
				h.opts.Buffer, sent))
			return
		case <-h.done:
			for drained := false; !drained; {
				select {
				case ev := <-s.C:
					if write(ev, time.Second) != nil {
						return
					}
				default:
					drained = true
				}
			}
			final(apitype.EventBye, "rdmad is stopping")
			return
		case <-r.Context().Done():
			return
		}
	}
}
