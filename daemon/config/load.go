package config

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"os/user"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/BurntSushi/toml"

	"github.com/rdmad/rdmad/internal/safefile"
	"github.com/rdmad/rdmad/policy/memlock"
)

// An Error is one problem in one configuration file.
type Error struct {
	File string
	Line int    // 0 when unknown
	Key  string // dotted key, with [i] for the i-th [[block]] of the file
	Msg  string
	// Host: the problem is of the host the files were checked on (a group
	// that does not exist here), not of the files. rdmad refuses to start
	// on such a host all the same; rdmad --check-config reports it as a
	// warning, since a file checked in CI or a pre-commit hook is for
	// other hosts.
	Host bool
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	if e.Key != "" {
		b.WriteString(": ")
		b.WriteString(e.Key)
	}
	b.WriteString(": ")
	b.WriteString(e.Msg)
	return b.String()
}

// Errors is every problem found in one load, in file order.
type Errors []*Error

func (es Errors) Error() string {
	s := make([]string, len(es))
	for i, e := range es {
		s[i] = e.Error()
	}
	return strings.Join(s, "\n")
}

// Bounds on what a configuration can make rdmad read and hold. A file is
// written by root, but a mistake (a log file copied into rdmad.d/, a
// generated file gone wrong) must not take the daemon down or stall its
// main loop: beyond a bound the load fails like any bad file and the last
// good configuration stays.
const (
	// MaxFileSize is the most bytes of one file (main or drop-in); the
	// documented default file is about 10 KiB.
	MaxFileSize = 1 << 20
	// MaxDropIns is the most drop-ins rdmad.d/ may hold.
	MaxDropIns = 256
	// MaxDepth is the deepest nesting of arrays and inline tables in a
	// value, and the most parts of a dotted key or table name. rdmad's own
	// keys need 3; the TOML decoder's cost grows with depth (quadratically
	// for dotted keys), and a deep value once overflowed the stack.
	MaxDepth = 32
	// maxErrors is the most problems one load lists; a file of 100,000
	// unknown keys is reported by its first ones, not in full.
	maxErrors = 20
)

// Load reads the main file at path and the drop-ins next to it, merges them
// (later files win: tables key by key, [[policy]] blocks by name) and
// validates the result. A missing main file is an error that wraps
// fs.ErrNotExist; a missing drop-in directory is not. Files are read with
// safefile: a FIFO, a device or a file over MaxFileSize is an error naming
// it, never a hang.
func Load(path string) (*Config, error) {
	return loadPath(path, true)
}

func loadPath(path string, hostChecks bool) (*Config, error) {
	files, err := filepath.Glob(DropIns(path))
	if err != nil {
		return nil, fmt.Errorf("config: list drop-ins of %s: %w", path, err)
	}
	if len(files) > MaxDropIns {
		return nil, Errors{{File: filepath.Dir(files[0]),
			Msg: fmt.Sprintf("holds %d drop-ins (*.toml); rdmad reads at most %d: merge them into fewer files", len(files), MaxDropIns)}}
	}
	sort.Strings(files)
	files = append([]string{path}, files...)
	return loadWith(files, func(f string) ([]byte, error) { return safefile.ReadRegular(f, MaxFileSize) }, hostChecks)
}

// Check loads as Load does, for rdmad --check-config: when every problem
// is of the host rather than of the files (Error.Host), it returns the
// configuration too, with those problems as warnings, so that the caller
// can check what the configuration names (its key and peers files) as a
// start would.
func Check(path string) (cfg *Config, warnings Errors, err error) {
	cfg, err = Load(path)
	var es Errors
	if err == nil || !errors.As(err, &es) {
		return cfg, nil, err
	}
	for _, e := range es {
		if !e.Host {
			return nil, nil, err
		}
	}
	// Every problem is the host's: load again without the host's checks.
	cfg, err = loadPath(path, false)
	return cfg, es, err
}

// load merges and validates files, main file first, each read with read.
func load(files []string, read func(string) ([]byte, error)) (*Config, error) {
	return loadWith(files, read, true)
}

// loadWith is load; hostChecks false leaves out the checks of the host
// (Error.Host), for Check.
func loadWith(files []string, read func(string) ([]byte, error), hostChecks bool) (*Config, error) {
	cfg := Default()
	locs := map[string]*locator{}
	var errs Errors
	// decoded: every file parsed and its values fit their types, so the
	// values can be validated; unknown keys alone do not stop that (an
	// operator fixing a typo must not learn of a bad value only after).
	decoded := true
	for i, f := range files {
		if len(errs) >= maxErrors {
			// The load has failed already; reading on would only cost.
			errs = append(errs, &Error{File: f, Msg: "not read: too many problems in the files before it; fix those first"})
			break
		}
		data, err := read(f)
		if err != nil {
			if i == 0 && errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("config: read %s: %w", f, err)
			}
			// A drop-in that vanished between Glob and the read (an
			// editor renaming it) is not part of this load.
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			errs = append(errs, readError(f, err))
			decoded = false
			continue
		}
		if line, key, msg := checkNesting(data); msg != "" {
			errs = append(errs, &Error{File: f, Line: line, Key: key, Msg: msg})
			decoded = false
			continue
		}
		cfg.Files = append(cfg.Files, f)
		cfg.raw = append(cfg.raw, data)
		locs[f] = newLocator(data)
		ferrs, ok := decodeFile(cfg, f, data, locs[f])
		errs = append(errs, ferrs...)
		decoded = decoded && ok
	}
	if decoded && len(errs) < maxErrors {
		errs = append(errs, besideUnknown(errs, cfg.validate(locs, hostChecks))...)
	}
	if len(errs) > 0 {
		nameBlocks(errs, locs, cfg)
		return nil, capErrors(errs)
	}
	return cfg, nil
}

