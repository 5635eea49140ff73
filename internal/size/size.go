// Package size is the one notation for amounts of memory in rdmad: its
// configuration (memlock limits, MR pool classes), its messages and its
// status. Units are binary: "4KiB", "64MiB", "1GiB", or "unlimited". The
// one-letter forms K, M, G, T mean the same, as in systemd's LimitMEMLOCK=;
// decimal units (MB) are rejected as ambiguous.
package size

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// A Size is an amount of memory in bytes, or Unlimited.
type Size uint64

// Unlimited is RLIM_INFINITY: no limit.
const Unlimited = Size(math.MaxUint64)

// Binary units, the only ones accepted: a locked-memory limit is about
// pages, and "MB" would be ambiguous.
const (
	KiB Size = 1 << (10 * (iota + 1))
	MiB
	GiB
	TiB
)

var units = []struct {
	symbol string   // canonical spelling, used by String
	names  []string // accepted spellings, lower case
	size   Size
}{
	{"TiB", []string{"tib", "t"}, TiB},
	{"GiB", []string{"gib", "g"}, GiB},
	{"MiB", []string{"mib", "m"}, MiB},
	{"KiB", []string{"kib", "k"}, KiB},
	{"B", []string{"b", ""}, 1},
}

// Parse parses "unlimited" (or "infinity"), a number of bytes, or a
// number with a binary unit: "4KiB", "64MiB", "1 GiB". The one-letter forms
// "K", "M", "G", "T" mean the same binary units, as in systemd's
// LimitMEMLOCK=. Decimal units (KB, MB, ...) are rejected.
func Parse(s string) (Size, error) {
	t := strings.TrimSpace(s)
	switch strings.ToLower(t) {
	case "unlimited", "infinity":
		return Unlimited, nil
	case "":
		return 0, fmt.Errorf("size %q: empty; want e.g. \"64MiB\" or \"unlimited\"", s)
	}
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	if i == 0 {
		return 0, fmt.Errorf("size %q: want a whole number with an optional unit (KiB, MiB, GiB, TiB) or \"unlimited\"", s)
	}
	n, err := strconv.ParseUint(t[:i], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: %w", s, err)
	}
	unit := strings.ToLower(strings.TrimSpace(t[i:]))
	for _, u := range units {
		for _, name := range u.names {
			if unit != name {
				continue
			}
			if n > uint64(Unlimited-1)/uint64(u.size) {
				return 0, fmt.Errorf("size %q: too large; use \"unlimited\"", s)
			}
			return Size(n) * u.size, nil
		}
	}
	switch unit {
	case "kb", "mb", "gb", "tb":
		return 0, fmt.Errorf("size %q: decimal unit %q is ambiguous; use %siB (binary, 1024-based)", s, t[i:], strings.ToUpper(unit[:1]))
	}
	return 0, fmt.Errorf("size %q: unknown unit %q; use KiB, MiB, GiB or TiB", s, strings.TrimSpace(t[i:]))
}

// String formats s with the largest binary unit that represents it exactly,
// e.g. "64MiB", "1536KiB", "100B", or "unlimited". Parse accepts it.
func (s Size) String() string {
	if s == Unlimited {
		return "unlimited"
	}
	if s == 0 {
		return "0B"
	}
	for _, u := range units {
		if s%u.size == 0 {
			return strconv.FormatUint(uint64(s/u.size), 10) + u.symbol
		}
	}
	panic("unreachable: every size is a multiple of 1 byte")
}

// MarshalText implements encoding.TextMarshaler.
func (s Size) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with Parse, so that
// configuration decoders (TOML) accept sizes directly.
func (s *Size) UnmarshalText(b []byte) error {
	v, err := Parse(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// UnmarshalTOML accepts a whole number of bytes as well as a string, so that
// `size = 4096` works like `size = "4KiB"`.
func (s *Size) UnmarshalTOML(v any) error {
	switch x := v.(type) {
	case int64:
		if x < 0 {
			return fmt.Errorf("size %d: must not be negative", x)
		}
		*s = Size(x)
		return nil
	case string:
		return s.UnmarshalText([]byte(x))
	}
	return fmt.Errorf("size: want a string such as \"4KiB\" or a whole number of bytes, not a %T", v)
}
