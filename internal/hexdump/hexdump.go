// Package hexdump reads the annotated hex dumps that tests keep in
// testdata: the bytes a kernel interface sends (netlink replies, ioctl
// buffers), written as hex digits with "#" comments naming each field.
package hexdump

import (
	"encoding/hex"
	"fmt"
	"os"
	"strings"
)

// Parse returns the bytes of text: hex digits, any spacing, and "#" to
// the end of a line a comment.
func Parse(text string) ([]byte, error) {
	var digits strings.Builder
	for _, line := range strings.Split(text, "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		digits.WriteString(strings.Join(strings.Fields(line), ""))
	}
	return hex.DecodeString(digits.String())
}

// ReadFile returns the bytes of the dump in the file at path.
func ReadFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out, err := Parse(string(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}
