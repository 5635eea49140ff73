//go:build linux && verbsfake

package verbs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"
)

// A CompChannel is a completion channel of the fake NIC: an eventfd with
// one count per event, and the queue of the CQs those events are for.
type CompChannel struct {
	c    *Context
	id   uint64
	file *os.File
	wait sync.WaitGroup

	// Guarded by fab.mu.
	dead   bool
	cqs    int   // CQs attached
	events []*CQ // one per count of the eventfd; nil for a CQ since closed
}

// NewCompChannel creates a completion channel.
func (c *Context) NewCompChannel() (*CompChannel, error) {
	fab.mu.Lock()
	defer fab.mu.Unlock()
	if err := c.usable("ibv_create_comp_channel"); err != nil {
		return nil, err
	}
	f, err := newEventFile(c.name + "-comp")
	if err != nil {
		return nil, &Error{Verb: "eventfd", Object: "completion channel of " + c.name, Err: err}
	}
	ch := &CompChannel{c: c, file: f}
	id, err := c.add(ch.destroy)
	if err != nil {
		f.Close()
		return nil, err
	}
	ch.id = id
	fab.live["channel"]++
	return ch, nil
}

// signal queues an event for q. Called with fab.mu held.
func (ch *CompChannel) signal(q *CQ) {
	if ch.dead {
		return
	}
	ch.events = append(ch.events, q)
	ch.file.Write(one[:])
}

// Wait blocks until a CQ attached to ch has a completion event, and returns
// that CQ. It returns ctx.Err() when ctx is done and ErrClosed when ch is
// closed.
func (ch *CompChannel) Wait(ctx context.Context) (*CQ, error) {
	fab.mu.Lock()
	if ch.dead {
		fab.mu.Unlock()
		return nil, fmt.Errorf("verbs: wait on completion channel of %s: %w", ch.c.name, ErrClosed)
	}
	ch.wait.Add(1)
	fab.mu.Unlock()
	defer ch.wait.Done()

	rc, err := ch.file.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("verbs: wait on completion channel of %s: %w", ch.c.name, err)
	}
	stop := context.AfterFunc(ctx, func() { ch.file.SetReadDeadline(time.Unix(1, 0)) })
	defer func() {
		if !stop() {
			ch.file.SetReadDeadline(time.Time{})
		}
	}()
	var cerr error
	err = rc.Read(func(fd uintptr) bool { return readEvent(fd, &cerr) })
	var q *CQ
	if err == nil && cerr == nil {
		fab.mu.Lock()
		if len(ch.events) > 0 { // else destroy emptied it after the read
			q, ch.events = ch.events[0], ch.events[1:]
		}
		fab.mu.Unlock()
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if err != nil {
		fab.mu.Lock()
		dead := ch.dead
		fab.mu.Unlock()
		if dead || errors.Is(err, os.ErrClosed) {
			return nil, fmt.Errorf("verbs: wait on completion channel of %s: %w", ch.c.name, ErrClosed)
		}
		return nil, fmt.Errorf("verbs: wait on completion channel of %s: %w", ch.c.name, err)
	}
	if cerr != nil {
		return nil, &Error{Verb: "read completion eventfd", Object: ch.c.name, Err: cerr}
	}
	return q, nil
}

func (ch *CompChannel) destroy() error {
	fab.mu.Lock()
	if ch.dead {
		fab.mu.Unlock()
		return nil
	}
	if ch.cqs > 0 {
		if !ch.c.closed {
			ch.c.children[ch.id] = ch.destroy
		}
		fab.mu.Unlock()
		return &Error{Verb: "ibv_destroy_comp_channel", Object: ch.c.name, Err: syscall.EBUSY, Hint: "close its CQs first"}
	}
	ch.dead = true
	ch.events = nil
	fab.live["channel"]--
	fab.mu.Unlock()
	ch.file.Close() // wakes waiters
	ch.wait.Wait()
	return nil
}

// Close destroys the channel; waits in progress return ErrClosed. Its CQs
// must be closed first.
func (ch *CompChannel) Close() error {
	fab.mu.Lock()
	ch.c.remove(ch.id)
	fab.mu.Unlock()
	return ch.destroy()
}

// A CQ is a completion queue of the fake NIC.
type CQ struct {
	c  *Context
	ch *CompChannel
	id uint64

	// Guarded by fab.mu.
	cap     int
	wcs     []WorkCompletion
	armed   bool
	overrun bool
	qps     int // QPs using it
	dead    bool
}