var blockRE = regexp.MustCompile(`^policy\[(\d+)\]`)

// nameBlocks names the [[policy]] block of each error by its name, as
// status and the logs do (policy "fabric".mtu), instead of its index in
// the file (policy[3].mtu). A block without a name keeps its index.
func nameBlocks(errs Errors, locs map[string]*locator, cfg *Config) {
	raw := make(map[string][]byte, len(cfg.Files))
	for i, f := range cfg.Files {
		raw[f] = cfg.raw[i]
	}
	for _, e := range errs {
		m := blockRE.FindStringSubmatch(e.Key)
		if m == nil || locs[e.File] == nil {
			continue
		}
		if _, line := locs[e.File].find(m[0] + ".name"); line > 0 {
			v := valueOn(lineText(raw[e.File], line), "name")
			if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
				e.Key = "policy " + v + e.Key[len(m[0]):]
			}
		}
	}
}

// readError turns a failed read of a configuration file into an *Error that
// names the file once and says what to do.
func readError(file string, err error) *Error {
	var se *safefile.Error
	if errors.As(err, &se) {
		return &Error{File: file, Msg: se.Msg}
	}
	return &Error{File: file, Msg: err.Error()}
}

// capErrors keeps the first maxErrors problems and says how many more there
// are: the list goes to status, D-Bus and the journal.
func capErrors(errs Errors) Errors {
	if len(errs) <= maxErrors {
		return errs
	}
	more := len(errs) - maxErrors
	last := errs[maxErrors-1]
	errs = append(errs[:maxErrors:maxErrors], &Error{File: last.File,
		Msg: fmt.Sprintf("and %d more problems not listed; fix these first", more)})
	return errs
}

// checkNesting scans a TOML document for nesting deeper than MaxDepth before
// the decoder sees it: arrays and inline tables inside each other, and
// dotted keys or table names of many parts. It knows just enough TOML for
// that: the four kinds of strings (brackets and dots in them do not count),
// comments, and whether a dot is in a key or in a value (1.5). It returns
// the line the offending value or key starts on and what is wrong, or "".
// A document that is malformed in other ways is left to the decoder.
func checkNesting(data []byte) (line int, key, msg string) {
	const (
		inKey   = iota // a key, a table header or before one
		inValue        // after '=' or inside an array
	)
	var stack []byte // the open '[' and '{'
	ctx := inKey
	parts := 1      // parts of the key being read
	lineNo := 1     // current line
	startLine := 1  // line where the current statement started
	header := false // reading a [table] or [[table]] name
	atStart := true // only whitespace since the statement started
	n := len(data)
	for i := 0; i < n; i++ {
		c := data[i]
		switch c {
		case '\n':
			lineNo++
			if len(stack) == 0 {
				// A statement ends with its line unless a value is open.
				ctx, parts, header, atStart = inKey, 1, false, true
				startLine = lineNo
			}
			continue
		case ' ', '\t', '\r':
			continue
		case '#':
			for i < n && data[i] != '\n' {
				i++
			}
			i-- // the newline is handled above
			continue
		case '"', '\'':
			// Skip a string of any of the four kinds, counting its
			// newlines.
			multi := i+2 < n && data[i+1] == c && data[i+2] == c
			if multi {
				i += 3
				for i < n && !(data[i] == c && i+2 < n && data[i+1] == c && data[i+2] == c) {
					if data[i] == '\\' && c == '"' {
						if i+1 < n && data[i+1] == '\n' {
							lineNo++
						}
						i++
					} else if data[i] == '\n' {
						lineNo++
					}
					i++
				}
				i += 2
				// Up to two more quotes belong to the string ("""a"""").
				for k := 0; k < 2 && i+1 < n && data[i+1] == c; k++ {
					i++
				}
			} else {
				i++
				for i < n && data[i] != c && data[i] != '\n' {
					if data[i] == '\\' && c == '"' {
						i++
					}
					i++
				}
				if i < n && data[i] == '\n' {
					i-- // unterminated: the decoder reports it
				}
			}
			atStart = false
			continue
		}
		if atStart && len(stack) == 0 && c == '[' {
			header = true
		}
		atStart = false
		switch {
		case header:
			switch c {
			case '.':
				parts++
			}
		case ctx == inKey:
			switch c {
			case '.':
				parts++
			case '=':
				ctx = inValue
			case '}':
				// {} : an empty inline table.
				if len(stack) > 0 {
					stack = stack[:len(stack)-1]
					ctx = inValue
				}
			}
		default: // inValue
			switch c {
			case '[', '{':
				stack = append(stack, c)
				if len(stack) > MaxDepth {
					return startLine, keyOn(data, startLine), fmt.Sprintf("arrays and inline tables are nested more than %d deep (line %d); rdmad's keys need at most 3, so flatten the value", MaxDepth, lineNo)
				}
				if c == '{' {
					ctx, parts = inKey, 1
				}
			case ']', '}':
				if len(stack) > 0 {
					stack = stack[:len(stack)-1]
				}
				ctx = inValue
			case ',':
				if len(stack) > 0 && stack[len(stack)-1] == '{' {
					ctx, parts = inKey, 1
				}
			}
		}
		if parts > MaxDepth {
			// No key shown: it is the offending (maybe megabyte-long) name.
			return startLine, "", fmt.Sprintf("a key or table name has more than %d dotted parts (line %d); rdmad's keys have at most 3", MaxDepth, lineNo)
		}
	}
	return 0, "", ""
}

