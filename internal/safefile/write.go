package safefile

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// A WriteError says which step of WriteAtomic failed; Create is true when
// the new file could not be created (the directory is missing or not
// writable), for callers that say where the directory comes from.
type WriteError struct {
	Path   string // the file being replaced
	Create bool
	Err    error
}

func (e *WriteError) Error() string { return e.Err.Error() }
func (e *WriteError) Unwrap() error { return e.Err }

// WriteAtomic puts content at path through a new file in the same
// directory. The new file is created with O_EXCL|O_NOFOLLOW (nothing that
// exists, a symlink included, is opened) and rename(2) replaces the name
// itself: whatever is at path, a symlink too, nothing is written through
// it. The file gets mode perm exactly (whatever the umask) and is synced,
// with its directory, before WriteAtomic returns.
//
// A temporary file that a writer killed between its create and its rename
// left for path is removed first (RemoveStale): it is never renamed, and
// nothing else removes it.
func WriteAtomic(path string, content []byte, perm uint32) (err error) {
	dir := filepath.Dir(path)
	RemoveStale(dir, filepath.Base(path))
	var rnd [8]byte
	rand.Read(rnd[:])
	tmp := filepath.Join(dir, "."+filepath.Base(path)+".tmp-"+hex.EncodeToString(rnd[:]))
	fd, err := unix.Open(tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, perm)
	if err != nil {
		return &WriteError{Path: path, Create: true, Err: &fs.PathError{Op: "create", Path: tmp, Err: err}}
	}
	f := os.NewFile(uintptr(fd), tmp)
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	fail := func(op string, err error) error {
		// The os.File methods' errors name the operation and the file
		// already ("write /x/.f.tmp-…: no space left on device").
		if _, ok := err.(*fs.PathError); ok {
			return &WriteError{Path: path, Err: err}
		}
		return &WriteError{Path: path, Err: fmt.Errorf("%s %s: %w", op, tmp, err)}
	}
	if _, err := f.Write(content); err != nil {
		return fail("write", err)
	}
	// The umask may have taken bits off (or left some on): the caller's
	// mode is the one meant.
	if err := f.Chmod(fs.FileMode(perm)); err != nil {
		return fail("chmod", err)
	}
	if err := f.Sync(); err != nil {
		return fail("sync", err)
	}
	if err := f.Close(); err != nil {
		return fail("close", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return &WriteError{Path: path, Err: fmt.Errorf("replace %s: %w", path, err)}
	}
	SyncDir(dir)
	return nil
}

// SyncDir makes a rename or unlink in dir durable.
func SyncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}

// RemoveStale removes from dir the temporary files WriteAtomic made for
// the file named base and never renamed (a writer killed in between), or
// for any file when base is "": regular files named ".<base>.tmp-" and 16
// hex digits, nothing else (a symlink of that name is left alone). It
// returns the names it removed.
func RemoveStale(dir, base string) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var removed []string
	for _, e := range ents {
		name := e.Name()
		i := strings.LastIndex(name, ".tmp-")
		if !strings.HasPrefix(name, ".") || i < 2 || !isHex16(name[i+len(".tmp-"):]) || !e.Type().IsRegular() {
			continue
		}
		if base != "" && name[1:i] != base {
			continue
		}
		if os.Remove(filepath.Join(dir, name)) == nil {
			removed = append(removed, name)
		}
	}
	return removed
}

func isHex16(s string) bool {
	if len(s) != 16 {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
