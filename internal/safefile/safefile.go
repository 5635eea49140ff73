// Package safefile reads files that rdmad does not control the type or size
// of: its configuration, drop-ins, the peers file and key files. Whoever can
// put a name there can put a FIFO (an open for reading blocks until a writer
// comes: the daemon's main loop would hang), a terminal (an open without
// O_NOCTTY can make it rdmad's controlling terminal), /dev/zero (endless) or
// a huge file there. Every read here opens without blocking, checks the
// type of the file it actually opened (fstat, not a stat of the name that
// may be swapped in between) and reads at most a bound.
package safefile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// Errors a caller may test with errors.Is. A missing file wraps
// fs.ErrNotExist.
var (
	ErrNotRegular = errors.New("not a regular file")
	ErrTooLarge   = errors.New("file too large")
	ErrSymlink    = errors.New("is a symbolic link")
	ErrInsecure   = errors.New("readable or writable by others than root")
)

// An Error says which file could not be read, why, and what to do.
type Error struct {
	Path string
	// Msg is what is wrong and what to do, without the path.
	Msg string
	// Err is the cause (an errno, or one of the Err* values above).
	Err error
}

func (e *Error) Error() string { return e.Path + ": " + e.Msg }
func (e *Error) Unwrap() error { return e.Err }

// Options say how a file may look.
type Options struct {
	// Max is the most bytes the file may hold; a larger file is an error
	// (ErrTooLarge), not a truncated read. Must be > 0.
	Max int64
	// NoFollow refuses a symbolic link as the last element of the path
	// (ErrSymlink) instead of reading what it points to. Files rdmad
	// itself manages use it; files the admin points rdmad to do not (a
	// symlink there is the admin's choice).
	NoFollow bool
	// Secret requires the opened file to be owned by root and to have no
	// permission bits for group or others (ErrInsecure): a key that others
	// can read is not secret, and one they can write is not the admin's.
	Secret bool
	// RootWritable requires the opened file to be owned by root and to
	// have no write permission for group or others (ErrInsecure): for a
	// file that decides whom rdmad trusts (the peers file sets the allow
	// list), which others may read but only root may change.
	RootWritable bool
	// Trusted requires the opened file to be owned by root or by this
	// process's user and to have no write permission for group or others
	// (ErrInsecure): for the configuration, which decides what rdmad does
	// as root (policy, the admin group, allow lists) and so must be no
	// one else's to change.
	Trusted bool
}

// ReadRegular reads the regular file at path (following symlinks), at most
// max bytes.
func ReadRegular(path string, max int64) ([]byte, error) {
	b, _, err := Read(path, Options{Max: max})
	return b, err
}

// ReadSecret reads a key file: a regular file of at most max bytes, owned
// by root, mode 0600 or stricter.
func ReadSecret(path string, max int64) ([]byte, error) {
	b, _, err := Read(path, Options{Max: max, Secret: true})
	return b, err
}

