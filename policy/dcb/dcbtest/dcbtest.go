// Package dcbtest gives tests a private network namespace with a veth pair,
// so dcbnl requests reach the real kernel without touching the host's links.
package dcbtest

import (
	"os"
	"runtime"
	"testing"

	vnl "github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// NetNS creates a network namespace owned by t and returns its handle,
// which is closed (and so the namespace destroyed) when t ends. It skips t
// when the test is not running as root, the one capability it needs.
func NetNS(t testing.TB) netns.NsHandle {
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
	t.Cleanup(func() { ns.Close() })
	return ns
}

// Veth creates the veth pair name/peer inside ns.
func Veth(t testing.TB, ns netns.NsHandle, name, peer string) {
	t.Helper()
	h, err := vnl.NewHandleAt(ns)
	if err != nil {
		t.Fatalf("netlink handle in netns: %v", err)
	}
	defer h.Close()
	veth := &vnl.Veth{LinkAttrs: vnl.LinkAttrs{Name: name}, PeerName: peer}
	if err := h.LinkAdd(veth); err != nil {
		t.Fatalf("add veth %s/%s: %v", name, peer, err)
	}
}
