package linkwatch

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdmad/rdmad/test/netnstest"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// startWatcher runs a Watcher on ns and stops it at the end of the test,
// checking that Run ends with the context and closes Events.
func startWatcher(t *testing.T, ns netns.NsHandle, opts Options) *Watcher {
	t.Helper()
	opts.NetNS = &ns
	w := New(opts)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Errorf("Run returned %v, want context.Canceled", err)
		}
		for range w.Events() { // must be closed, else this hangs
		}
	})
	// The first event is the resync that follows the subscription; after it
	// every change is seen.
	waitEvent(t, w, "initial resync", func(ev Event) bool { return ev.Kind == KindResync })
	return w
}

func waitEvent(t *testing.T, w *Watcher, what string, match func(Event) bool) Event {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case ev, ok := <-w.Events():
			if !ok {
				t.Fatalf("waiting for %s: Events closed", what)
			}
			if match(ev) {
				return ev
			}
		case <-timeout:
			t.Fatalf("waiting for %s: timed out", what)
		}
	}
}

// collect gathers events until none arrived for quiet.
func collect(w *Watcher, quiet time.Duration) []Event {
	var evs []Event
	for {
		select {
		case ev := <-w.Events():
			evs = append(evs, ev)
		case <-time.After(quiet):
			return evs
		}
	}
}

func TestIntegrationLinkAddMTUDelete(t *testing.T) {
	ns, h := netnstest.New(t)
	w := startWatcher(t, ns, Options{Debounce: 20 * time.Millisecond})

	tests := []struct {
		name   string
		change func(t *testing.T) netlink.Link
		want   Kind
	}{
		{"add", func(t *testing.T) netlink.Link { return netnstest.Veth(t, h, "lw0", "lw1") }, KindLink},
		{"mtu", func(t *testing.T) netlink.Link {
			l, _ := h.LinkByName("lw0")
			if err := h.LinkSetMTU(l, 1400); err != nil {
				t.Fatalf("set MTU: %v", err)
			}
			return l
		}, KindLink},
		{"addr", func(t *testing.T) netlink.Link {
			l, _ := h.LinkByName("lw0")
			addr, _ := netlink.ParseAddr("192.0.2.1/24")
			if err := h.AddrAdd(l, addr); err != nil {
				t.Fatalf("add address: %v", err)
			}
			return l
		}, KindAddr},
		{"delete", func(t *testing.T) netlink.Link {
			l, _ := h.LinkByName("lw0")
			if err := h.LinkDel(l); err != nil {
				t.Fatalf("delete link: %v", err)
			}
			return l
		}, KindDeleted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := tt.change(t)
			idx := l.Attrs().Index
			ev := waitEvent(t, w, tt.want.String()+" event for lw0", func(ev Event) bool {
				return ev.Index == idx && ev.Kind == tt.want
			})
			if ev.Name != "lw0" {
				t.Errorf("event %+v: Name = %q, want lw0", ev, ev.Name)
			}
		})
	}
}

func TestIntegrationBurstIsCoalesced(t *testing.T) {
	ns, h := netnstest.New(t)
	l := netnstest.Veth(t, h, "burst0", "burst1")
	w := startWatcher(t, ns, Options{Debounce: 30 * time.Millisecond})

	const flips = 200
	for i := range flips {
		if err := h.LinkSetMTU(l, 1280+i%2*100); err != nil {
			t.Fatalf("set MTU (flip %d): %v", i, err)
		}
	}
	final := 9000
	if err := h.LinkSetMTU(l, final); err != nil {
		t.Fatalf("set final MTU: %v", err)
	}
	evs := collect(w, 300*time.Millisecond)
	var forLink int
	for _, ev := range evs {
		if ev.Index == l.Attrs().Index {
			forLink++
		}
	}
	if forLink == 0 || forLink > flips/10 {
		t.Fatalf("%d MTU changes produced %d events for burst0 (%v); want between 1 and %d", flips+1, forLink, evs, flips/10)
	}
	// Level-triggered: whatever was coalesced, looking again shows the
	// final state.
	got, err := h.LinkByIndex(l.Attrs().Index)
	if err != nil {
		t.Fatalf("re-observe burst0: %v", err)
	}
	if got.Attrs().MTU != final {
		t.Errorf("MTU after burst = %d, want %d", got.Attrs().MTU, final)
	}
	t.Logf("%d changes -> %d events", flips+1, forLink)
}