// Read reads the file at path as o allows and returns its content and the
// fstat of the file it read (for callers that must compare it with what is
// at the path later).
func Read(path string, o Options) ([]byte, fs.FileInfo, error) {
	if o.Max <= 0 {
		return nil, nil, &Error{Path: path, Msg: "internal error: no read bound", Err: ErrTooLarge}
	}
	flags := unix.O_RDONLY | unix.O_NONBLOCK | unix.O_CLOEXEC | unix.O_NOCTTY
	if o.NoFollow {
		flags |= unix.O_NOFOLLOW
	}
	// A look at the name first, so that a device is never opened at all
	// (opening one can have effects: a tape rewinds, a modem line is
	// raised). The check that counts is the fstat of the opened file below:
	// the name may be swapped in between.
	var pre unix.Stat_t
	var err error
	if o.NoFollow {
		err = unix.Lstat(path, &pre)
	} else {
		err = unix.Stat(path, &pre)
	}
	if err == nil && pre.Mode&unix.S_IFMT == unix.S_IFLNK {
		return nil, nil, symlinkError(path)
	}
	if err == nil && pre.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, nil, notRegular(path, pre.Mode)
	}
	var fd int
	for {
		fd, err = unix.Open(path, flags, 0)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		if o.NoFollow && err == unix.ELOOP {
			return nil, nil, symlinkError(path)
		}
		// Keep the errno so that errors.Is(err, fs.ErrNotExist) works.
		return nil, nil, &Error{Path: path, Msg: openHint(err), Err: err}
	}
	// A regular file never blocks, so blocking mode is restored for plain
	// reads; anything else is refused below before the first read.
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, nil, &Error{Path: path, Msg: "fstat: " + err.Error(), Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, nil, notRegular(path, st.Mode)
	}
	if o.Secret && (st.Uid != 0 || st.Mode&0o077 != 0) {
		return nil, nil, &Error{Path: path,
			Msg: fmt.Sprintf("is owned by uid %d with mode %04o; a secret must be owned by root and private: chown root: %s && chmod 600 %s",
				st.Uid, st.Mode&0o7777, path, path),
			Err: ErrInsecure}
	}
	if o.RootWritable && (st.Uid != 0 || st.Mode&0o022 != 0) {
		return nil, nil, &Error{Path: path,
			Msg: fmt.Sprintf("is owned by uid %d with mode %04o; it decides whom rdmad trusts, so only root may write it: chown root: %s && chmod go-w %s",
				st.Uid, st.Mode&0o7777, path, path),
			Err: ErrInsecure}
	}
	if o.Trusted {
		if err := trustedMode(path, st.Uid, st.Mode); err != nil {
			return nil, nil, err
		}
	}
	if st.Size > o.Max {
		return nil, nil, tooLarge(path, o.Max)
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		return nil, nil, &Error{Path: path, Msg: "fcntl: " + err.Error(), Err: err}
	}
	// The size from fstat is a hint only (the file may grow, /proc files
	// say 0): read one byte past the bound to tell "exactly max" from
	// "more".
	b, err := io.ReadAll(io.LimitReader(f, o.Max+1))
	if err != nil {
		return nil, nil, &Error{Path: path, Msg: "read: " + err.Error(), Err: err}
	}
	if int64(len(b)) > o.Max {
		return nil, nil, tooLarge(path, o.Max)
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, &Error{Path: path, Msg: "fstat: " + err.Error(), Err: err}
	}
	return b, fi, nil
}

// trustedMode is Options.Trusted's check of a file or directory: owned by
// root or this process's user, writable by nobody else.
func trustedMode(path string, uid, mode uint32) error {
	if (uid == 0 || int(uid) == os.Geteuid()) && mode&0o022 == 0 {
		return nil
	}
	return &Error{Path: path,
		Msg: fmt.Sprintf("is owned by uid %d with mode %04o; it decides what rdmad does as root, so only root may write it: chown root: %s && chmod go-w %s",
			uid, mode&0o7777, path, path),
		Err: ErrInsecure}
}

// CheckTrustedDir reports an error unless the directory at path (followed
// if a symlink) is owned by root or this process's user and writable by
// nobody else, or sticky (as /tmp: others may add files there, which the
// file check refuses, but not rename or remove this user's): whoever may
// write a configuration directory may remove or rename the files in it. A
// missing directory is no error.
func CheckTrustedDir(path string) error {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		if err == unix.ENOENT {
			return nil
		}
		return &Error{Path: path, Msg: openHint(err), Err: err}
	}
	if st.Mode&unix.S_ISVTX != 0 && (st.Uid == 0 || int(st.Uid) == os.Geteuid()) {
		return nil
	}
	return trustedMode(path, st.Uid, st.Mode)
}

func notRegular(path string, mode uint32) error {
	return &Error{Path: path,
		Msg: fmt.Sprintf("is a %s, not a regular file; rdmad reads only regular files here (replace it with a file)", kind(mode)),
		Err: ErrNotRegular}
}

func symlinkError(path string) error {
	return &Error{Path: path, Msg: "is a symbolic link, which rdmad does not follow here; replace it with the file itself",
		Err: ErrSymlink}
}

func tooLarge(path string, max int64) error {
	return &Error{Path: path, Msg: fmt.Sprintf("is larger than %s, the most rdmad reads here; shorten it or split it", human(max)),
		Err: ErrTooLarge}
}

func openHint(err error) string {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "does not exist"
	case err == unix.ENXIO:
		// open(2) of a Unix socket, or of a device without a driver.
		return "is a socket or a device, not a regular file; rdmad reads only regular files here (replace it with a file)"
	case errors.Is(err, fs.ErrPermission):
		return "permission denied (" + err.Error() + ")"
	}
	return err.Error()
}

func kind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return "FIFO (named pipe)"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFCHR:
		return "character device"
	case unix.S_IFBLK:
		return "block device"
	case unix.S_IFDIR:
		return "directory"
	case unix.S_IFLNK:
		return "symbolic link"
	}
	return fmt.Sprintf("file of type %#o", mode&unix.S_IFMT)
}

func human(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