// keyOn returns the key set on line of data, or "". The locator is built
// from the lines up to it, each cut to 4 KiB: only the key's name is
// wanted, and the locator's cost grows with the square of a header's parts
// (a 1 MiB header of 500,000 parts would take hours).
func keyOn(data []byte, line int) string {
	lines := bytes.SplitN(data, []byte("\n"), line+1)
	if len(lines) > line {
		lines = lines[:line]
	}
	for i, l := range lines {
		if len(l) > 4096 {
			lines[i] = l[:4096]
		}
	}
	l := newLocator(bytes.Join(lines, []byte("\n")))
	key := ""
	for k, n := range l.lines {
		if n == line && (key == "" || k < key) {
			key = k
		}
	}
	return key
}

// decodeFile merges one file into cfg. ok is false when the file could not
// be decoded (a syntax error, a value of the wrong type): its values are
// not in cfg, and validating them would report what is not there. Unknown
// keys leave ok true.
func decodeFile(cfg *Config, file string, data []byte, loc *locator) (errs Errors, ok bool) {
	prev := cfg.Policies
	cfg.Policies = nil
	prevPeers := cfg.Peers
	cfg.Peers = nil
	md, err := toml.NewDecoder(strings.NewReader(string(data))).Decode(cfg)
	added := cfg.Policies
	cfg.Policies = prev
	// [[peer]] blocks of all files add up; a repeated address is one peer
	// (the later block's group wins). Merged through an index: a file of
	// 40,000 blocks must not cost 40,000 scans of the blocks before it.
	peerAt := make(map[string]int, len(prevPeers))
	for i, p := range prevPeers {
		peerAt[p.Address] = i
	}
	for i, p := range cfg.Peers {
		cfg.Peers[i].src = source{file: file, index: i}
		if j, ok := peerAt[p.Address]; ok {
			prevPeers[j] = cfg.Peers[i]
			continue
		}
		peerAt[p.Address] = len(prevPeers)
		prevPeers = append(prevPeers, cfg.Peers[i])
	}
	cfg.Peers = prevPeers
	if err != nil {
		e := decodeError(file, err)
		e.Key = loc.at(e.Key, e.Line)
		wrongTypeBlock(e, data, loc)
		e.Msg = plainType(e.Msg, e.Key, lineText(data, e.Line))
		duplicateKey(e, loc)
		return Errors{e}, false
	}
	undecoded := md.Undecoded()
	if len(undecoded) > maxErrors {
		// Each lookup scans the file's keys: list the first ones only.
		errs = append(errs, &Error{File: file,
			Msg: fmt.Sprintf("%d unknown keys in all; the first %d follow", len(undecoded), maxErrors)})
		undecoded = undecoded[:maxErrors]
	}
	unknownTable := map[string]bool{}
	for _, k := range undecoded {
		key := strings.Join(k, ".")
		// The keys of an unknown table are not listed one by one: the
		// table's own error says it all.
		if under(unknownTable, k) {
			continue
		}
		typ := md.Type(k...)
		isTable := typ == "Hash" || typ == "ArrayHash"
		if isTable {
			unknownTable[key] = true
		}
		// A key outside [[arrays]] is found directly; find's search for
		// an indexed form scans every key of the file.
		line, ok := loc.lines[key]
		if !ok {
			key, line = loc.find(key)
		}
		errs = append(errs, &Error{File: file, Line: line, Key: key,
			Msg: unknownKeyMsg(k, isTable)})
	}
	seen := map[string]int{}
	policyAt := make(map[string]int, len(cfg.Policies))
	for i, p := range cfg.Policies {
		if p.Name != "" {
			policyAt[p.Name] = i
		}
	}
	dups := 0
	for i := range added {
		p := added[i]
		p.src = source{file: file, index: i}
		if p.Name != "" {
			if j, dup := seen[p.Name]; dup {
				_, j = loc.find(fmt.Sprintf("policy[%d].name", j))
				if dups++; dups <= maxErrors {
					key, line := loc.find(fmt.Sprintf("policy[%d].name", i))
					errs = append(errs, &Error{File: file, Line: line, Key: key,
						Msg: fmt.Sprintf("policy %q is declared twice in this file (also at line %d); give each block its own name", clip(p.Name), j)})
				}
				continue
			}
			seen[p.Name] = i
		}
		// A policy of the same name as an earlier file's replaces it in
		// place (cfg.Policies belongs to this load alone).
		if j, ok := policyAt[p.Name]; ok && p.Name != "" {
			cfg.Policies[j] = p
			continue
		}
		if p.Name != "" {
			policyAt[p.Name] = len(cfg.Policies)
		}
		cfg.Policies = append(cfg.Policies, p)
	}
	if dups > maxErrors {
		errs = append(errs, &Error{File: file, Msg: fmt.Sprintf("and %d more policies declared twice", dups-maxErrors)})
	}
	return errs, true
}

