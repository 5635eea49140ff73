package config

import (
	"fmt"
	"regexp"
	"strings"
)

// A locator maps dotted keys of one TOML file to the lines that set them.
// BurntSushi/toml keeps key positions private, so rdmad scans the file's
// lines itself: headers ([a.b], [[a]]) and assignments (k = v, a.b = v).
// Keys of the i-th [[a]] block are written "a[i].k"; the same key without
// indexes ("a.k") finds the first block that sets it.
type locator struct {
	lines map[string]int // indexed key -> line
	plain map[string]int // key without [i] -> first line
}

var (
	headerRE = regexp.MustCompile(`^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(#.*)?$`)
	assignRE = regexp.MustCompile(`^\s*((?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*')(?:\s*\.\s*(?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*'))*)\s*=`)
	indexRE  = regexp.MustCompile(`\[\d+\]`)
)

func newLocator(data []byte) *locator {
	l := &locator{lines: map[string]int{}, plain: map[string]int{}}
	counts := map[string]int{} // [[a]] header -> blocks seen
	table := ""                // current table, indexed
	for n, line := range strings.Split(string(data), "\n") {
		n++
		if m := headerRE.FindStringSubmatch(line); m != nil {
			parts := splitKey(m[2])
			// Resolve each prefix that is an array of tables to its latest
			// block, so [policy.qos] after the 2nd [[policy]] is policy[1].qos.
			var b strings.Builder
			for i, p := range parts {
				if i > 0 {
					b.WriteByte('.')
				}
				b.WriteString(p)
				plainPrefix := strings.Join(parts[:i+1], ".")
				last := i == len(parts)-1
				if last && m[1] == "[[" {
					fmt.Fprintf(&b, "[%d]", counts[plainPrefix])
					counts[plainPrefix]++
				} else if c, ok := counts[plainPrefix]; ok {
					fmt.Fprintf(&b, "[%d]", c-1)
				}
			}
			table = b.String()
			l.add(table, n)
			continue
		}
		if m := assignRE.FindStringSubmatch(line); m != nil {
			key := strings.Join(splitKey(m[1]), ".")
			if table != "" {
				key = table + "." + key
			}
			l.add(key, n)
		}
	}
	return l
}

func (l *locator) add(key string, line int) {
	if _, ok := l.lines[key]; !ok {
		l.lines[key] = line
	}
	p := indexRE.ReplaceAllString(key, "")
	if _, ok := l.plain[p]; !ok {
		l.plain[p] = line
	}
}

// has reports whether the file sets key itself.
func (l *locator) has(key string) bool {
	if l == nil {
		return false
	}
	_, ok := l.lines[key]
	if !ok {
		_, ok = l.plain[key]
	}
	return ok
}

// find returns the key as it should be shown and the line that sets it, or
// the line of its closest enclosing table, or 0.
func (l *locator) find(key string) (string, int) {
	if l == nil {
		return key, 0
	}
	shown := key
	if !strings.Contains(key, "[") {
		// A key from the decoder has no indexes; show the first block's.
		for k, line := range l.lines {
			if indexRE.ReplaceAllString(k, "") == key && line == l.plain[key] {
				shown = k
			}
		}
	}
	for k := shown; k != ""; k = parent(k) {
		if line, ok := l.lines[k]; ok {
			return shown, line
		}
		if line, ok := l.plain[k]; ok {
			return shown, line
		}
	}
	return shown, 0
}

// parent strips the last element of a dotted key ("a[1].b" -> "a[1]",
// "a[1]" -> "a").
func parent(k string) string {
	if i := strings.LastIndexAny(k, ".["); i >= 0 {
		return k[:i]
	}
	return ""
}

// splitKey splits a dotted TOML key, unquoting quoted parts.
func splitKey(s string) []string {
	var parts []string
	for len(s) > 0 {
		s = strings.TrimLeft(s, " \t")
		var p string
		switch {
		case strings.HasPrefix(s, `"`) || strings.HasPrefix(s, `'`):
			end := strings.IndexByte(s[1:], s[0])
			if end < 0 {
				return append(parts, s)
			}
			p, s = s[1:end+1], s[end+2:]
		default:
			end := strings.IndexByte(s, '.')
			if end < 0 {
				end = len(s)
			}
			p, s = strings.TrimSpace(s[:end]), s[end:]
		}
		parts = append(parts, p)
		s = strings.TrimLeft(s, " \t")
		s = strings.TrimPrefix(s, ".")
	}
	return parts
}

// at returns the indexed form of the unindexed key set on line, or key.
func (l *locator) at(key string, line int) string {
	for k, n := range l.lines {
		if n == line && indexRE.ReplaceAllString(k, "") == key {
			return k
		}
	}
	return key
}

// duplicateKey rewrites the decoder's "Key 'a.b' has already been defined"
// (a key or a table set twice in one file) to name the key and where it was
// first set, which the decoder does not tell: the operator keeps one of the
// two. The first setting is the last line before this one that sets the
// same key (in [[arrays]], the same block's: an earlier block's setting
// comes before the block's own).
func duplicateKey(e *Error, loc *locator) {
	m := alreadyDefinedRE.FindStringSubmatch(e.Msg)
	if m == nil || loc == nil {
		return
	}
	key := m[1]
	first, indexed := 0, key
	for k, line := range loc.lines {
		if line < e.Line && line > first && indexRE.ReplaceAllString(k, "") == key {
			first, indexed = line, k
		}
	}
	// The indexed key (policy[1].mtu) lets the block be named by its
	// name, as every other error names it.
	if e.Key == "" || !strings.Contains(e.Key, "[") {
		e.Key = indexed
	}
	if first == 0 {
		e.Msg = "set twice in this file; keep one of the two"
		return
	}
	e.Msg = fmt.Sprintf("set twice in this file: first at line %d; keep one of the two", first)
}

var alreadyDefinedRE = regexp.MustCompile(`^Key '([^']*)' has already been defined`)

// besideUnknown returns the validation errors verrs that say something the
// unknown keys in uerrs do not: a table whose only key is misspelt "sets
// nothing", which the unknown key's own error already explains.
func besideUnknown(uerrs, verrs Errors) Errors {
	var out Errors
	for _, v := range verrs {
		covered := false
		for _, u := range uerrs {
			if v.Key != "" && u.File == v.File && strings.HasPrefix(u.Key, v.Key+".") {
				covered = true
				break
			}
		}
		if !covered {
			out = append(out, v)
		}
	}
	return out
}
