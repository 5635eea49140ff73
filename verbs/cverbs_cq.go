//go:build linux && cgo && !verbsfake

package verbs

/*
#include <infiniband/verbs.h>
#include <stdlib.h>

// The functions below wrap libibverbs entry points that are static inline
// functions or macros (not callable from cgo) and build work requests on
// the C stack, so no Go pointer is ever kept by C.

static int rdmad_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq) {
	void *ctx;
	if (ibv_get_cq_event(ch, cq, &ctx) != 0) return -1;
	ibv_ack_cq_events(*cq, 1);
	return 0;
}

static int rdmad_req_notify_cq(struct ibv_cq *cq) { return ibv_req_notify_cq(cq, 0); }

static int rdmad_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc) { return ibv_poll_cq(cq, n, wc); }
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A CompChannel is a completion event channel: CQs attached to it signal
// completions through a pollable fd, so waiting costs nothing at idle.
type CompChannel struct {
	c    *Context
	ch   *C.struct_ibv_comp_channel
	id   uint64
	file *os.File // non-blocking dup of ch->fd, registered with the poller
	wait sync.WaitGroup
	mu   sync.Mutex
	cqs  map[*C.struct_ibv_cq]*CQ
}

// NewCompChannel creates a completion channel.
func (c *Context) NewCompChannel() (*CompChannel, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	ch, err := C.ibv_create_comp_channel(c.ctx)
	if ch == nil {
		return nil, &Error{Verb: "ibv_create_comp_channel", Object: c.name, Err: errnoOf(0, err)}
	}
	fd := int(ch.fd)
	// (unix.SetNonblock is rdmad_set_nonblock of cverbs.go: F_GETFL, then
	// F_SETFL with O_NONBLOCK added.)
	if err := unix.SetNonblock(fd, true); err != nil {
		C.ibv_destroy_comp_channel(ch)
		return nil, &Error{Verb: "fcntl O_NONBLOCK", Object: "completion channel of " + c.name, Err: err}
	}
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		C.ibv_destroy_comp_channel(ch)
		return nil, &Error{Verb: "dup", Object: "completion channel of " + c.name, Err: err}
	}
	cc := &CompChannel{c: c, ch: ch, file: os.NewFile(uintptr(dup), c.name+"-comp"), cqs: make(map[*C.struct_ibv_cq]*CQ)}
	id, err := c.add(cc.destroy)
	if err != nil {
		cc.file.Close()
		C.ibv_destroy_comp_channel(ch)
		return nil, err
	}
	cc.id = id
	return cc, nil
}

// Wait blocks until a CQ attached to ch has a completion event, and returns
// that CQ (the event is acknowledged). It returns ctx.Err() when ctx is done
// and ErrClosed when ch is closed.
func (ch *CompChannel) Wait(ctx context.Context) (*CQ, error) {
	ch.mu.Lock()
	if ch.ch == nil {
		ch.mu.Unlock()
		return nil, fmt.Errorf("verbs: wait on completion channel of %s: %w", ch.c.name, ErrClosed)
	}
	ch.wait.Add(1)
	ch.mu.Unlock()
	defer ch.wait.Done()

	rc, err := ch.file.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("verbs: wait on completion channel of %s: %w", ch.c.name, err)
	}
	stop := context.AfterFunc(ctx, func() { ch.file.SetReadDeadline(time.Unix(1, 0)) })
	defer func() {
		if !stop() {
			// The deadline was set; clear it for the next Wait.
			ch.file.SetReadDeadline(time.Time{})
		}
	}()
	var cq *C.struct_ibv_cq
	var cerr error
	err = rc.Read(func(uintptr) bool {
		var r C.int
		r, cerr = C.rdmad_get_cq_event(ch.ch, &cq)
		if r == 0 {
			cerr = nil
			return true
		}
		return !errors.Is(cerr, syscall.EAGAIN)
	})
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if err != nil {
		ch.mu.Lock()
		closed := ch.ch == nil
		ch.mu.Unlock()
		if closed || errors.Is(err, os.ErrClosed) {
			return nil, fmt.Errorf("verbs: wait on completion channel of %s: %w", ch.c.name, ErrClosed)
		}
		return nil, fmt.Errorf("verbs: wait on completion channel of %s: %w", ch.c.name, err)
	}
	if cerr != nil {
		return nil, &Error{Verb: "ibv_get_cq_event", Object: ch.c.name, Err: cerr}
	}
	ch.mu.Lock()
	g := ch.cqs[cq]
	ch.mu.Unlock()
	return g, nil
}

func (ch *CompChannel) destroy() error {
	ch.mu.Lock()
	if ch.ch == nil {
		ch.mu.Unlock()
		return nil
	}
	c := ch.ch
	ch.ch = nil
	ch.mu.Unlock()
	ch.file.Close() // wakes waiters
	ch.wait.Wait()
	if r, err := C.ibv_destroy_comp_channel(c); r != 0 {
		return &Error{Verb: "ibv_destroy_comp_channel", Object: ch.c.name, Err: errnoOf(int(r), err), Hint: "close its CQs first"}
	}
	return nil
}

// Close destroys the channel; waits in progress return ErrClosed. Its CQs
// must be closed first.
func (ch *CompChannel) Close() error {
	ch.c.remove(ch.id)
	return ch.destroy()
}

// A CQ is a completion queue.
type CQ struct {
	c   *Context
	cq  *C.struct_ibv_cq
	ch  *CompChannel
	id  uint64
	wc  *C.struct_ibv_wc // C array of wcN entries: no Go pointer reaches C
	wcN int
}

// NewCQ creates a completion queue with at least cqe entries, attached to
// ch (which may be nil for a CQ that is only polled).
func (c *Context) NewCQ(cqe int, ch *CompChannel) (*CQ, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	var cch *C.struct_ibv_comp_channel
	if ch != nil {
		cch = ch.ch
	}
	cq, err := C.ibv_create_cq(c.ctx, C.int(cqe), nil, cch, 0)
	if cq == nil {
		return nil, &Error{Verb: "ibv_create_cq", Object: fmt.Sprintf("%d entries on %s", cqe, c.name), Err: errnoOf(0, err), Hint: "check max_cqe and max_cq of the device"}
	}
	const wcN = 16
	q := &CQ{c: c, cq: cq, ch: ch, wcN: wcN}
	q.wc = (*C.struct_ibv_wc)(C.calloc(wcN, C.size_t(unsafe.Sizeof(C.struct_ibv_wc{}))))
	id, err := c.add(q.destroy)
	if err != nil {
		C.ibv_destroy_cq(cq)
		C.free(unsafe.Pointer(q.wc))
		return nil, err
	}
	q.id = id
	if ch != nil {
		ch.mu.Lock()
		ch.cqs[cq] = q
		ch.mu.Unlock()
	}
	return q, nil
}

func (q *CQ) destroy() error {
	if q.cq == nil {
		return nil
	}
	if q.ch != nil {
		q.ch.mu.Lock()
		delete(q.ch.cqs, q.cq)
		q.ch.mu.Unlock()
	}
	r, err := C.ibv_destroy_cq(q.cq)
	q.cq = nil
	C.free(unsafe.Pointer(q.wc))
	q.wc = nil
	if r != 0 {
		return &Error{Verb: "ibv_destroy_cq", Object: q.c.name, Err: errnoOf(int(r), err), Hint: "close its QPs first"}
	}
	return nil
}

// Close destroys the completion queue.
func (q *CQ) Close() error {
	q.c.remove(q.id)
	return q.destroy()
}

// WCGRH must equal IBV_WC_GRH: either array length is negative (a compile
// error) if they differ.
var (
	_ [C.IBV_WC_GRH - WCGRH]struct{}
	_ [WCGRH - C.IBV_WC_GRH]struct{}
)

// Poll moves up to len(out) completions into out and returns how many.
func (q *CQ) Poll(out []WorkCompletion) (int, error) {
	if q.cq == nil {
		return 0, fmt.Errorf("verbs: poll CQ of %s: %w", q.c.name, ErrClosed)
	}
	n := min(len(out), q.wcN)
	r := int(C.rdmad_poll_cq(q.cq, C.int(n), q.wc))
	if r < 0 {
		return 0, q.pollError()
	}
	q.convert(out, r)
	return r, nil
}

func (q *CQ) pollError() error {
	return &Error{Verb: "ibv_poll_cq", Object: q.c.name, Err: syscall.EIO, Hint: "the CQ overran or the device failed; recreate it"}
}

// convert copies the first r completions of the CQ's C buffer into out.
func (q *CQ) convert(out []WorkCompletion, r int) {
	wcs := unsafe.Slice(q.wc, q.wcN)
	for i := 0; i < r; i++ {
		w := &wcs[i]
		out[i] = WorkCompletion{
			WRID: uint64(w.wr_id), Status: WCStatus(w.status), Opcode: int(w.opcode),
			ByteLen: uint32(w.byte_len), QPNum: uint32(w.qp_num), SrcQP: uint32(w.src_qp), VendErr: uint32(w.vendor_err),
			Flags: uint32(w.wc_flags),
		}
		if w.status != C.IBV_WC_SUCCESS {
			out[i].StatusText = C.GoString(C.ibv_wc_status_str(w.status))
		}
	}
}

// ReqNotify arms the CQ: the next completion signals its channel.
func (q *CQ) ReqNotify() error {
	if q.cq == nil {
		return fmt.Errorf("verbs: arm CQ of %s: %w", q.c.name, ErrClosed)
	}
	if r := C.rdmad_req_notify_cq(q.cq); r != 0 {
		return &Error{Verb: "ibv_req_notify_cq", Object: q.c.name, Err: errnoOf(int(r), nil)}
	}
	return nil
}