// under reports whether one of k's parents is in tables.
func under(tables map[string]bool, k []string) bool {
	for i := 1; i < len(k); i++ {
		if tables[strings.Join(k[:i], ".")] {
			return true
		}
	}
	return false
}

// lineText returns line n (from 1) of data, or "".
func lineText(data []byte, n int) string {
	if n < 1 {
		return ""
	}
	for i := 1; i < n; i++ {
		j := bytes.IndexByte(data, '\n')
		if j < 0 {
			return ""
		}
		data = data[j+1:]
	}
	if j := bytes.IndexByte(data, '\n'); j >= 0 {
		data = data[:j]
	}
	return string(data)
}

// wrongTypeBlock points a type error in an array of tables ([[policy]])
// at the block whose value has the wrong type. The decoder knows a key's
// position by its dotted name alone, so it names the line of the last
// block that sets the key, whose value may be fine ("policy "b".mtu: mtu
// must be an integer, not 9000" for block a's mtu = "1500"): the first
// block whose value, as written, is of the type the decoder found is the
// one.
func wrongTypeBlock(e *Error, data []byte, loc *locator) {
	m := incompatibleRE.FindStringSubmatch(e.Msg)
	if m == nil || loc == nil {
		return
	}
	plain := indexRE.ReplaceAllString(e.Key, "")
	if plain == e.Key {
		return // not in an array of tables
	}
	leaf := plain[strings.LastIndexByte(plain, '.')+1:]
	found := inWords(m[1])
	best, bestLine := "", 0
	for k, line := range loc.lines {
		if indexRE.ReplaceAllString(k, "") != plain || (bestLine != 0 && line > bestLine) {
			continue
		}
		if v := valueOn(lineText(data, line), leaf); v != "" && writtenType(v) == found {
			best, bestLine = k, line
		}
	}
	if bestLine != 0 {
		e.Key, e.Line = best, bestLine
	}
}

// writtenType returns the TOML type of a value as written, in
// rdmad.toml(5)'s words (inWords), or "" when it cannot tell.
func writtenType(v string) string {
	switch {
	case v == "":
		return ""
	case v[0] == '"' || v[0] == '\'':
		return inWords("string")
	case v[0] == '[':
		return inWords("slice")
	case v[0] == '{':
		return inWords("map")
	case v == "true" || v == "false":
		return inWords("bool")
	case dateRE.MatchString(v):
		return inWords("time.Time")
	case strings.ContainsAny(v, ".eE") && !strings.HasPrefix(v, "0x") || strings.Contains(v, "inf") || strings.Contains(v, "nan"):
		return inWords("float")
	}
	return inWords("integer")
}

var dateRE = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}|^\d{2}:\d{2}`)

var decodeErrRE = regexp.MustCompile(`^toml: line (\d+) \(last key "([^"]*)"\): (.*)$`)

// decodeError turns a BurntSushi/toml error into an *Error with a line and a
// key wherever the decoder knew them.
func decodeError(file string, err error) *Error {
	var pe toml.ParseError
	if errors.As(err, &pe) {
		return &Error{File: file, Line: pe.Position.Line, Key: pe.LastKey, Msg: pe.Message}
	}
	if m := decodeErrRE.FindStringSubmatch(err.Error()); m != nil {
		line, _ := strconv.Atoi(m[1])
		return &Error{File: file, Line: line, Key: m[2], Msg: strings.TrimPrefix(m[3], "incompatible types: ")}
	}
	return &Error{File: file, Msg: strings.TrimPrefix(err.Error(), "toml: ")}
}

