package metrics

import (
	"context"
	"net"
	"net/http"
	"sync"
)

// MaxTCPConns bounds the TCP listener's open connections. A connection
// beyond it closes the oldest connection that is not in a scrape (one that
// has not sent a complete request header yet, or sits idle between
// requests); only when every connection is mid-scrape is the new one
// closed. Closing the newest instead let 64 connections that sent nothing
// make 19 of 20 scrapes fail (#41 item 6).
const MaxTCPConns = 64

// MaxTCPConnsPerAddr bounds the connections of one client address. A
// client at its bound closes its own oldest connection not in a scrape,
// so that one address cannot push every other address's connections out
// of MaxTCPConns.
const MaxTCPConnsPerAddr = 8

// A connTracker is the TCP listener of Serve: it keeps its connections in
// the order they were accepted, counts them per client address, and makes
// room for a new one by closing the oldest that is not serving a request.
type connTracker struct {
	net.Listener
	max, perAddr int

	mu     sync.Mutex
	conns  []*trackedConn // accept order, oldest first
	byAddr map[string]int
}

func newConnTracker(ln net.Listener, max, perAddr int) *connTracker {
	return &connTracker{Listener: ln, max: max, perAddr: perAddr, byAddr: make(map[string]int)}
}

// A trackedConn is one accepted connection. busy (under the tracker's
// mutex) is set while a request is being served: from the handler's start
// (the header is complete) until the server reports the connection idle
// (the response is written), so that it is never closed mid-response.
type trackedConn struct {
	net.Conn
	t    *connTracker
	addr string
	busy bool
	gone bool // removed from the tracker
}

func (c *trackedConn) Close() error {
	c.t.remove(c)
	return c.Conn.Close()
}

func clientAddr(c net.Conn) string {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	host, _, err := net.SplitHostPort(c.RemoteAddr().String())
	if err != nil {
		return c.RemoteAddr().String()
	}
	return host
}

func (l *connTracker) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		tc := &trackedConn{Conn: c, t: l, addr: clientAddr(c)}
		var victims []*trackedConn
		ok := true
		l.mu.Lock()
		if l.byAddr[tc.addr] >= l.perAddr {
			v := l.oldestIdleLocked(tc.addr)
			if v == nil {
				ok = false
			} else {
				l.removeLocked(v)
				victims = append(victims, v)
			}
		}
		if ok && len(l.conns) >= l.max {
			v := l.oldestIdleLocked("")
			if v == nil {
				ok = false
			} else {
				l.removeLocked(v)
				victims = append(victims, v)
			}
		}
		if ok {
			l.conns = append(l.conns, tc)
			l.byAddr[tc.addr]++
		}
		l.mu.Unlock()
		for _, v := range victims {
			// Its server goroutine sees the read fail and returns.
			v.Conn.Close()
		}
		if ok {
			return tc, nil
		}
		c.Close()
	}
}

// oldestIdleLocked is the oldest connection not serving a request, of the
// client address addr, or of any address when addr is "".
func (l *connTracker) oldestIdleLocked(addr string) *trackedConn {
	for _, c := range l.conns {
		if !c.busy && (addr == "" || c.addr == addr) {
			return c
		}
	}
	return nil
}

func (l *connTracker) removeLocked(c *trackedConn) {
	if c.gone {
		return
	}
	c.gone = true
	for i, o := range l.conns {
		if o == c {
			l.conns = append(l.conns[:i], l.conns[i+1:]...)
			break
		}
	}
	if l.byAddr[c.addr]--; l.byAddr[c.addr] <= 0 {
		delete(l.byAddr, c.addr)
	}
}

func (l *connTracker) remove(c *trackedConn) {
	l.mu.Lock()
	l.removeLocked(c)
	l.mu.Unlock()
}

func (l *connTracker) setBusy(c *trackedConn, busy bool) {
	l.mu.Lock()
	c.busy = busy
	l.mu.Unlock()
}

type connKey struct{}

// connContext is the http.Server's ConnContext: it hands the connection
// to markBusy through the request's context.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*trackedConn); ok {
		return context.WithValue(ctx, connKey{}, tc)
	}
	return ctx
}

// connState is the http.Server's ConnState: a connection is idle again
// once its response is written.
func connState(c net.Conn, s http.ConnState) {
	if tc, ok := c.(*trackedConn); ok && (s == http.StateIdle || s == http.StateClosed || s == http.StateHijacked) {
		tc.t.setBusy(tc, false)
	}
}

// markBusy marks the connection of each request as serving it: its header
// is complete, so it is a scrape, not a connection holding a slot.
func markBusy(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tc, ok := r.Context().Value(connKey{}).(*trackedConn); ok {
			tc.t.setBusy(tc, true)
		}
		h.ServeHTTP(w, r)
	})
}
