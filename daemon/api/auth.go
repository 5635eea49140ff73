package api

import (
	"context"
	"errors"
	"net"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/daemon/access"
)

// A Peer is the process at the other end of a socket connection, as the
// kernel captured it when that process called connect(2): SO_PEERCRED for
// the uid, gid and pid, SO_PEERGROUPS for the supplementary groups.
type Peer struct {
	// PID is for logs only. It must never be used to look the peer up
	// (/proc/PID): by the time rdmad reads it, the process may be gone and
	// its pid taken by another one with other groups.
	PID    int32
	UID    uint32
	GID    uint32
	Groups []uint32 // supplementary groups at connect (SO_PEERGROUPS)
	Known  bool     // false when the kernel gave no credentials
}

// Caller is the Peer as the access table sees it.
func (p Peer) Caller() access.Caller {
	return access.Caller{UID: p.UID, GID: p.GID, Groups: p.Groups, Known: p.Known}
}

type peerKey struct{}

// ConnContext stores the peer credentials of c in ctx; use it as
// http.Server.ConnContext.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	if pc, ok := c.(*peerConn); ok {
		return context.WithValue(ctx, peerKey{}, pc.peer)
	}
	return context.WithValue(ctx, peerKey{}, peerOf(c))
}

// PeerFrom returns the Peer stored by ConnContext.
func PeerFrom(ctx context.Context) Peer {
	p, _ := ctx.Value(peerKey{}).(Peer)
	return p
}

// peerOf reads the credentials the kernel captured when the peer of c
// connected. Both socket options return the connecting process's
// credentials as of connect(2), whatever happened to that process since.
func peerOf(c net.Conn) Peer {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return Peer{}
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return Peer{}
	}
	var cred *unix.Ucred
	var groups []uint32
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if cerr == nil {
			// No groups (an old kernel, ENOPROTOOPT) leaves the peer
			// with only its primary gid: less access, never more.
			groups, _ = peerGroups(int(fd))
		}
	}); err != nil || cerr != nil {
		return Peer{}
	}
	return Peer{PID: cred.Pid, UID: cred.Uid, GID: cred.Gid, Groups: groups, Known: true}
}

// soPeerGroups is SO_PEERGROUPS (Linux 4.13) on every architecture Go
// supports on Linux (asm-generic/socket.h); golang.org/x/sys does not
// define it.
const soPeerGroups = 59

// peerGroups returns the supplementary groups of the peer of the Unix
// socket fd. The kernel answers ERANGE with the size it needs when the
// buffer is too small; the groups of a connected peer are fixed, so one
// retry with that size is enough, and NGROUPS_MAX (65536) bounds it.
func peerGroups(fd int) ([]uint32, error) {
	n := 64
	for range 3 {
		buf := make([]uint32, n)
		size := uint32(4 * n)
		_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, soPeerGroups,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&size)), 0)
		runtime.KeepAlive(buf)
		switch {
		case e == 0:
			return buf[:size/4], nil
		case e == unix.ERANGE && int(size/4) > n && size/4 <= 65536:
			n = int(size / 4)
		default:
			return nil, e
		}
	}
	return nil, errors.New("SO_PEERGROUPS: the group list kept growing")
}