// validate checks values and fills in defaults that depend on other keys,
// one table at a time.
func (c *Config) validate(locs map[string]*locator, hostChecks bool) Errors {
	k := &checker{c: c, locs: locs, hostChecks: hostChecks}
	c.validateDaemon(k)
	c.validateMemlock(k)
	c.validateMRPool(k)
	c.validateProbe(k)
	c.validateHealth(k)
	c.validateMetrics(k)
	c.validateRDMA(k)
	for i := range c.Policies {
		c.Policies[i].validate(k)
	}
	return k.result()
}

// A checker collects validate's errors, each with its file and line.
type checker struct {
	c       *Config
	locs    map[string]*locator
	errs    Errors
	dropped int
	// hostChecks: check what depends on this host (groups), as a start
	// does; Check leaves them out once it has reported them as warnings.
	hostChecks bool
}

// bad records an error for key in file.
func (k *checker) bad(file string, key string, format string, args ...any) {
	// Finding a key's line costs a scan of the file: past maxErrors
	// only count (40,000 bad [[policy]] blocks would take minutes).
	if len(k.errs) >= maxErrors {
		k.dropped++
		return
	}
	key, line := k.locs[file].find(key)
	k.errs = append(k.errs, &Error{File: file, Line: line, Key: key, Msg: fmt.Sprintf(format, clipArgs(args)...)})
}

// setter reports the last file that sets key, or the main file.
func (k *checker) setter(key string) string {
	return lastSetter(k.c.Files, k.locs, key, k.c.Files[0])
}

// result returns the errors, with a count of those not listed.
func (k *checker) result() Errors {
	if k.dropped > 0 {
		return append(k.errs, &Error{File: k.c.Files[0], Msg: fmt.Sprintf("and %d more problems not listed; fix these first", k.dropped)})
	}
	return k.errs
}

// validateDaemon checks [daemon].
func (c *Config) validateDaemon(k *checker) {
	d := &c.Daemon
	if !filepath.IsAbs(d.Socket) {
		k.bad(k.setter("daemon.socket"), "daemon.socket",
			"%q is not an absolute path; use e.g. %q", d.Socket, DefaultSocket)
	}
	for _, g := range []struct{ key, val string }{{"socket_group", d.SocketGroup}, {"admin_group", d.AdminGroup}} {
		if g.val == "" {
			continue
		}
		if !k.hostChecks {
			continue
		}
		if _, err := user.LookupGroup(g.val); err != nil {
			k.bad(k.setter("daemon."+g.key), "daemon."+g.key,
				"group %q does not exist; create it (groupadd --system %s) or remove the key", g.val, g.val)
			if len(k.errs) > 0 && k.errs[len(k.errs)-1].Key == "daemon."+g.key {
				k.errs[len(k.errs)-1].Host = true
			}
		}
	}
	switch d.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		k.bad(k.setter("daemon.log_level"), "daemon.log_level",
			"%q is not a log level; use debug, info, warn or error", d.LogLevel)
	}
	if d.ResyncInterval.Duration < 10e9 {
		k.bad(k.setter("daemon.resync_interval"), "daemon.resync_interval",
			"%s is too short; use at least 10s (events drive reconciliation; this only catches lost ones)", d.ResyncInterval.Duration)
	}
}

// validateMemlock checks [memlock].
func (c *Config) validateMemlock(k *checker) {
	m := &c.Memlock
	// The domain becomes the first field of lines in a pam_limits file:
	// the same check as the renderer's, so that a bad one is reported here
	// with file:line and not only when the file is written.
	if err := memlock.CheckDomain(m.UsersDomain); err != nil {
		k.bad(k.setter("memlock.users_domain"), "memlock.users_domain", "%s", err)
	}
	if !filepath.IsAbs(m.LimitsFile) {
		k.bad(k.setter("memlock.limits_file"), "memlock.limits_file",
			"%q is not an absolute path; use e.g. %q", m.LimitsFile, memlock.DefaultLimitsPath)
	} else if dir := filepath.Dir(filepath.Clean(m.LimitsFile)); !limitsDirOK(dir) || !strings.HasSuffix(m.LimitsFile, ".conf") {
		// pam_limits reads limits.conf and limits.d/*.conf only: a file
		// anywhere else would be written and never applied.
		k.bad(k.setter("memlock.limits_file"), "memlock.limits_file",
			"%q is not read by pam_limits, which reads only %s/*.conf; use e.g. %q", m.LimitsFile, LimitsDir, memlock.DefaultLimitsPath)
	}
}

// LimitsDir is the directory of pam_limits' drop-ins, where
// [memlock] limits_file must be.
const LimitsDir = "/etc/security/limits.d"

// TestLimitsDirEnv names a directory that tests may put limits_file in
// besides LimitsDir (anywhere below it), as they cannot write the host's
// limits.d. rdmad.service never sets it.
const TestLimitsDirEnv = "RDMAD_TEST_LIMITS_DIR"

// limitsDirOK reports whether limits_file may be in dir.
func limitsDirOK(dir string) bool {
	if dir == LimitsDir {
		return true
	}
	t := os.Getenv(TestLimitsDirEnv)
	return t != "" && filepath.IsAbs(t) && (dir == filepath.Clean(t) || strings.HasPrefix(dir, filepath.Clean(t)+"/"))
}

