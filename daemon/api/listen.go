package api

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ErrInUse is returned by Listen when another live rdmad serves the socket.
var ErrInUse = errors.New("another rdmad is already serving this socket")

// SocketAccess is who the socket file lets connect. The file is only the
// first gate: the daemon checks every request again against the access
// table (daemon/access) with the credentials the kernel captured at connect.
type SocketAccess struct {
	// Group is [daemon] socket_group: the file's group (mode 0660). ""
	// keeps the daemon's own group.
	Group string
	// AdminGroup is [daemon] admin_group. When it differs from Group, the
	// file also gets a POSIX ACL entry group:<admin>:rw-, so that an admin
	// who is not in the socket group can connect (docs/API.md, "Access").
	AdminGroup string
}

// A Listener is the API socket rdmad created. It remembers which inode it
// bound, so that Secure, called again on every reload, changes that inode
// and nothing a user may have put at the path since.
type Listener struct {
	*net.UnixListener
	path     string
	dev, ino uint64
}

// Path is the socket's path.
func (l *Listener) Path() string { return l.path }

// Listen creates the Unix socket at path, owned by the daemon, with mode
// 0660 and the access of a. A socket file that nobody answers on (left by a
// crashed rdmad) is removed first; a live one is left alone and ErrInUse is
// returned, so a second rdmad cannot steal the first one's socket. A
// directory that others can write is refused (see checkDir).
func Listen(path string, a SocketAccess) (*Listener, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("api: create socket directory: %w", err)
	}
	if err := checkDir(dir); err != nil {
		return nil, err
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
	// Secure opens it up to exactly the configured groups.
	old := syscall.Umask(0o177)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("api: listen on %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(true)
	// The directory is one only root and rdmad can write (checked above),
	// so the inode at path now is the one bind created.
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		ln.Close()
		return nil, fmt.Errorf("api: stat the new socket %s: %w", path, err)
	}
	l := &Listener{UnixListener: ln, path: path, dev: st.Dev, ino: st.Ino}
	if err := l.Secure(a); err != nil {
		ln.Close()
		return nil, err
	}
	return l, nil
}

// Secure gives the socket rdmad created mode 0660, the group a.Group and,
// when a.AdminGroup differs, an ACL entry for it; it removes a stale ACL
// entry when it does not. It acts only on the inode Listen bound, never
// through a symlink: if the path now names anything else (a user replaced
// the socket), it changes nothing and returns an error. A directory that
// others can write is refused as in Listen.
func (l *Listener) Secure(a SocketAccess) error {
	sgid, err := LookupGID(a.Group)
	if err != nil {
		return fmt.Errorf("api: socket_group: %w", err)
	}
	agid, err := LookupGID(a.AdminGroup)
	if err != nil {
		return fmt.Errorf("api: admin_group: %w", err)
	}
	dir := filepath.Dir(l.path)
	if err := checkDir(dir); err != nil {
		return err
	}
	// O_PATH|O_NOFOLLOW opens the name itself, never a symlink's target,
	// and works on a socket (which cannot be opened for reading). fstat of
	// that fd then tells exactly which inode the changes below will hit.
	fd, err := unix.Open(l.path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("api: socket %s: %w; it was removed or replaced since rdmad created it: restart rdmad to create it again (systemctl restart rdmad)", l.path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("api: stat socket %s: %w", l.path, err)
	}
	if st.Dev != l.dev || st.Ino != l.ino || st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return fmt.Errorf("api: %s is no longer the socket rdmad created (now %s, inode %d, was %d); someone replaced it, so rdmad changes nothing there: make sure only root can write %s and restart rdmad (systemctl restart rdmad)",
			l.path, fileType(st.Mode), st.Ino, l.ino, dir)
	}
	if sgid >= 0 {
		// AT_EMPTY_PATH on an O_PATH fd changes the inode the fd holds.
		if err := unix.Fchownat(fd, "", -1, int(sgid), unix.AT_EMPTY_PATH); err != nil {
			return fmt.Errorf("api: give socket %s to group %s: %w", l.path, a.Group, err)
		}
	}
	// fchmod refuses O_PATH fds and fchmodat's AT_SYMLINK_NOFOLLOW is not
	// supported before Linux 6.6; /proc/self/fd/N names the inode the fd
	// holds (the magic link does not resolve the path again), which is
	// what glibc's fchmodat does too.
	byFD := "/proc/self/fd/" + strconv.Itoa(fd)
	if err := setAdminACL(byFD, sgid, agid); err != nil {
		return fmt.Errorf("api: let admin_group %s connect to %s: %w", a.AdminGroup, l.path, err)
	}
	if err := unix.Chmod(byFD, 0o660); err != nil {
		return fmt.Errorf("api: chmod socket %s: %w", l.path, err)
	}
	return nil
}

