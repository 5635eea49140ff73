package api

import (
	"net"
	"sync"
)

// A limitListener accepts at most n connections at once and reads each
// one's peer credentials when it is accepted (a wrapper from elsewhere would
// hide the *net.UnixConn that SO_PEERCRED needs).
type limitListener struct {
	net.Listener
	sem  chan struct{}
	done chan struct{}
	once sync.Once
}

func newLimitListener(ln net.Listener, n int) *limitListener {
	return &limitListener{Listener: ln, sem: make(chan struct{}, n), done: make(chan struct{})}
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &peerConn{Conn: c, peer: peerOf(c), release: func() { <-l.sem }}, nil
}

func (l *limitListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// A peerConn is an accepted connection with its peer's credentials.
type peerConn struct {
	net.Conn
	peer    Peer
	once    sync.Once
	release func()
}

func (c *peerConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