// validateMRPool checks [mrpool].
func (c *Config) validateMRPool(k *checker) {
	for i, cl := range c.MRPool.Classes {
		key := fmt.Sprintf("mrpool.classes[%d]", i)
		if cl.Size < 64 || cl.Size > 1<<30 {
			k.bad(k.setter("mrpool.classes"), key, "size %v is out of range; use 64B to 1GiB", cl.Size)
		}
		if cl.Count < 1 || cl.Count > 1<<20 {
			k.bad(k.setter("mrpool.classes"), key, "count %d is out of range; use 1 to 1048576 (or remove the class)", cl.Count)
		}
	}
	if iv := c.MRPool.CanaryInterval.Duration; iv < time.Second {
		k.bad(k.setter("mrpool.canary_interval"), "mrpool.canary_interval", "%s is too short; use at least 1s", iv)
	}
}

// validateMetrics checks [metrics].
func (c *Config) validateMetrics(k *checker) {
	l := c.Metrics.Listen
	if l == "" {
		return
	}
	if msg := checkListen(l); msg != "" {
		k.bad(k.setter("metrics.listen"), "metrics.listen",
			"%q %s; write host:port, e.g. \"127.0.0.1:10879\" (or remove the key to serve metrics on the socket only)", l, msg)
		return
	}
	if host, _, _ := net.SplitHostPort(l); !c.Metrics.ListenAny && isWildcard(host) {
		k.bad(k.setter("metrics.listen"), "metrics.listen",
			"%q listens on every interface, and the metrics tell whoever reaches the port this node's devices and peers; name one address, e.g. \"127.0.0.1:10879\" or the node's management address, or set listen_any = true in [metrics] if every interface is meant", l)
	}
}

// validate checks one [[policy]] block and fills in its default mode.
func (p *Policy) validate(k *checker) {
	bad := k.bad
	f := p.src.file
	key := func(ks ...string) string {
		return strings.Join(append([]string{fmt.Sprintf("policy[%d]", p.src.index)}, ks...), ".")
	}
	if p.Name == "" {
		bad(f, key(), "every [[policy]] needs a name (name = \"fabric\"); it identifies the policy in status and logs")
	}
	if len(p.Netdevs) == 0 && len(p.Devices) == 0 {
		bad(f, key(), "selects nothing; set netdevs = [\"ens1f*\"] and/or devices = [\"mlx5_*\"]")
	}
	for _, g := range p.Netdevs {
		if _, err := path.Match(g, ""); err != nil {
			bad(f, key("netdevs"), "bad glob %q: %v", g, err)
		}
	}
	for _, g := range p.Devices {
		if _, err := path.Match(g, ""); err != nil {
			bad(f, key("devices"), "bad glob %q: %v", g, err)
		}
	}
	switch p.Mode {
	case "":
		p.Mode = "enforce"
	case "enforce", "observe":
	default:
		bad(f, key("mode"), "%q is not a mode; use \"enforce\" (apply) or \"observe\" (report drift only)", p.Mode)
	}
	if p.MTU != 0 && (p.MTU < 68 || p.MTU > 65535) {
		bad(f, key("mtu"), "%d is out of range; use 68 to 65535 (the netdev's own limits are checked when applied)", p.MTU)
	}
	if p.MinRate != "" {
		if v, err := ParseRate(p.MinRate); err != nil {
			bad(f, key("min_rate"), "%v", err)
		} else {
			p.MinRateGbps = v
		}
	}
	if p.MTU == 0 && p.QoS == nil && p.RoCE == nil && p.ECN == nil && p.MinRate == "" && !p.managesDepth() {
		bad(f, key(), "manages nothing; set mtu, [policy.qos], [policy.ecn], [policy.roce], [policy.rdma], [policy.rings], [policy.channels], [policy.coalesce], firmware or min_rate")
	}
	if q := p.QoS; q != nil {
		switch q.Trust {
		case "", "pcp", "dscp":
		default:
			bad(f, key("qos", "trust"), "%q is not a trust mode; use \"pcp\" or \"dscp\"", q.Trust)
		}
		seen := map[int]bool{}
		for _, prio := range q.PFC {
			if prio < 0 || prio > 7 {
				bad(f, key("qos", "pfc"), "priority %d is out of range; list the priorities 0-7 that get PFC, e.g. pfc = [3]", prio)
			} else if seen[prio] {
				bad(f, key("qos", "pfc"), "priority %d is listed twice; list each PFC priority once (pfc = [3], not the 8 flags of mlnx_qos)", prio)
			}
			seen[prio] = true
		}
		if q.RawDSCPToPrio != nil {
			q.DSCPToPrio = make(map[int]int, len(q.RawDSCPToPrio))
		}
		for k, prio := range q.RawDSCPToPrio {
			dscp, err := strconv.Atoi(k)
			if err != nil || dscp < 0 || dscp > 63 {
				bad(f, key("qos", "dscp_to_prio", k), "%q is not a DSCP code point; use 0 to 63", k)
				continue
			}
			if prio < 0 || prio > 7 {
				bad(f, key("qos", "dscp_to_prio", k), "priority %d is out of range; use 0 to 7", prio)
				continue
			}
			q.DSCPToPrio[dscp] = prio
		}
	}
	p.validateDepth(k, key)
	if e := p.ECN; e != nil {
		if e.NP == nil && e.RP == nil {
			bad(f, key("ecn"), "[policy.ecn] sets neither np nor rp; list the priorities DCQCN is enabled on, e.g. np = [3] and rp = [3], or remove the table")
		}
		for _, pt := range []struct {
			name, what string
			prio       []int
		}{{"np", "notification point", e.NP}, {"rp", "reaction point", e.RP}} {
			seen := map[int]bool{}
			for _, prio := range pt.prio {
				if prio < 0 || prio > 7 {
					bad(f, key("ecn", pt.name), "priority %d is out of range; list the priorities 0-7 on which the %s is enabled, e.g. %s = [3] (the RoCE priority)", prio, pt.what, pt.name)
				} else if seen[prio] {
					bad(f, key("ecn", pt.name), "priority %d is listed twice; list each priority once, e.g. %s = [3]", prio, pt.name)
				}
				seen[prio] = true
			}
		}
	}
	if r := p.RoCE; r != nil {
		if r.TOS != nil && (*r.TOS < 0 || *r.TOS > 255) {
			bad(f, key("roce", "tos"), "%d is out of range; use 0 to 255 (e.g. 106 for DSCP 26 with ECN)", *r.TOS)
		}
		switch r.Mode {
		case "", "v1", "v2":
		default:
			bad(f, key("roce", "mode"), "%q is not a RoCE mode; use \"v1\" or \"v2\"", r.Mode)
		}
	}
}