// NewCQ creates a completion queue with cqe entries, attached to ch (which
// may be nil for a CQ that is only polled). More completions than cqe
// waiting overrun it, as on hardware: Poll fails from then on.
func (c *Context) NewCQ(cqe int, ch *CompChannel) (*CQ, error) {
	fab.mu.Lock()
	defer fab.mu.Unlock()
	if err := c.usable("ibv_create_cq"); err != nil {
		return nil, err
	}
	if cqe < 1 || cqe > 1<<16 || (ch != nil && (ch.dead || ch.c != c)) {
		return nil, &Error{Verb: "ibv_create_cq", Object: fmt.Sprintf("%d entries on %s", cqe, c.name), Err: syscall.EINVAL, Hint: "check max_cqe and max_cq of the device"}
	}
	q := &CQ{c: c, ch: ch, cap: cqe}
	id, err := c.add(q.destroy)
	if err != nil {
		return nil, err
	}
	q.id = id
	if ch != nil {
		ch.cqs++
	}
	fab.live["cq"]++
	return q, nil
}

func (q *CQ) destroy() error {
	fab.mu.Lock()
	defer fab.mu.Unlock()
	if q.dead {
		return nil
	}
	if q.qps > 0 {
		if !q.c.closed {
			q.c.children[q.id] = q.destroy
		}
		return &Error{Verb: "ibv_destroy_cq", Object: q.c.name, Err: syscall.EBUSY, Hint: "close its QPs first"}
	}
	q.dead = true
	q.wcs = nil
	if q.ch != nil {
		q.ch.cqs--
		for i, e := range q.ch.events {
			if e == q {
				q.ch.events[i] = nil
			}
		}
	}
	fab.live["cq"]--
	return nil
}

// Close destroys the completion queue.
func (q *CQ) Close() error {
	fab.mu.Lock()
	q.c.remove(q.id)
	fab.mu.Unlock()
	return q.destroy()
}

// push adds a completion and signals the channel of an armed CQ. Called
// with fab.mu held.
func (q *CQ) push(wc WorkCompletion) {
	if q.dead || q.overrun {
		return
	}
	if len(q.wcs) >= q.cap {
		q.overrun = true
		q.c.event(AsyncEvent{Type: EventCQErr})
		return
	}
	if wc.Status != WCSuccess {
		wc.StatusText = wcStatusText(wc.Status)
	}
	q.wcs = append(q.wcs, wc)
	if q.armed && q.ch != nil {
		q.armed = false
		q.ch.signal(q)
	}
}

// Poll moves up to len(out) completions into out and returns how many.
func (q *CQ) Poll(out []WorkCompletion) (int, error) {
	fab.mu.Lock()
	defer fab.mu.Unlock()
	return q.pollLocked(out)
}

func (q *CQ) pollLocked(out []WorkCompletion) (int, error) {
	if q.dead {
		return 0, fmt.Errorf("verbs: poll CQ of %s: %w", q.c.name, ErrClosed)
	}
	if q.overrun {
		return 0, &Error{Verb: "ibv_poll_cq", Object: q.c.name, Err: syscall.EIO, Hint: "the CQ overran or the device failed; recreate it"}
	}
	n := copy(out, q.wcs)
	q.wcs = q.wcs[:copy(q.wcs, q.wcs[n:])]
	return n, nil
}

// ReqNotify arms the CQ: the next completion signals its channel.
func (q *CQ) ReqNotify() error {
	fab.mu.Lock()
	defer fab.mu.Unlock()
	if q.dead {
		return fmt.Errorf("verbs: arm CQ of %s: %w", q.c.name, ErrClosed)
	}
	q.armed = true
	return nil
}

// wcStatusText is ibv_wc_status_str.
func wcStatusText(s WCStatus) string {
	texts := [...]string{"success", "local length error", "local QP operation error", "local EE context operation error",
		"local protection error", "Work Request Flushed Error", "memory management operation error", "bad response error",
		"local access error", "remote invalid request error", "remote access error", "remote operation error",
		"transport retry counter exceeded", "RNR retry counter exceeded", "local RDD violation error",
		"remote invalid RD request", "operation aborted", "invalid EE context number", "invalid EE context state",
		"fatal error", "response timeout error", "general error"}
	if s >= 0 && int(s) < len(texts) {
		return texts[s]
	}
	return "unknown"
}

// Work completion statuses the fake NIC produces (enum ibv_wc_status).
const (
	wcLocLenErr   WCStatus = 1
	wcLocProtErr  WCStatus = 4
	wcRemInvReq   WCStatus = 9
	wcRemAccess   WCStatus = 10
	wcRetryExc    WCStatus = 12
	wcFatalStatus WCStatus = 19
)