func fileType(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFSOCK:
		return "another socket"
	case unix.S_IFLNK:
		return "a symlink"
	case unix.S_IFREG:
		return "a regular file"
	case unix.S_IFDIR:
		return "a directory"
	}
	return "another kind of file"
}

// checkDir refuses a socket directory that users other than root and
// rdmad's own user can write, unless it is sticky and root's (like /tmp):
// whoever can write it can replace the socket with a symlink or another
// socket between rdmad's start and a reload.
func checkDir(dir string) error {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return fmt.Errorf("api: socket directory %s: %w", dir, err)
	}
	self := uint32(os.Geteuid())
	fix := fmt.Sprintf("chmod go-w %s (and chown root %s), or put the socket in a directory only root can write, such as /run/rdmad", dir, dir)
	if st.Uid != 0 && st.Uid != self {
		return fmt.Errorf("api: socket directory %s belongs to uid %d, who could replace rdmad's socket; %s", dir, st.Uid, fix)
	}
	sticky := st.Mode&unix.S_ISVTX != 0 && st.Uid == 0
	if sticky {
		// In a sticky directory only root (the owner) and the socket's
		// owner (rdmad) may rename or remove the socket.
		return nil
	}
	// This covers POSIX ACLs too: a named user or group entry can only
	// grant write when the ACL mask does, and the mask is what the mode's
	// group bits show.
	if st.Mode&0o022 != 0 {
		return fmt.Errorf("api: socket directory %s has mode %04o: other users can write it and replace rdmad's socket; %s", dir, st.Mode&0o7777, fix)
	}
	return nil
}

// POSIX ACLs as the kernel stores them in the system.posix_acl_access
// extended attribute (include/uapi/linux/posix_acl_xattr.h): a version
// word, then entries of (tag u16, perm u16, id u32), little-endian, sorted
// by tag and id.
const (
	aclXattr       = "system.posix_acl_access"
	aclVersion     = 2
	aclUserObj     = 0x01
	aclUser        = 0x02
	aclGroupObj    = 0x04
	aclGroup       = 0x08
	aclMask        = 0x10
	aclOther       = 0x20
	aclUndefinedID = 0xffffffff
	aclWrite       = 2
	aclRW          = 6
)

type aclEntry struct {
	tag, perm uint16
	id        uint32
}

func encodeACL(es []aclEntry) []byte {
	sort.Slice(es, func(i, j int) bool {
		if es[i].tag != es[j].tag {
			return es[i].tag < es[j].tag
		}
		return es[i].id < es[j].id
	})
	b := binary.LittleEndian.AppendUint32(nil, aclVersion)
	for _, e := range es {
		b = binary.LittleEndian.AppendUint16(b, e.tag)
		b = binary.LittleEndian.AppendUint16(b, e.perm)
		b = binary.LittleEndian.AppendUint32(b, e.id)
	}
	return b
}

// setAdminACL gives the admin group read and write on the socket at name
// with an ACL entry when it is not already the socket's group, and removes
// the ACL otherwise (so that an admin_group removed on reload loses access).
// Read and write on a socket file are what connect(2) checks.
func setAdminACL(name string, sgid, agid int64) error {
	if agid < 0 || agid == sgid {
		if err := unix.Removexattr(name, aclXattr); err != nil && !errors.Is(err, unix.ENODATA) && !errors.Is(err, unix.EOPNOTSUPP) {
			return fmt.Errorf("remove the ACL: %w", err)
		}
		return nil
	}
	acl := encodeACL([]aclEntry{
		{aclUserObj, aclRW, aclUndefinedID},
		{aclGroupObj, aclRW, aclUndefinedID},
		{aclGroup, aclRW, uint32(agid)},
		{aclMask, aclRW, aclUndefinedID},
		{aclOther, 0, aclUndefinedID},
	})
	if err := unix.Setxattr(name, aclXattr, acl, 0); err != nil {
		if errors.Is(err, unix.EOPNOTSUPP) {
			return fmt.Errorf("the file system does not support POSIX ACLs (%w); put the socket on tmpfs (/run/rdmad) or make the admins members of socket_group too", err)
		}
		return fmt.Errorf("set the ACL: %w", err)
	}
	return nil
}

// LookupGID resolves a group name (or number) to its gid; "" is -1.
func LookupGID(group string) (int64, error) {
	if group == "" {
		return -1, nil
	}
	g, err := user.LookupGroup(group)
	if err != nil {
		if n, nerr := strconv.ParseUint(group, 10, 32); nerr == nil && n != uint64(^uint32(0)) {
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
