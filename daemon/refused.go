package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/internal/safefile"
)

// The configuration keys of the input files whose refusal the status
// carries (apitype.RefusedFile.Key). The configuration files themselves
// are not among them: a refused one rejects the whole load, which
// ConfigInvalid reports with the file and line.
const (
	inputPeersFile = "probe.peers_file"
	inputKeyFile   = "probe.key_file"
)

// An inputError is a file whose content rdmad refused: the key file's
// short key or too many keys, the peers file's bad lines. It keeps what is
// wrong and the fix apart, for the status (apitype.RefusedFile), and says
// both in one line, as the journal and --check-config have it.
type inputError struct {
	// prefix names the file as the journal always has ("[probe] key_file
	// /etc/rdmad/fleet.key:3").
	prefix string
	why    string
	fix    string
}

func (e *inputError) Error() string { return e.prefix + ": " + e.why + "; " + e.fix }

// noteInput records in the status the outcome of the last read of the
// input file path that configuration key names: err nil (or path empty:
// the file is not read at all) takes its refusal back, otherwise it is
// refused and kept says what runs instead. The verdict's InputRefused
// condition and rdmactl status's lines are made from it. secret is true
// for a key file (no permission for group or others at all). Runs on the
// main loop, like every read of these files.
func (d *Daemon) noteInput(key, path string, err error, secret bool, kept string) {
	var f *apitype.RefusedFile
	if path != "" && err != nil {
		why, fix := refusalOf(path, err, secret)
		f = &apitype.RefusedFile{Key: key, Path: path, Why: why, Fix: fix, Kept: kept, Error: err.Error()}
	}
	now := time.Now()
	d.store.Update(func(s *apitype.Snapshot) { s.RefusedFiles = withRefusal(s.RefusedFiles, key, f, now) })
}

// withRefusal returns list with key's entry replaced by f (removed when f
// is nil), in key order. A refusal for the same file and reason keeps its
// Since. list is a published snapshot's: it is copied, never changed.
func withRefusal(list []apitype.RefusedFile, key string, f *apitype.RefusedFile, now time.Time) []apitype.RefusedFile {
	out := make([]apitype.RefusedFile, 0, len(list)+1)
	for _, o := range list {
		if o.Key != key {
			out = append(out, o)
			continue
		}
		if f != nil && o.Path == f.Path && o.Why == f.Why {
			f.Since = o.Since
		}
	}
	if f != nil {
		if f.Since.IsZero() {
			f.Since = now
		}
		out = append(out, *f)
	}
	slices.SortFunc(out, func(a, b apitype.RefusedFile) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// refusalOf says in a few words why reading path failed with err and what
// to do, for the status: the file's owner and mode as they are now for a
// file refused as insecure (safefile's error has them only in its text),
// its type, its size, the lines of its content.
func refusalOf(path string, err error, secret bool) (why, fix string) {
	const reload = ", then rdmactl reload"
	var ie *inputError
	if errors.As(err, &ie) {
		return ie.why, ie.fix + reload
	}
	var se *safefile.Error
	msg := err.Error()
	if errors.As(err, &se) {
		msg = se.Msg
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if secret {
			return "does not exist", fmt.Sprintf("create it on every node: `(umask 077; head -c 32 /dev/urandom | base64 > %s)`%s", path, reload)
		}
		return "does not exist", "create it, or remove [probe] peers_file" + reload
	case errors.Is(err, safefile.ErrInsecure):
		return insecure(path, secret)
	case errors.Is(err, safefile.ErrNotRegular):
		what, _, _ := strings.Cut(strings.TrimPrefix(msg, "is "), ";")
		// safefile says "a FIFO (named pipe), not a regular file".
		return what, "replace it with a regular file" + reload
	case errors.Is(err, safefile.ErrSymlink):
		return "a symbolic link, which rdmad does not follow here", "replace it with the file itself" + reload
	case errors.Is(err, safefile.ErrTooLarge):
		what, _, _ := strings.Cut(strings.TrimPrefix(msg, "is "), ";")
		return what, "shorten it or split it" + reload
	case errors.Is(err, fs.ErrPermission):
		return msg, "make it and its directories readable by root" + reload
	}
	return msg, "check the file" + reload
}

// insecure says who may write (or, for a secret, read) path besides root,
// from its owner and mode now, and the commands that fix exactly that. A
// file fixed since its refusal gets safefile's fix in full: the next read
// takes it.
func insecure(path string, secret bool) (why, fix string) {
	chown := "chown root: " + path
	chmod, bits, who := "chmod go-w "+path, os.FileMode(0o022), "writable by group or others"
	if secret {
		chmod, bits, who = "chmod 600 "+path, 0o077, "readable or writable by group or others"
	}
	fi, err := os.Stat(path)
	if err != nil {
		return "readable or writable by others than root", chown + " && " + chmod + ", then rdmactl reload"
	}
	var whys, fixes []string
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 {
		whys = append(whys, fmt.Sprintf("owned by uid %d, not root", st.Uid))
		fixes = append(fixes, chown)
	}
	if mode := fi.Mode().Perm(); mode&bits != 0 {
		whys = append(whys, fmt.Sprintf("%s (mode %04o)", who, mode))
		fixes = append(fixes, chmod)
	}
	if len(whys) == 0 {
		return "readable or writable by others than root when it was read", chown + " && " + chmod + ", then rdmactl reload"
	}
	why = strings.Join(whys, " and ")
	if secret {
		why += ": a key others can read is no secret"
	} else {
		why += ": it decides whom rdmad trusts"
	}
	return why, strings.Join(fixes, " && ") + ", then rdmactl reload"
}

// clearInputs takes back the refusals of the peers and key files: the
// configuration in force reads neither (the peer probes are off or have
// nobody to probe).
func (d *Daemon) clearInputs() {
	d.noteInput(inputPeersFile, "", nil, false, "")
	d.noteInput(inputKeyFile, "", nil, true, "")
}
