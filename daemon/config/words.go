package config

import (
	"encoding"
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"sync"
	"unicode/utf8"
)

// The keys rdmad knows, for "did you mean" in the error of an unknown key:
// read once from Config's toml tags.
var (
	knownOnce sync.Once
	// known maps a table ("" for the top level, "policy.qos" for a nested
	// one) to its keys; tables maps a dotted name to true if it is a table.
	known  map[string][]string
	tables map[string]bool
)

var textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()

func loadKnown() {
	known, tables = map[string][]string{}, map[string]bool{}
	var walk func(prefix string, t reflect.Type)
	walk = func(prefix string, t reflect.Type) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
			if !f.IsExported() || name == "-" {
				continue
			}
			if name == "" {
				name = f.Name
			}
			known[prefix] = append(known[prefix], name)
			ft := f.Type
			for ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice {
				ft = ft.Elem()
			}
			full := strings.TrimPrefix(prefix+"."+name, ".")
			if ft.Kind() == reflect.Map {
				tables[full] = true
			}
			if ft.Kind() == reflect.Struct && !reflect.PointerTo(ft).Implements(textUnmarshaler) {
				tables[full] = true
				walk(full, ft)
			}
		}
	}
	walk("", reflect.TypeFor[Config]())
}

// unknownKeyMsg says what is wrong with the unknown key k (its dotted
// parts, as the decoder gives them) and, where a known key is near, which
// one was probably meant.
func unknownKeyMsg(k []string, isTable bool) string {
	knownOnce.Do(loadKnown)
	parent, leaf := strings.Join(k[:len(k)-1], "."), k[len(k)-1]
	what := "unknown key"
	if isTable {
		what = "unknown table"
	}
	if near := nearest(leaf, known[parent]); near != "" {
		full := strings.TrimPrefix(parent+"."+near, ".")
		if tables[full] {
			return fmt.Sprintf("%s; did you mean [%s]? (see rdmad.toml(5))", what, full)
		}
		return fmt.Sprintf("%s; did you mean %s? (see rdmad.toml(5))", what, near)
	}
	if !isTable {
		// The right key in the wrong table: log_level under [probe].
		var in []string
		for t, ks := range known {
			if t != parent && t != "" && !tables[t+"."+leaf] && contains(ks, leaf) {
				in = append(in, "["+t+"]")
			}
		}
		if len(in) > 0 {
			sort.Strings(in)
			return fmt.Sprintf("%s here; %s is a key of %s (see rdmad.toml(5))", what, leaf, strings.Join(in, " and "))
		}
	}
	return what + "; see rdmad.toml(5) for the keys rdmad knows"
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// nearest returns the candidate closest to s in edit distance, if it is
// close enough to be a typo (a third of the word, at least 1, at most 3),
// or "". Case and '-' for '_' count as no difference.
func nearest(s string, candidates []string) string {
	norm := func(x string) string { return strings.ReplaceAll(strings.ToLower(x), "-", "_") }
	best, bestD := "", 0
	limit := min(max(len(s)/3, 1), 3)
	for _, c := range candidates {
		d := editDistance(norm(s), norm(c))
		if d <= limit && (best == "" || d < bestD) {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the optimal string alignment distance of a and b: the
// fewest insertions, deletions, substitutions and swaps of two adjacent
// bytes that make one the other. Keys are short; a long one (up to
// MaxFileSize) is cut so that the cost stays small.
func editDistance(a, b string) int {
	const maxLen = 64
	if len(a) > maxLen {
		a = a[:maxLen]
	}
	if len(b) > maxLen {
		b = b[:maxLen]
	}
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

// typeWords names the TOML types of the decoder's messages in the words of
// rdmad.toml(5), not Go's.
var typeWords = map[string]string{
	"int64": "an integer", "integer": "an integer",
	"float64": "a number", "float": "a number",
	"string": "a string", "primitive (string-like)": "a string",
	"bool": "true or false", "boolean": "true or false",
	"[]any": "an array", "slice": "an array",
	"map[string]any": "a table", "map": "a table",
	"time.Time": "a date", "toml.Local": "a date",
}

func inWords(goType string) string {
	if w, ok := typeWords[goType]; ok {
		return w
	}
	if strings.HasPrefix(goType, "[]") {
		return "an array"
	}
	if strings.HasPrefix(goType, "map[") {
		return "a table"
	}
	if strings.HasPrefix(goType, "toml.Local") || strings.HasPrefix(goType, "time.") {
		return "a date"
	}
	return "a value of another type"
}

var (
	incompatibleRE = regexp.MustCompile(`^TOML value has type (.+); destination has type (.+)$`)
	mismatchRE     = regexp.MustCompile(`^type mismatch for \S+: expected table but found (.+)$`)
	rangeRE        = regexp.MustCompile(`^(\S+) is out of range for u?int\d*$`)
	unsafeFloatRE  = regexp.MustCompile(`^(\S+) is out of the safe float\d* range$`)
)

// plainType rewrites a decoder's type error (which names Go types) in
// rdmad.toml(5)'s words: "mtu must be an integer, not 9000.5". key is the
// dotted key, line the text of the line the decoder points to (for the
// value as written); msg is returned as it is if it is no type error.
func plainType(msg, key, line string) string {
	leaf := key
	if i := strings.LastIndexByte(key, '.'); i >= 0 {
		leaf = key[i+1:]
	}
	if i := strings.IndexByte(leaf, '['); i >= 0 {
		leaf = leaf[:i]
	}
	if m := incompatibleRE.FindStringSubmatch(msg); m != nil {
		got := inWords(m[1])
		if v := valueOn(line, leaf); v != "" {
			got = v
		}
		return fmt.Sprintf("%s must be %s, not %s", leaf, inWords(m[2]), got)
	}
	if m := mismatchRE.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("%s must be a table ([%s]), not %s", leaf, key, inWords(m[1]))
	}
	if m := rangeRE.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("%s is too large a number for %s", m[1], leaf)
	}
	if m := unsafeFloatRE.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("%s is too large a number for %s to hold exactly", m[1], leaf)
	}
	return msg
}

// valueOn returns the value written after "leaf =" on line, shortened, or
// "" if the line does not hold one.
func valueOn(line, leaf string) string {
	k, v, ok := strings.Cut(line, "=")
	if !ok || strings.Trim(strings.TrimSpace(k), `"'`) != leaf {
		return ""
	}
	v = strings.TrimSpace(v)
	if v == "" {
		return ""
	}
	if c := v[0]; c != '"' && c != '\'' {
		if i := strings.IndexByte(v, '#'); i >= 0 {
			v = strings.TrimSpace(v[:i])
		}
	}
	if len(v) > 40 {
		cut := 40
		for cut > 0 && !utf8.RuneStart(v[cut]) {
			cut--
		}
		v = v[:cut] + "..."
	}
	return v
}
