package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/internal/throttle"
)

// A Class is how the connection limits treat a peer. The listener decides it
// once, from the credentials the kernel captured at connect; it does not
// change for the life of the connection.
type Class int

const (
	// ClassUnknown: the connection did not come through Serve's listener
	// (a test server, another http.Server). Treat it as ClassLimited.
	ClassUnknown Class = iota
	// ClassLimited is everyone but root and the admins: bounded per uid,
	// general slots only, keep-alive connections recycled.
	ClassLimited
	// ClassAdmin is root, rdmad's own user and the admin group: not bounded
	// per uid, and the reserved slots are theirs alone, so that nothing a
	// reader does can lock them out.
	ClassAdmin
)

func (c Class) String() string {
	switch c {
	case ClassLimited:
		return "limited"
	case ClassAdmin:
		return "admin"
	}
	return "unknown"
}

// classify is the one place where the connection limits ask the access
// policy who a peer is.
func (s *Server) classify(p Peer) Class {
	if s.isAdmin(p) {
		return ClassAdmin
	}
	return ClassLimited
}

// SetLogger sets where the connection limits log refusals (the default is
// slog.Default()). Call it before Serve.
func (s *Server) SetLogger(l *slog.Logger) { s.log = l }

// limits bounds what peers can hold; Serve uses the constants of server.go.
type limits struct {
	// General is the pool every peer draws from.
	General int
	// Reserved slots are the admins' alone; they use them first, then
	// the General pool.
	Reserved int
	// PerUID bounds one limited uid's connections (admins are not bounded).
	PerUID int
	// MaxAge recycles a limited peer's keep-alive connection: the first
	// answer after it answers with "Connection: close". Together with the
	// server's IdleTimeout, no limited connection lives forever.
	MaxAge time.Duration
	// WriteTimeout bounds writing one answer to a limited peer that does
	// not read it (handlers that stream, like watch, set their own).
	WriteTimeout time.Duration
}

// defaultLimits are Serve's, from the constants of server.go.
func defaultLimits() limits {
	return limits{General: MaxConns, Reserved: ReservedConns, PerUID: MaxConnsPerUID,
		MaxAge: LimitedConnMaxAge, WriteTimeout: LimitedWriteTimeout}
}

const (
	// refuseLinger bounds how long a refused connection is kept to read
	// the client's request before the 503 is written. The answer must
	// come after the request: an HTTP client drops an answer that arrives
	// before it sent its request (Go's: "unsolicited response"), and a
	// client whose peer closed before it wrote gets EPIPE, not our answer.
	// An honest client sends its request at once, so this ends in
	// microseconds; only a client that sends nothing holds it that long.
	refuseLinger = time.Second
	// maxLingering and maxLingeringPerUID bound the refused connections
	// being answered at once (a goroutine and a descriptor each), overall
	// and for one uid, so that one uid's idle flood cannot take the
	// answers from others. Beyond them a refused connection is closed
	// without an answer: its uid is flooding.
	maxLingering       = 64
	maxLingeringPerUID = 4
	// refusalLogEvery rate-limits the log line about refused connections,
	// so that a flood does not flood the journal too.
	refusalLogEvery = 10 * time.Second
)

// unknownUID is the per-uid bucket of peers without credentials: they share
// one bound instead of passing as uid 0.
const unknownUID = ^uint32(0)

// A limitListener accepts every connection at once, reads its peer's
// credentials, and refuses (503, then close) a connection beyond its
// peer's bounds. It never waits for a slot: a listener that blocked would
// leave root's connection in the kernel's backlog behind a reader's flood.
type limitListener struct {
	net.Listener
	lim      limits
	classify func(Peer) Class
	log      *slog.Logger

	mu        sync.Mutex
	admins    int            // connections held by admins
	limited   int            // connections held by everyone else
	perUID    map[uint32]int // connections held by each limited uid
	lingering map[uint32]int // refused connections still open, per uid
	lingers   int            // their sum
	closed    bool           // no refusal starts after Close
	wg        sync.WaitGroup // refusals in progress
	closeOnce sync.Once

	// refusals lets one refusal log line through every refusalLogEvery.
	refusals *throttle.Log[struct{}]
}

func newLimitListener(ln net.Listener, lim limits, classify func(Peer) Class, log *slog.Logger) *limitListener {
	if log == nil {
		log = slog.Default()
	}
	return &limitListener{Listener: ln, lim: lim, classify: classify, log: log,
		perUID: map[uint32]int{}, lingering: map[uint32]int{}, refusals: throttle.NewLog[struct{}](refusalLogEvery)}
}

// Accept returns the next connection within its peer's bounds. Reading
// SO_PEERCRED right after accept needs the *net.UnixConn, which a wrapper
// from elsewhere would hide, so it happens here.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		p := peerOf(c)
		class := l.classify(p)
		key := p.UID
		if !p.Known {
			key = unknownUID
		}
		if why := l.admit(class, key); why != "" {
			l.refuse(c, p, key, why)
			continue
		}
		pc := &peerConn{Conn: c, peer: p, class: class, since: time.Now()}
		pc.release = func() { l.release(class, key) }
		return pc, nil
	}
}

