package apitype

import (
	"testing"
	"unsafe"
)

// TestPeerFlowSize: a published state holds a PeerFlow per flow of every
// path (4,000 at 1,000 peers at the defaults); its fields are ordered so
// that it takes 56 bytes, not the 64 that Lossy last cost (#38).
func TestPeerFlowSize(t *testing.T) {
	if n := unsafe.Sizeof(PeerFlow{}); n != 56 {
		t.Errorf("PeerFlow is %d bytes, want 56: keep the small fields together", n)
	}
}