// maxShown is the most bytes of a configured string an error message
// shows.
const maxShown = 128

// clipArgs shortens long strings among an error message's arguments: a
// value may be a megabyte long, and the message goes to status, D-Bus and
// the journal. Only strings are touched; validate formats no raw decoded
// values (a nested []any printed with %v once overflowed the stack).
func clipArgs(args []any) []any {
	for i, a := range args {
		if s, ok := a.(string); ok && len(s) > maxShown {
			cut := maxShown
			for cut > 0 && !utf8.RuneStart(s[cut]) {
				cut--
			}
			args[i] = s[:cut] + fmt.Sprintf("...(%d bytes)", len(s))
		}
	}
	return args
}

// clip shortens one string for an error message (see clipArgs).
func clip(s string) string { return clipArgs([]any{s})[0].(string) }

// checkListen returns what is wrong with a [metrics] listen address, or "".
func checkListen(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "is not host:port"
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Sprintf("has port %q; use a number from 1 to 65535", port)
	}
	if host != "" && host != "localhost" {
		if _, err := netip.ParseAddr(host); err != nil {
			return fmt.Sprintf("has host %q, which is not an IP address or localhost", host)
		}
	}
	return ""
}

// isWildcard reports whether a listen host binds every interface.
func isWildcard(host string) bool {
	if host == "" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsUnspecified()
}

// lastSetter reports the last of files that sets key, or def.
func lastSetter(files []string, locs map[string]*locator, key, def string) string {
	for i := len(files) - 1; i >= 0; i-- {
		if locs[files[i]].has(key) {
			return files[i]
		}
	}
	return def
}

