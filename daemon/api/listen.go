package api

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// ErrInUse is returned by Listen when another live rdmad serves the socket.
var ErrInUse = errors.New("another rdmad is already serving this socket")

// Listen creates the Unix socket at path with mode 0660 and, when group is
// not empty, that group. A socket file that nobody answers on (left by a
// crashed rdmad) is removed first; a live one is left alone and ErrInUse is
// returned, so a second rdmad cannot steal the first one's socket.
func Listen(path, group string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("api: create socket directory: %w", err)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("api: listen on %s: %w; stop it first (systemctl stop rdmad) or use another --socket", path, ErrInUse)
	} else if !errors.Is(err, syscall.ENOENT) {
		// Not answering: stale. Remove only sockets, never a regular file
		// someone put there by mistake.
		if fi, serr := os.Lstat(path); serr == nil {
			if fi.Mode()&os.ModeSocket == 0 {
				return nil, fmt.Errorf("api: %s exists and is not a socket; remove it or choose another --socket", path)
			}
			if err := os.Remove(path); err != nil {
				return nil, fmt.Errorf("api: remove stale socket %s: %w", path, err)
			}
		}
	}
	// Create the socket with no access for others from the first moment;
	// chmod/chown open it up to exactly the configured group.
	old := syscall.Umask(0o177)
	ln, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("api: listen on %s: %w", path, err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(true)
	if err := Secure(path, group); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// Secure sets mode 0660 and group on the socket at path. Group "" keeps the
// daemon's own group.
func Secure(path, group string) error {
	if group != "" {
		gid, err := LookupGID(group)
		if err != nil {
			return err
		}
		if err := os.Chown(path, -1, int(gid)); err != nil {
			return fmt.Errorf("api: give socket %s to group %s: %w", path, group, err)
		}
	}
	if err := os.Chmod(path, 0o660); err != nil {
		return fmt.Errorf("api: chmod socket %s: %w", path, err)
	}
	return nil
}

// LookupGID resolves a group name (or number) to its gid.
func LookupGID(group string) (int64, error) {
	if group == "" {
		return -1, nil
	}
	g, err := user.LookupGroup(group)
	if err != nil {
		if n, nerr := strconv.ParseUint(group, 10, 32); nerr == nil {
			return int64(n), nil
		}
		return -1, fmt.Errorf("api: group %q: %w", group, err)
	}
	n, err := strconv.ParseInt(g.Gid, 10, 64)
	if err != nil {
		return -1, fmt.Errorf("api: group %q has gid %q: %w", group, g.Gid, err)
	}
	return n, nil
}
