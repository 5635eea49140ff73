//go:build linux && (cgo || verbsfake)

package verbs

import (
	"context"
	"slices"
	"syscall"
	"time"
)

// This file is shared by the cgo build and the fake NIC (verbsfake). Both
// have a CQ with Poll, ReqNotify and a completion channel whose Wait sleeps
// in the runtime's poller, so the fake's tests run this very PollWait.

// PollWait returns at least one completion, waiting for it. It first polls
// for up to spin (a probe's reply on a healthy port comes within tens of
// microseconds, faster than a wakeup through the poller), then arms the CQ
// and sleeps on its completion channel until ctx is done. With spin 0 it
// never busy-polls. The CQ must have a channel.
func (q *CQ) PollWait(ctx context.Context, out []WorkCompletion, spin time.Duration) (int, error) {
	if q.ch == nil {
		return q.Poll(out)
	}
	var deadline time.Time
	if spin > 0 {
		deadline = time.Now().Add(spin)
	}
	for i := 1; ; i++ {
		n, err := q.Poll(out)
		if n > 0 || err != nil {
			return n, err
		}
		// Read the clock only every 32 polls: a poll is a few memory
		// reads, a clock read can be far dearer (an emulated HPET).
		if spin > 0 && (i%32 != 0 || time.Now().Before(deadline)) {
			continue
		}
		if err := q.ReqNotify(); err != nil {
			return 0, err
		}
		// A completion that arrived before arming raises no event.
		if n, err := q.Poll(out); n > 0 || err != nil {
			return n, err
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		if _, err := q.ch.Wait(ctx); err != nil {
			return 0, err
		}
	}
}

func postHint(r int) string {
	switch syscall.Errno(r) {
	case syscall.ENOMEM:
		return "the work queue is full; poll completions before posting more"
	case syscall.EINVAL:
		return "the QP is not in a state that accepts this request (RTS for sends), or the request is malformed"
	}
	return ""
}

// newestFirst returns the close functions of a context's resources (keyed
// by their creation order), newest first: a QP goes before its CQs and PD,
// an MR before its PD.
func newestFirst(children map[uint64]func() error) []func() error {
	ids := make([]uint64, 0, len(children))
	for id := range children {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	fns := make([]func() error, 0, len(ids))
	for i := len(ids) - 1; i >= 0; i-- {
		fns = append(fns, children[ids[i]])
	}
	return fns
}

// closeAll runs every close function, also after one failed, and returns
// the errors.
func closeAll(fns []func() error) []error {
	var errs []error
	for _, fn := range fns {
		if err := fn(); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}
