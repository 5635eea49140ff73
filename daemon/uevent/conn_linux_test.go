package uevent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/daemon/linkwatch/coalesce"
	"github.com/rdmad/rdmad/test/netnstest"
)

// waitFor receives events until one matches or the deadline passes.
func waitFor(t *testing.T, c *Conn, what string, match func(Event) bool) Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		ev, err := c.Receive(ctx)
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if match(ev) {
			return ev
		}
	}
}

func TestIntegrationVethAddRemove(t *testing.T) {
	ns, h := netnstest.New(t)
	c, err := Dial(&Options{Subsystems: []string{"net"}, NetNS: int(ns)})
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	defer c.Close()

	netnstest.Veth(t, h, "rdmatest0", "rdmatest1")
	added := waitFor(t, c, "add of rdmatest0", func(ev Event) bool {
		return ev.Action == "add" && ev.Env["INTERFACE"] == "rdmatest0"
	})
	if added.Subsystem != "net" || added.Seqnum == 0 || added.DevPath != "/devices/virtual/net/rdmatest0" {
		t.Errorf("add event = %+v, want subsystem net, a seqnum and devpath /devices/virtual/net/rdmatest0", added)
	}

	link, err := h.LinkByName("rdmatest0")
	if err != nil {
		t.Fatalf("look up rdmatest0: %v", err)
	}
	if err := h.LinkDel(link); err != nil {
		t.Fatalf("delete rdmatest0: %v", err)
	}
	removed := waitFor(t, c, "remove of rdmatest0", func(ev Event) bool {
		return ev.Action == "remove" && ev.Env["INTERFACE"] == "rdmatest0"
	})
	if removed.Seqnum <= added.Seqnum {
		t.Errorf("remove seqnum %d not after add seqnum %d", removed.Seqnum, added.Seqnum)
	}
}

func TestIntegrationSubsystemFilter(t *testing.T) {
	ns, h := netnstest.New(t)
	// veth creation emits "net" and "queues" uevents; with a filter for a
	// subsystem that does not occur nothing may come through.
	c, err := Dial(&Options{Subsystems: []string{"infiniband"}, NetNS: int(ns)})
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	defer c.Close()
	all, err := Dial(&Options{NetNS: int(ns)})
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	defer all.Close()

	netnstest.Veth(t, h, "rdmaflt0", "rdmaflt1")
	waitFor(t, all, "any event for rdmaflt0", func(ev Event) bool { return ev.Env["INTERFACE"] == "rdmaflt0" })

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if ev, err := c.Receive(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("filtered Receive = %+v, %v; want no event and %v", ev, err, context.DeadlineExceeded)
	}
}

func TestIntegrationOverflowReportsLost(t *testing.T) {
	ns, h := netnstest.New(t)
	// The smallest buffer the kernel allows overflows after a few messages.
	c, err := Dial(&Options{NetNS: int(ns), ReadBuffer: 1})
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	defer c.Close()
	for i := range 20 {
		netnstest.Veth(t, h, fmt.Sprintf("rdmaov%da", i), fmt.Sprintf("rdmaov%db", i))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		_, err := c.Receive(ctx)
		if err == nil {
			continue
		}
		if !errors.Is(err, ErrLost) || !errors.Is(err, unix.ENOBUFS) {
			t.Fatalf("Receive error = %v, want one matching ErrLost and ENOBUFS", err)
		}
		break
	}
	// The socket stays usable after an overflow: drain what the small
	// buffer still holds, then a new event must come through.
	for {
		dctx, dcancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		_, err := c.Receive(dctx)
		dcancel()
		if errors.Is(err, context.DeadlineExceeded) {
			break
		}
		if err != nil && !errors.Is(err, ErrLost) {
			t.Fatalf("draining: %v", err)
		}
	}
	// One veth pair emits several uevents, which can overflow this tiny
	// buffer again; any of them arriving proves delivery resumed.
	netnstest.Veth(t, h, "rdmaovz", "rdmaovy")
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		ev, err := c.Receive(ctx)
		if errors.Is(err, ErrLost) {
			continue
		}
		if err != nil {
			t.Fatalf("waiting for an event after overflow: %v", err)
		}
		if strings.Contains(ev.DevPath, "/rdmaovz") || strings.Contains(ev.DevPath, "/rdmaovy") {
			break
		}
	}
}

func TestIntegrationRunCoalesces(t *testing.T) {
	ns, h := netnstest.New(t)
	c, err := Dial(&Options{Subsystems: []string{"net"}, NetNS: int(ns)})
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	defer c.Close()
	q := coalesce.New[string, Event](20*time.Millisecond, 64)
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- c.Run(ctx, q) }()

	// add then remove within the debounce window: one notification for the
	// device, carrying the latest action.
	netnstest.Veth(t, h, "rdmaco0", "rdmaco1")
	link, err := h.LinkByName("rdmaco0")
	if err != nil {
		t.Fatalf("look up rdmaco0: %v", err)
	}
	if err := h.LinkDel(link); err != nil {
		t.Fatalf("delete rdmaco0: %v", err)
	}
	got := map[string]string{}
	nctx, ncancel := context.WithTimeout(ctx, 5*time.Second)
	defer ncancel()
	for len(got) < 2 {
		ev, err := q.Next(nctx)
		if err != nil {
			t.Fatalf("Next: %v (so far %v)", err, got)
		}
		if _, dup := got[ev.DevPath]; dup {
			t.Errorf("second notification for %s (%s): not coalesced", ev.DevPath, ev.Action)
		}
		got[ev.DevPath] = ev.Action
	}
	for _, p := range []string{"/devices/virtual/net/rdmaco0", "/devices/virtual/net/rdmaco1"} {
		if got[p] != "remove" {
			t.Errorf("%s: latest action %q, want remove", p, got[p])
		}
	}
	cancel()
	if err := <-runErr; !errors.Is(err, context.Canceled) {
		t.Errorf("Run returned %v, want context.Canceled", err)
	}
}
