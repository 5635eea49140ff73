// Package netnstest gives tests a private network namespace, so that they
// reach the real kernel (rtnetlink, dcbnl, uevents) without touching the
// host's links.
package netnstest

import (
	"os"
	"runtime"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// New creates a network namespace owned by t and returns its handle and a
// netlink handle bound to it; both are closed (and so the namespace
// destroyed) when t ends. The calling thread is back in its own namespace
// when New returns. It skips t when not running as root, the one capability
// it needs.
func New(t testing.TB) (netns.NsHandle, *netlink.Handle) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("creating a network namespace needs root (CAP_SYS_ADMIN); run the tests as root")
	}
	// netns.New switches the calling thread, so pin it and switch back
	// before anything else can run on it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatalf("get current netns: %v", err)
	}
	defer orig.Close()
	ns, err := netns.New()
	if err != nil {
		t.Fatalf("create netns: %v", err)
	}
	if err := netns.Set(orig); err != nil {
		// The thread is stuck in the new namespace; leave it locked so
		// the runtime discards it instead of reusing it.
		ns.Close()
		t.Fatalf("return to original netns: %v", err)
	}
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		ns.Close()
		t.Fatalf("netlink handle in the test netns: %v", err)
	}
	t.Cleanup(func() { h.Close(); ns.Close() })
	return ns, h
}

// Veth creates the veth pair name/peer through h and returns name's link.
func Veth(t testing.TB, h *netlink.Handle, name, peer string) netlink.Link {
	t.Helper()
	if err := h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: peer}); err != nil {
		t.Fatalf("add veth %s/%s: %v", name, peer, err)
	}
	l, err := h.LinkByName(name)
	if err != nil {
		t.Fatalf("look up %s: %v", name, err)
	}
	return l
}

// File returns ns as an *os.File for a child process (exec.Cmd's
// ExtraFiles, e.g. nsenter --net=/proc/self/fd/3), closed when the test
// ends. It is a duplicate of its own: an *os.File of ns itself would close
// ns (or whatever reuses its number) again when the GC finalizes it, and
// make another test's file operations fail with EBADF.
func File(t testing.TB, ns netns.NsHandle) *os.File {
	t.Helper()
	dup, err := unix.Dup(int(ns))
	if err != nil {
		t.Fatalf("dup the network namespace's fd: %v", err)
	}
	f := os.NewFile(uintptr(dup), "netns")
	t.Cleanup(func() { f.Close() })
	return f
}
