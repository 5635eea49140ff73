package probe

import (
	"testing"
	"unsafe"
)

// TestPeerSizeClass pins the per-peer structures to the allocator's size
// classes they are in: a field added to mpeer or path without finding
// room in their padding moves every peer to the next class (320 to 352
// bytes, a path 352 to 384), which is per-peer memory the bytes/peer benchmark
// (docs/PROBES.md, "Memory per peer") would show only as a drift. Adding
// pubIdx and pubDirty as they first were did exactly that. A field few
// peers use goes in peerRare.
func TestPeerSizeClass(t *testing.T) {
	for _, c := range []struct {
		name       string
		size, want uintptr
	}{
		{"mpeer", unsafe.Sizeof(mpeer{}), 320},
		{"path", unsafe.Sizeof(path{}), 352},
		// A path on the default four flows holds four, in one array
		// (acceptFlows): 192 bytes, the 192-byte class.
		{"flowState", unsafe.Sizeof(flowState{}), 48},
		{"window", unsafe.Sizeof(window{}), 24},
	} {
		if c.size > c.want {
			t.Errorf("%s is %d bytes, over its %d-byte size class: find room in its padding or narrow a field", c.name, c.size, c.want)
		}
	}
}