// validateProbe checks [probe] and the [[peer]] blocks.
func (c *Config) validateProbe(k *checker) {
	bad := k.bad
	pr := &c.Probe
	at := func(key string) string { return k.setter("probe." + key) }
	if iv := pr.LoopbackInterval.Duration; iv < 10*time.Millisecond || iv > time.Hour {
		bad(at("loopback_interval"), "probe.loopback_interval", "%s is out of range; use 10ms to 1h (default 1s)", iv)
	}
	switch pr.Poll {
	case "event", "busy":
	default:
		bad(at("poll"), "probe.poll",
			"%q is not a poll mode; use \"event\" (the default: sleep on the completion channel after a 1 ms spin) or \"busy\" (poll until the completion: no wakeup in the RTT, a core held while it spins)", pr.Poll)
	}
	if tc := pr.TrafficClass; tc != nil && (*tc < 0 || *tc > 255) {
		bad(at("traffic_class"), "probe.traffic_class",
			"%d is out of range; use 0 to 255, the IP ToS byte (e.g. 104 for DSCP 26), or remove the key to follow [policy.roce] tos", *tc)
	}
	if pr.PeersFile != "" && !filepath.IsAbs(pr.PeersFile) {
		bad(at("peers_file"), "probe.peers_file", "%q is not an absolute path; use e.g. \"/etc/rdmad/peers\"", pr.PeersFile)
	}
	if pr.Port < 1 || pr.Port > 65535 || pr.Port == 4791 {
		bad(at("port"), "probe.port", "%d cannot be the control port; use 1 to 65535 except 4791 (RoCE v2's own port); default %d", pr.Port, DefaultProbePort)
	}
	if msg := CheckGroupLabel(pr.Group); msg != "" {
		bad(at("group"), "probe.group", "%s", msg)
	}
	iv := pr.PeerInterval.Duration
	if iv < 10*time.Millisecond || iv > time.Hour {
		bad(at("peer_interval"), "probe.peer_interval", "%s is out of range; use 10ms to 1h (default 1s)", iv)
	}
	if to := pr.PeerTimeout.Duration; to < time.Millisecond || to > iv {
		bad(at("peer_timeout"), "probe.peer_timeout", "%s is out of range; use 1ms up to peer_interval (%s)", to, iv)
	}
	for _, k := range []struct {
		key string
		v   int
	}{{"down_after", pr.DownAfter}, {"up_after", pr.UpAfter}} {
		if k.v < 1 || k.v > 100 {
			bad(at(k.key), "probe."+k.key, "%d is out of range; use 1 to 100 probes", k.v)
		}
	}
	if pr.LossThreshold <= 0 || pr.LossThreshold >= 100 {
		bad(at("loss_threshold"), "probe.loss_threshold", "%g is out of range; use a percentage above 0 and below 100 (default 1)", pr.LossThreshold)
	}
	if pr.RTTThreshold.Duration < 0 {
		bad(at("rtt_threshold"), "probe.rtt_threshold", "%s is negative; use e.g. \"500us\", or 0 to judge by loss only", pr.RTTThreshold.Duration)
	}
	if pr.Window < 10 || pr.Window > 10000 {
		bad(at("window"), "probe.window", "%d is out of range; use 10 to 10000 probes", pr.Window)
	}
	if pr.MaxPeers < 1 || pr.MaxPeers > 4096 {
		bad(at("max_peers"), "probe.max_peers", "%d is out of range; use 1 to 4096", pr.MaxPeers)
	}
	if pr.Flows < 1 || pr.Flows > MaxProbeFlows {
		bad(at("flows"), "probe.flows", "%d is out of range; use 1 to %d probe flows (UDP source ports) per path; default %d, 1 probes one ECMP path", pr.Flows, MaxProbeFlows, DefaultProbeFlows)
	}
	if pr.Rotate.Duration < time.Second {
		bad(at("rotate"), "probe.rotate", "%s is too short; use at least 1s (default 1m)", pr.Rotate.Duration)
	}
	// The key itself is read where the peer probes are configured (its
	// owner and mode are checked there, at every start and reload); here
	// only what the configuration alone can say.
	if pr.KeyFile != "" && !filepath.IsAbs(pr.KeyFile) {
		bad(at("key_file"), "probe.key_file", "%q is not an absolute path; use e.g. \"/etc/rdmad/fleet.key\"", pr.KeyFile)
	}
	switch pr.Auth {
	case "":
		if pr.KeyFile != "" {
			pr.Auth = "require"
		}
	case "require", "prefer":
		if pr.KeyFile == "" {
			bad(at("auth"), "probe.auth", "%q needs a key: set [probe] key_file (or remove auth)", pr.Auth)
		}
	default:
		bad(at("auth"), "probe.auth", "%q is not an auth mode; use \"require\" (default with key_file) or \"prefer\" (during a rollout: unauthenticated peers are still answered, but flagged)", pr.Auth)
	}
	for _, p := range c.Peers {
		key := fmt.Sprintf("peer[%d]", p.src.index)
		if msg := CheckPeerAddress(p.Address); msg != "" {
			bad(p.src.file, key+".address", "%s", msg)
		}
		if msg := CheckGroupLabel(p.Group); msg != "" {
			bad(p.src.file, key+".group", "%s", msg)
		}
	}
}

// CheckPeerAddress returns what is wrong with a peer address (an IP
// address or a host name), or "" if nothing is.
func CheckPeerAddress(a string) string {
	if a == "" {
		return "every [[peer]] needs an address, e.g. address = \"192.0.2.17\""
	}
	if _, err := netip.ParseAddr(a); err == nil {
		return ""
	}
	if len(a) > 253 || !hostRE.MatchString(a) {
		return fmt.Sprintf("%q is neither an IP address nor a host name", a)
	}
	return ""
}

// CheckGroupLabel returns what is wrong with a group label ([probe] group,
// [[peer]] group, the second field of a peers_file line), or "" if nothing
// is; "" is no group. A label travels into rdmactl peers, metric labels
// and D-Bus strings (which must be valid UTF-8), so it is checked like an
// address: a few printable ASCII characters, nothing a terminal or a
// parser could take for anything else.
func CheckGroupLabel(g string) string {
	if g == "" || groupRE.MatchString(g) {
		return ""
	}
	return fmt.Sprintf("%.70q is not a group label; use 1 to 64 letters, digits and . _ - : / starting with a letter or digit, e.g. \"tor-a\"", g)
}

var groupRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/-]{0,63}$`)

var hostRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$`)