func TestIntegrationQueueOverflowBecomesResync(t *testing.T) {
	ns, h := netnstest.New(t)
	// Four pending interfaces at most: creating eight pairs at once
	// overflows the queue, which must turn into a single resync rather
	// than unbounded growth or silently lost interfaces.
	w := startWatcher(t, ns, Options{Debounce: 200 * time.Millisecond, QueueSize: 4})
	for i := range 4 {
		netnstest.Veth(t, h, "ovf"+string(rune('a'+i)), "ovp"+string(rune('a'+i)))
	}
	waitEvent(t, w, "resync after queue overflow", func(ev Event) bool { return ev.Kind == KindResync })
}

// TestIntegrationENOBUFSResubscribes stalls the reader until the kernel
// socket buffer overflows. The library ends the subscription on ENOBUFS;
// the watcher must report it, ask for a resync and subscribe again.
func TestIntegrationENOBUFSResubscribes(t *testing.T) {
	ns, h := netnstest.New(t)
	l := netnstest.Veth(t, h, "nob0", "nob1")

	var mu sync.Mutex
	var errs []string
	gate := make(chan struct{})
	var once sync.Once
	opts := Options{
		NetNS:      &ns,
		Debounce:   10 * time.Millisecond,
		ReadBuffer: 1, // the kernel's minimum
		BackoffMin: 10 * time.Millisecond,
		OnError: func(err error) {
			mu.Lock()
			errs = append(errs, err.Error())
			mu.Unlock()
		},
	}
	w := New(opts)
	w.testGate = func() { <-gate }
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- w.Run(ctx) }()
	defer func() {
		once.Do(func() { close(gate) })
		cancel()
		<-errc
	}()
	waitEvent(t, w, "initial resync", func(ev Event) bool { return ev.Kind == KindResync })

	// The first update blocks the reader in testGate; the rest pile up in
	// the socket buffer until the kernel drops them.
	for i := range 300 {
		if err := h.LinkSetMTU(l, 1300+i%2); err != nil {
			t.Fatalf("set MTU: %v", err)
		}
	}
	once.Do(func() { close(gate) })
	waitEvent(t, w, "resync after ENOBUFS", func(ev Event) bool { return ev.Kind == KindResync })

	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		joined := strings.Join(errs, "\n")
		mu.Unlock()
		if strings.Contains(joined, "no buffer space available") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("errors reported: %q; want one about ENOBUFS (no buffer space available)", joined)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Subscribed again: new changes are seen. A change made before the new
	// subscription is covered only by the resync, so keep changing until
	// one is reported individually.
	deadline = time.Now().Add(5 * time.Second)
	for mtu := 1500; ; mtu++ {
		if err := h.LinkSetMTU(l, mtu); err != nil {
			t.Fatalf("set MTU: %v", err)
		}
		evs := collect(w, 100*time.Millisecond)
		if slices.ContainsFunc(evs, func(ev Event) bool { return ev.Index == l.Attrs().Index && ev.Kind == KindLink }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no link event after the subscription ended with ENOBUFS: not re-subscribed")
		}
	}
}

func TestMerge(t *testing.T) {
	link := Event{Kind: KindLink, Name: "eth0", Index: 2}
	addr := Event{Kind: KindAddr, Index: 2}
	del := Event{Kind: KindDeleted, Name: "eth0", Index: 2}
	tests := []struct {
		name     string
		old, new Event
		want     Event
	}{
		{"addr after link keeps link", link, addr, link},
		{"addr after delete keeps delete", del, addr, del},
		{"delete after link", link, del, del},
		{"link after delete (re-added)", del, link, link},
		{"link after addr", addr, link, link},
		{"addr after addr", addr, addr, addr},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := merge(tt.old, tt.new); got != tt.want {
				t.Errorf("merge(%+v, %+v) = %+v, want %+v", tt.old, tt.new, got, tt.want)
			}
		})
	}
}