// admit takes a slot for a peer of class with per-uid key, or says why not
// in words the peer can act on.
//
// Admins use the reserved slots first and the general pool after them, so
// that root's own connections never take a reader's slot and readers never
// take root's; all together never hold more than General+Reserved.
func (l *limitListener) admit(class Class, key uint32) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if class == ClassAdmin {
		if l.admins+l.limited >= l.lim.General+l.lim.Reserved {
			return fmt.Sprintf("rdmad holds %d connections, its limit including the %d reserved for root and [daemon] admin_group; close idle clients (rdmactl watch, scripts) and retry",
				l.admins+l.limited, l.lim.Reserved)
		}
		l.admins++
		return ""
	}
	if n := l.perUID[key]; n >= l.lim.PerUID {
		who := fmt.Sprintf("uid %d", key)
		if key == unknownUID {
			who = "peers without credentials"
		}
		return fmt.Sprintf("%s already holds %d connections to rdmad, the limit for a user outside [daemon] admin_group; close some of its clients (watches, keep-alive connections) and retry, or run the command as root or an admin_group member",
			who, n)
	}
	if l.limited+max(0, l.admins-l.lim.Reserved) >= l.lim.General {
		return fmt.Sprintf("rdmad already serves %d connections, the limit for users outside [daemon] admin_group; retry later, or run the command as root or an admin_group member (they have %d reserved connections)",
			l.lim.General, l.lim.Reserved)
	}
	l.limited++
	l.perUID[key]++
	return ""
}

func (l *limitListener) release(class Class, key uint32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if class == ClassAdmin {
		l.admins--
		return
	}
	l.limited--
	if l.perUID[key]--; l.perUID[key] <= 0 {
		delete(l.perUID, key)
	}
}

// refuse answers 503 with why and closes c, without ever making Accept
// wait: a goroutine reads the request and answers (see refuseLinger), if
// key's share of them allows; otherwise c is closed at once.
func (l *limitListener) refuse(c net.Conn, p Peer, key uint32, why string) {
	l.logRefusal(p, why)
	l.mu.Lock()
	if l.closed || l.lingers >= maxLingering || l.lingering[key] >= maxLingeringPerUID {
		l.mu.Unlock()
		c.Close()
		return
	}
	l.lingers++
	l.lingering[key]++
	l.wg.Add(1)
	l.mu.Unlock()
	go func() {
		defer l.wg.Done()
		answerRefused(c, why)
		l.mu.Lock()
		l.lingers--
		if l.lingering[key]--; l.lingering[key] <= 0 {
			delete(l.lingering, key)
		}
		l.mu.Unlock()
	}()
}

// answerRefused reads a refused client's request headers (until their end,
// the client's end or refuseLinger), answers 503 with why, and closes c.
func answerRefused(c net.Conn, why string) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(refuseLinger))
	var got []byte
	buf := make([]byte, 4096)
	for len(got) < MaxHeaderBytes {
		n, err := c.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil || bytes.Contains(got, []byte("\r\n\r\n")) {
			break
		}
	}
	// A client that sent nothing gets the answer too, once it is late:
	// it may be about to write.
	_ = c.SetWriteDeadline(time.Now().Add(refuseLinger))
	body, _ := json.Marshal(apitype.ErrorBody{Error: why})
	body = append(body, '\n')
	fmt.Fprintf(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: %d\r\nRetry-After: 5\r\nConnection: close\r\n\r\n%s", len(body), body)
}

func (l *limitListener) logRefusal(p Peer, why string) {
	ok, earlier := l.refusals.Allow(struct{}{}, time.Now())
	if !ok {
		return
	}
	uid := fmt.Sprint(p.UID)
	if !p.Known {
		uid = "unknown"
	}
	l.log.Warn("api: refused a connection over its limit", "uid", uid, "pid", p.PID, "reason", why,
		"refused_unlogged", earlier)
}

// Close stops accepting and waits for the refusals in progress (each ends
// within refuseLinger), so that none outlives Serve.
func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() {
		l.mu.Lock()
		l.closed = true
		l.mu.Unlock()
		l.wg.Wait()
	})
	return err
}

// connContext is Serve's http.Server.ConnContext: the peer (for the access
// checks) and the connection's class and age (for the limits).
func connContext(ctx context.Context, c net.Conn) context.Context {
	ctx = ConnContext(ctx, c)
	if pc, ok := c.(*peerConn); ok {
		ctx = context.WithValue(ctx, connKey{}, pc)
	}
	return ctx
}

type connKey struct{}

// ClassFrom returns the Class the listener gave the request's connection;
// ClassUnknown for a connection that did not come through Serve.
func ClassFrom(ctx context.Context) Class {
	if pc, ok := ctx.Value(connKey{}).(*peerConn); ok {
		return pc.class
	}
	return ClassUnknown
}

// limitHandler applies the per-request limits of limited connections: a
// write deadline for the answer, and "Connection: close" once the
// connection is older than MaxAge, so that a reader cannot keep one
// connection forever by sending a request before each idle timeout.
func (l *limitListener) limitHandler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pc, ok := r.Context().Value(connKey{}).(*peerConn)
		if ok && pc.class != ClassAdmin {
			if l.lim.WriteTimeout > 0 {
				_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(l.lim.WriteTimeout))
			}
			if l.lim.MaxAge > 0 && time.Since(pc.since) >= l.lim.MaxAge {
				w.Header().Set("Connection", "close")
			}
		}
		h.ServeHTTP(w, r)
	})
}

// connState is Serve's http.Server.ConnState. Between requests it lifts the
// write deadline limitHandler set, so that the server's own answers to the
// next request (400, 431) are not cut by a deadline long past.
func connState(c net.Conn, st http.ConnState) {
	if pc, ok := c.(*peerConn); ok && st == http.StateIdle && pc.class != ClassAdmin {
		_ = pc.SetWriteDeadline(time.Time{})
	}
}

// A peerConn is an accepted connection with its peer's credentials and the
// slot it holds.
type peerConn struct {
	net.Conn
	peer    Peer
	class   Class
	since   time.Time
	once    sync.Once
	release func()
}

func (c *peerConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
