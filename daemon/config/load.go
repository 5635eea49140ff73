package config

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/rdmad/rdmad/internal/safefile"
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
	// Whoever may write the directories may rename or remove the files
	// (a drop-in gone is a policy changed): they must be as trusted as
	// the files (#41 item 8).
	for _, dir := range []string{filepath.Dir(path), filepath.Dir(DropIns(path))} {
		if err := safefile.CheckTrustedDir(dir); err != nil {
			var se *safefile.Error
			if errors.As(err, &se) {
				return nil, Errors{{File: dir, Msg: se.Msg}}
			}
			return nil, err
		}
	}
	files = append([]string{path}, files...)
	return loadWith(files, func(f string) ([]byte, error) {
		b, _, err := safefile.Read(f, safefile.Options{Max: MaxFileSize, Trusted: true})
		return b, err
	}, hostChecks)
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
