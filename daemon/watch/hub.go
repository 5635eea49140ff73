package watch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/rdmad/rdmad/daemon/api"
	"github.com/rdmad/rdmad/daemon/state"
)

// Defaults of Options.
const (
	// DefaultMaxClients stays well below api.MaxConns so that watchers
	// cannot take every connection of the API.
	DefaultMaxClients = 32
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
	ErrStopped        = errors.New("watch: rdmad is stopping")
)

// Options configure a Hub. Zero values mean the defaults.
type Options struct {
	MaxClients   int
	Buffer       int
	WriteTimeout time.Duration
	// Observers are called by the hub's goroutine with every snapshot it
	// sees, in order (for derived metrics such as failed reloads). They
	// must not block.
	Observers []func(*state.Snapshot)
}

// A Hub turns the snapshots of a Store into events for its clients.
type Hub struct {
	store *state.Store
	opts  Options
	done  chan struct{} // closed when Run returns

	mu      sync.Mutex
	prev    *state.Snapshot // the last snapshot diffed; its Seq starts new streams
	clients map[*Sub]struct{}
	stopped bool
}

// A Sub is one client's subscription.
type Sub struct {
	// C delivers the client's events in order.
	C <-chan Event
	// Hello is the stream's first line: the snapshot after which C's
	// events start.
	Hello Event

	c       chan Event
	dropped chan struct{} // closed when the hub dropped the client
}

// Dropped returns a channel that is closed when the hub drops the client
// for falling more than Options.Buffer events behind.
func (s *Sub) Dropped() <-chan struct{} { return s.dropped }

// NewHub returns a Hub following store; it produces events once Run runs.
func NewHub(store *state.Store, opts Options) *Hub {
	if opts.MaxClients <= 0 {
		opts.MaxClients = DefaultMaxClients
	}
	if opts.Buffer <= 0 {
		opts.Buffer = DefaultBuffer
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = DefaultWriteTimeout
	}
	return &Hub{store: store, opts: opts, done: make(chan struct{}), prev: store.Load(), clients: map[*Sub]struct{}{}}
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
		h.mu.Unlock()
		close(h.done)
	}()
	h.mu.Lock()
	prev := h.prev
	h.mu.Unlock()
	for _, o := range h.opts.Observers {
		o(prev)
	}
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

func (h *Hub) publish(prev, cur *state.Snapshot) {
	for _, o := range h.opts.Observers {
		o(cur)
	}
	evs := Diff(prev, cur)
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
				delete(h.clients, s)
				close(s.dropped)
			}
			if _, ok := h.clients[s]; !ok {
				break
			}
		}
	}
}

// Subscribe adds a client. Its events start after the snapshot in Hello.
func (h *Hub) Subscribe() (*Sub, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return nil, ErrStopped
	}
	if len(h.clients) >= h.opts.MaxClients {
		return nil, ErrTooManyClients
	}
	c := make(chan Event, h.opts.Buffer)
	s := &Sub{C: c, c: c, dropped: make(chan struct{}),
		Hello: Event{Seq: h.prev.Seq, Time: time.Now(), Type: Hello,
			Message: fmt.Sprintf("rdmad %s is %s; events follow snapshot %d (GET /v1/status for the full state)", h.prev.Version, h.prev.State, h.prev.Seq)}}
	h.clients[s] = struct{}{}
	return s, nil
}

// Unsubscribe removes a client; its channel receives nothing more.
func (h *Hub) Unsubscribe(s *Sub) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.clients, s)
}

// Clients returns the number of subscribed clients.
func (h *Hub) Clients() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.clients)
}

// ServeHTTP serves GET /v1/watch: the hello line, then one JSON event per
// line, flushed as it happens, until the client goes away, falls behind
// (a final "dropped" line) or rdmad stops (a final "bye" line).
func (h *Hub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s, err := h.Subscribe()
	if err != nil {
		msg := fmt.Sprintf("%d clients already watch rdmad (the limit); close one or poll GET /v1/status instead", h.opts.MaxClients)
		if errors.Is(err, ErrStopped) {
			msg = "rdmad is stopping; reconnect when it is back"
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "5")
		w.WriteHeader(http.StatusServiceUnavailable)
		json.NewEncoder(w).Encode(api.ErrorBody{Error: msg})
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

	sent := s.Hello.Seq // seq of the last event written
	write := func(ev Event, timeout time.Duration) error {
		b, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		_ = rc.SetWriteDeadline(time.Now().Add(timeout))
		if _, err := w.Write(append(b, '\n')); err != nil {
			return err
		}
		if err := rc.Flush(); err != nil {
			return err
		}
		sent = ev.Seq
		return nil
	}
	final := func(typ, msg string) {
		// Short: the client may be the reason we stop.
		_ = write(Event{Seq: sent, Time: time.Now(), Type: typ, Message: msg}, time.Second)
	}

	if write(s.Hello, h.opts.WriteTimeout) != nil {
		return
	}
	for {
		select {
		case ev := <-s.C:
			if write(ev, h.opts.WriteTimeout) != nil {
				return
			}
		case <-s.dropped:
			final(Dropped, fmt.Sprintf("this client fell more than %d events behind and is dropped; the last event sent was from snapshot %d: reconnect and read GET /v1/status to resync",
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
			final(Bye, "rdmad is stopping")
			return
		case <-r.Context().Done():
			return
		}
	}
}
