package mrpool

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/rdmad/rdmad/verbs"
)

// A Size is a byte count written in config the way operators write it:
// "4KiB", "64 KiB", "1MiB", "4096". It decodes from TOML strings and
// integers.
type Size int64

var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30},
	{"kb", 1000}, {"mb", 1000 * 1000}, {"gb", 1000 * 1000 * 1000},
	{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30},
	{"b", 1},
}

// ParseSize parses a size such as "4KiB" or "1 MiB". Binary (KiB) and
// decimal (kB) units are both accepted; a bare number is bytes.
func ParseSize(s string) (Size, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	mult := int64(1)
	for _, u := range sizeUnits {
		if strings.HasSuffix(t, u.suffix) {
			t = strings.TrimSpace(strings.TrimSuffix(t, u.suffix))
			mult = u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("size %q: want a positive whole number with an optional unit (B, KiB, MiB, GiB), e.g. \"4KiB\"", s)
	}
	if n > (1<<62)/mult {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	return Size(n * mult), nil
}

// UnmarshalText implements encoding.TextUnmarshaler for config decoding.
func (s *Size) UnmarshalText(b []byte) error {
	v, err := ParseSize(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// UnmarshalTOML accepts a bare integer (bytes) as well as a string.
func (s *Size) UnmarshalTOML(v any) error {
	switch x := v.(type) {
	case int64:
		if x <= 0 {
			return fmt.Errorf("size %d: must be positive", x)
		}
		*s = Size(x)
		return nil
	case string:
		return s.UnmarshalText([]byte(x))
	}
	return fmt.Errorf("size: want a string such as \"4KiB\" or an integer, got %T", v)
}

// MarshalText renders the size as FormatSize does, without spaces.
func (s Size) MarshalText() ([]byte, error) {
	return []byte(strings.ReplaceAll(verbs.FormatSize(int64(s)), " ", "")), nil
}

func (s Size) String() string { return verbs.FormatSize(int64(s)) }
