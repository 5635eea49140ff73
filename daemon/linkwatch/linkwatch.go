// Package linkwatch turns rtnetlink link and address notifications into
// small "look again at netdev X" events for the reconciler.
//
// The kernel reports every intermediate step of a change; the reconciler is
// level-triggered and re-reads the device anyway. A Watcher therefore
// coalesces notifications per interface (see package coalesce), keeps its
// queue bounded, and asks for a full resync whenever it may have missed
// something: after (re)subscribing, after a netlink error, and after an
// overflow of the kernel socket buffer (ENOBUFS) or of its own queue.
package linkwatch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/daemon/linkwatch/coalesce"
)

// A Kind says what changed.
type Kind int

const (
	// KindLink: a link was added or one of its attributes (MTU, state,
	// name, ...) changed.
	KindLink Kind = iota + 1
	// KindAddr: an IPv4/IPv6 address of the link was added or removed
	// (RoCE v2 GIDs follow IP addresses).
	KindAddr
	// KindDeleted: the link was removed.
	KindDeleted
	// KindResync: events may have been lost; re-observe every link.
	KindResync
)

func (k Kind) String() string {
	switch k {
	case KindLink:
		return "link"
	case KindAddr:
		return "addr"
	case KindDeleted:
		return "deleted"
	case KindResync:
		return "resync"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// An Event asks the consumer to look again at one network interface, or at
// all of them for KindResync (then Name and Index are empty). Name is the
// interface name at the time of the notification; it may be empty for
// KindAddr when the link disappeared before the event was delivered (a
// KindDeleted event for it follows).
type Event struct {
	Kind  Kind
	Name  string
	Index int
}

// resyncKey is the coalescing key of KindResync; ifindex 0 is never a link.
const resyncKey = 0

// Options configure a Watcher. The zero value watches the caller's network
// namespace with default timings.
type Options struct {
	// NetNS selects the network namespace to watch; nil means the
	// namespace of the thread that calls Run (the process's, normally).
	NetNS *netns.NsHandle
	// Debounce is how long an interface must be quiet before its event is
	// delivered; 0 means 30ms.
	Debounce time.Duration
	// QueueSize bounds the number of interfaces with pending events; on
	// overflow they are replaced by one KindResync. 0 means 1024.
	QueueSize int
	// BackoffMin and BackoffMax bound the delay before re-subscribing after
	// a failure; 0 means 100ms and 10s.
	BackoffMin, BackoffMax time.Duration
	// ReadBuffer is the netlink socket receive buffer in bytes; 0 means
	// 4 MiB. With CAP_NET_ADMIN it is forced past net.core.rmem_max.
	ReadBuffer int
	// OnError, if set, is called from Run's goroutine with each netlink
	// error, for logging. Every error also causes a KindResync event.
	OnError func(error)
}

// A Watcher delivers coalesced link and address events on Events while Run
// is running.
type Watcher struct {
	opts   Options
	q      *coalesce.Queue[int, Event]
	events chan Event

	// testGate, if set, runs before each received update is processed;
	// tests use it to stall the reader until the kernel buffer overflows.
	testGate func()
}

// New returns a Watcher; call Run to start it.
func New(opts Options) *Watcher {
	if opts.Debounce <= 0 {
		opts.Debounce = 30 * time.Millisecond
	}
	if opts.QueueSize <= 0 {
		opts.QueueSize = 1024
	}
	if opts.BackoffMin <= 0 {
		opts.BackoffMin = 100 * time.Millisecond
	}
	if opts.BackoffMax < opts.BackoffMin {
		opts.BackoffMax = max(10*time.Second, opts.BackoffMin)
	}
	if opts.ReadBuffer <= 0 {
		opts.ReadBuffer = 4 << 20
	}
	return &Watcher{
		opts:   opts,
		q:      coalesce.NewMerging[int](opts.Debounce, opts.QueueSize, merge),
		events: make(chan Event, 64),
	}
}

// Events returns the channel events are delivered on. It is closed when Run
// returns.
func (w *Watcher) Events() <-chan Event { return w.events }

// Run subscribes to link and address notifications and delivers events
// until ctx is done; then it returns ctx.Err(). A KindResync event is sent
// after every successful subscription, including the first, because changes
// made before it were not seen. Run must be called at most once.
func (w *Watcher) Run(ctx context.Context) error {
	defer close(w.events)
	var h *netlink.Handle
	var err error
	if w.opts.NetNS != nil {
		h, err = netlink.NewHandleAt(*w.opts.NetNS)
	} else {
		h, err = netlink.NewHandle()
	}
	if err != nil {
		return fmt.Errorf("linkwatch: open rtnetlink handle: %w", err)
	}
	defer h.Close()

	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		w.emit(ctx, h)
	}()
	defer wg.Wait()
	defer cancel()

	backoff := w.opts.BackoffMin
	for {
		start := time.Now()
		err := w.watch(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		w.report(err)
		w.q.Add(resyncKey, Event{Kind: KindResync})
		// A subscription that worked for a while resets the backoff, so a
		// rare overflow does not make later recoveries slow.
		if time.Since(start) > w.opts.BackoffMax {
			backoff = w.opts.BackoffMin
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		backoff = min(2*backoff, w.opts.BackoffMax)
	}
}

func (w *Watcher) report(err error) {
	if err != nil && w.opts.OnError != nil {
		w.opts.OnError(err)
	}
}

// watch runs one subscription until it fails or ctx is done. It returns why
// the subscription ended.
func (w *Watcher) watch(ctx context.Context) error {
	done := make(chan struct{})
	// The library reports errors through a callback on its own goroutine;
	// pass them on without ever blocking it.
	errc := make(chan error, 8)
	onErr := func(err error) {
		select {
		case errc <- err:
		default:
		}
	}
	force := hasNetAdmin()
	links := make(chan netlink.LinkUpdate)
	addrs := make(chan netlink.AddrUpdate)
	err := netlink.LinkSubscribeWithOptions(links, done, netlink.LinkSubscribeOptions{
		Namespace:              w.opts.NetNS,
		ErrorCallback:          onErr,
		ReceiveBufferSize:      w.opts.ReadBuffer,
		ReceiveBufferForceSize: force,
	})
	if err != nil {
		close(done)
		return fmt.Errorf("linkwatch: subscribe to link notifications: %w", err)
	}
	err = netlink.AddrSubscribeWithOptions(addrs, done, netlink.AddrSubscribeOptions{
		Namespace:              w.opts.NetNS,
		ErrorCallback:          onErr,
		ReceiveBufferSize:      w.opts.ReadBuffer,
		ReceiveBufferForceSize: force,
	})
	if err != nil {
		close(done)
		drain(links, nil)
		return fmt.Errorf("linkwatch: subscribe to address notifications: %w", err)
	}
	// Closing done makes the library close its sockets; its reader
	// goroutines then close the channels, which we drain so that they are
	// never stuck sending.
	defer func() {
		close(done)
		drain(links, addrs)
	}()

	w.q.Add(resyncKey, Event{Kind: KindResync})
	var lastErr error
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-errc:
			// Decoding errors and the like: the subscription may go on,
			// but a message was lost.
			lastErr = err
			w.report(fmt.Errorf("linkwatch: %w", err))
			w.q.Add(resyncKey, Event{Kind: KindResync})
		case u, ok := <-links:
			if !ok {
				return fmt.Errorf("linkwatch: link subscription ended: %w", pendingErr(errc, lastErr))
			}
			if w.testGate != nil {
				w.testGate()
			}
			a := u.Link.Attrs()
			kind := KindLink
			if u.Header.Type == unix.RTM_DELLINK {
				kind = KindDeleted
			}
			w.q.Add(a.Index, Event{Kind: kind, Name: a.Name, Index: a.Index})
		case u, ok := <-addrs:
			if !ok {
				return fmt.Errorf("linkwatch: address subscription ended: %w", pendingErr(errc, lastErr))
			}
			if w.testGate != nil {
				w.testGate()
			}
			w.q.Add(u.LinkIndex, Event{Kind: KindAddr, Index: u.LinkIndex})
		}
	}
}

// pendingErr returns the error the library reported before closing its
// channel, or else the last one seen (the library does not wrap the errno,
// so only the text survives).
func pendingErr(errc chan error, last error) error {
	select {
	case err := <-errc:
		return err
	default:
	}
	if last != nil {
		return last
	}
	return errors.New("channel closed without error")
}

func drain(links <-chan netlink.LinkUpdate, addrs <-chan netlink.AddrUpdate) {
	for links != nil || addrs != nil {
		select {
		case _, ok := <-links:
			if !ok {
				links = nil
			}
		case _, ok := <-addrs:
			if !ok {
				addrs = nil
			}
		}
	}
}

// merge combines two pending events for one interface. An address event
// carries no link information, so it never replaces a pending link or
// delete event: deleting a link also removes its addresses, and the delete
// must not be reported as a mere address change.
func merge(old, new Event) Event {
	if new.Kind == KindAddr && (old.Kind == KindLink || old.Kind == KindDeleted) {
		return old
	}
	return new
}

// emit moves due events from the queue to the Events channel.
func (w *Watcher) emit(ctx context.Context, h *netlink.Handle) {
	for {
		ev, err := w.q.Next(ctx)
		switch {
		case errors.Is(err, coalesce.ErrDropped):
			ev = Event{Kind: KindResync}
		case err != nil:
			return
		}
		if ev.Kind == KindAddr {
			// Resolve the name late: the link may have been renamed while
			// the event waited.
			if l, err := h.LinkByIndex(ev.Index); err == nil {
				ev.Name = l.Attrs().Name
			}
		}
		select {
		case w.events <- ev:
		case <-ctx.Done():
			return
		}
	}
}

// hasNetAdmin reports whether the process may use SO_RCVBUFFORCE. The
// library leaks the socket when setting the buffer fails, so ask first.
func hasNetAdmin() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	return data[unix.CAP_NET_ADMIN/32].Effective&(1<<(unix.CAP_NET_ADMIN%32)) != 0
}
