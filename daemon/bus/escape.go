package bus

import (
	"fmt"
	"strconv"
	"strings"
)

// EscapePathElement returns s as one element of an object path, escaped the
// way systemd's sd_bus_path_encode does: ASCII letters, and digits other than
// the first character, stay as they are; every other byte becomes "_" and two
// lower-case hex digits; the empty string becomes "_". Device names such as
// "mlx5_0" therefore appear as "mlx5_5f0". The mapping is one-to-one, so
// clients can decode it (sd_bus_path_decode, UnescapePathElement), and the
// device object's Name property carries the name as the kernel spells it.
func EscapePathElement(s string) string {
	if s == "" {
		return "_"
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if isAlpha(c) || (i > 0 && isDigit(c)) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('_')
		b.WriteString(fmt.Sprintf("%02x", c))
	}
	return b.String()
}

// UnescapePathElement reverses EscapePathElement.
func UnescapePathElement(e string) (string, error) {
	if e == "_" {
		return "", nil
	}
	var b strings.Builder
	for i := 0; i < len(e); i++ {
		c := e[i]
		if c != '_' {
			if !isAlpha(c) && !isDigit(c) {
				return "", fmt.Errorf("dbus: unescape path element %q: byte %q is not allowed", e, c)
			}
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(e) {
			return "", fmt.Errorf("dbus: unescape path element %q: truncated escape at %d", e, i)
		}
		v, err := strconv.ParseUint(e[i+1:i+3], 16, 8)
		if err != nil {
			return "", fmt.Errorf("dbus: unescape path element %q: bad escape %q", e, e[i:i+3])
		}
		b.WriteByte(byte(v))
		i += 2
	}
	return b.String(), nil
}

func isAlpha(c byte) bool { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') }
func isDigit(c byte) bool { return c >= '0' && c <= '9' }
