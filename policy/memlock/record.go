package memlock

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"

	"github.com/rdmad/rdmad/internal/safefile"
)

// RecordName is the file in rdmad's state directory that lists the limits
// files rdmad wrote. The package scripts (packaging/scripts) read it on
// purge and erase: keep its format (comment lines starting with '#', then
// one absolute path a line) in step with them.
const RecordName = "limits-files"

const recordHeader = "# Limits files rdmad wrote ([memlock] limits_file), one path a line.\n" +
	"# rdmad removes the ones no longer configured, if they still carry its header;\n" +
	"# purging or erasing the package removes those under /etc/security/limits.d/.\n" +
	"# Do not edit.\n"

// maxRecord bounds what rdmad reads of its record.
const maxRecord = 64 << 10

// A Record is the list of limits files rdmad wrote, kept in its state
// directory: a file left at an old limits_file path, moved while rdmad was
// stopped, is found again at the next start, and the package scripts find
// every file rdmad wrote on purge and erase. The zero Record lives in
// memory only. It is not safe for concurrent use.
type Record struct {
	path  string
	paths []string // sorted, unique
	// dirty says the file is behind paths: a save failed.
	dirty bool
}

// LoadRecord reads the record at path (in the state directory; see
// RecordName). A missing file is an empty record. A record that cannot be
// read, or a line that is not a path CheckRecordPath accepts, is an error,
// but the Record returned is always usable: it holds what could be read,
// and its next change rewrites the file.
func LoadRecord(path string) (*Record, error) {
	r := &Record{path: path}
	b, _, err := safefile.Read(path, safefile.Options{Max: maxRecord, NoFollow: true})
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return r, nil
	case err != nil:
		r.dirty = true
		return r, fmt.Errorf("memlock: limits file record: %w; rdmad rewrites it", err)
	}
	var bad []string
	for i, line := range strings.Split(string(b), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		if err := CheckRecordPath(line); err != nil {
			bad = append(bad, fmt.Sprintf("line %d: %v", i+1, err))
			continue
		}
		if j, found := slices.BinarySearch(r.paths, line); !found {
			r.paths = slices.Insert(r.paths, j, line)
		}
	}
	if bad != nil {
		r.dirty = true
		return r, fmt.Errorf("memlock: limits file record %s: %s; rdmad drops those lines", path, strings.Join(bad, "; "))
	}
	return r, nil
}

// CheckRecordPath reports whether p may be in the record: an absolute,
// clean path (no "..", no "//", no trailing '/') without control
// characters, so that it is one line and names one file.
func CheckRecordPath(p string) error {
	switch {
	case !filepath.IsAbs(p):
		return fmt.Errorf("%q is not an absolute path", p)
	case filepath.Clean(p) != p:
		return fmt.Errorf("%q is not a clean path (it would be %q)", p, filepath.Clean(p))
	case p == "/":
		return errors.New(`"/" is not a file`)
	}
	for i := 0; i < len(p); i++ {
		if p[i] < 0x20 || p[i] == 0x7f {
			return fmt.Errorf("%q has a control character at byte %d", p, i)
		}
	}
	return nil
}

// Path is where the record is kept, "" when in memory only.
func (r *Record) Path() string { return r.path }

// Paths lists the recorded limits files, sorted.
func (r *Record) Paths() []string { return slices.Clone(r.paths) }

// Has reports whether p is recorded.
func (r *Record) Has(p string) bool {
	_, found := slices.BinarySearch(r.paths, p)
	return found
}

// Add records p before rdmad writes a limits file there. A save that
// failed before is tried again. An error leaves p recorded in memory.
func (r *Record) Add(p string) error {
	if err := CheckRecordPath(p); err != nil {
		return fmt.Errorf("memlock: limits file record: %w", err)
	}
	j, found := slices.BinarySearch(r.paths, p)
	if found && !r.dirty {
		return nil
	}
	if !found {
		r.paths = slices.Insert(r.paths, j, p)
	}
	return r.save()
}

// Drop forgets p, once no file of rdmad's is left there.
func (r *Record) Drop(p string) error {
	j, found := slices.BinarySearch(r.paths, p)
	if !found && !r.dirty {
		return nil
	}
	if found {
		r.paths = slices.Delete(r.paths, j, j+1)
	}
	return r.save()
}

// save writes the record atomically. The state directory is systemd's
// (StateDirectory=) or the package's (tmpfiles.d): rdmad does not create
// it, and without it keeps the record in memory.
func (r *Record) save() error {
	if r.path == "" {
		return nil
	}
	r.dirty = true
	var b bytes.Buffer
	b.WriteString(recordHeader)
	for _, p := range r.paths {
		b.WriteString(p)
		b.WriteByte('\n')
	}
	if err := writeAtomic(r.path, b.Bytes(), 0o644, "rdmad.service creates it (StateDirectory=rdmad)"); err != nil {
		return fmt.Errorf("%w; until it is saved, a limits file rdmad wrote is not found again after a restart with another limits_file, nor on package purge", err)
	}
	r.dirty = false
	return nil
}
