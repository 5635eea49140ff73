package api

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// A Peer is the process at the other end of a socket connection, as the
// kernel reported it (SO_PEERCRED) when the connection was accepted.
type Peer struct {
	PID    int32
	UID    uint32
	GID    uint32
	Groups []uint32 // supplementary groups, from /proc/PID/status
	Known  bool     // false when the kernel gave no credentials
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
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || cerr != nil {
		return Peer{}
	}
	return Peer{PID: cred.Pid, UID: cred.Uid, GID: cred.Gid, Groups: groupsOf(cred.Pid), Known: true}
}

// groupsOf reads a process's supplementary groups. SO_PEERCRED carries only
// the primary group, and a member of the socket group usually has it as a
// supplementary one.
func groupsOf(pid int32) []uint32 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		rest, ok := strings.CutPrefix(s.Text(), "Groups:")
		if !ok {
			continue
		}
		var gs []uint32
		for _, f := range strings.Fields(rest) {
			if g, err := strconv.ParseUint(f, 10, 32); err == nil {
				gs = append(gs, uint32(g))
			}
		}
		return gs
	}
	return nil
}

// A Policy decides what a peer may do. The zero Policy lets only root and
// the daemon's own user in.
type Policy struct {
	// SelfUID is the daemon's effective uid: its own user may do anything
	// (so `make run` works without root).
	SelfUID uint32
	// ReadGID may read (status, watch, metrics); -1 for none.
	ReadGID int64
	// AdminGID may also change state (reload, apply); -1 for none.
	AdminGID int64
}

func (p Policy) privileged(peer Peer) bool {
	return peer.Known && (peer.UID == 0 || peer.UID == p.SelfUID)
}

func (p Policy) inGroup(peer Peer, gid int64) bool {
	if gid < 0 || !peer.Known {
		return false
	}
	if int64(peer.GID) == gid {
		return true
	}
	for _, g := range peer.Groups {
		if int64(g) == gid {
			return true
		}
	}
	return false
}

// CanRead reports whether peer may read state.
func (p Policy) CanRead(peer Peer) bool {
	return p.privileged(peer) || p.inGroup(peer, p.ReadGID) || p.inGroup(peer, p.AdminGID)
}

// CanWrite reports whether peer may change state.
func (p Policy) CanWrite(peer Peer) bool {
	return p.privileged(peer) || p.inGroup(peer, p.AdminGID)
}
