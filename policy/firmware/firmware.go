// Package firmware checks an RDMA device's firmware version against the
// version a policy expects. rdmad never flashes firmware: a device that
// runs another version is reported (drifted), in every mode.
package firmware

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// A Constraint is an expected firmware version: an operator and a dotted
// version ("22.39.1002", ">=22.39.1002").
type Constraint struct {
	// Op is "=", ">=", ">", "<=" or "<".
	Op      string
	Version []int
	text    string
}

// ops in the order they are tried (longest first).
var ops = []string{">=", "<=", "=", ">", "<"}

// Parse parses a constraint: an optional operator (=, >=, >, <=, <; none
// means =) and a version of dot-separated decimal numbers.
func Parse(s string) (Constraint, error) {
	c := Constraint{Op: "=", text: strings.TrimSpace(s)}
	v := c.text
	for _, op := range ops {
		if rest, ok := strings.CutPrefix(v, op); ok {
			c.Op, v = op, strings.TrimSpace(rest)
			break
		}
	}
	ver, err := ParseVersion(v)
	if err != nil {
		return Constraint{}, fmt.Errorf("firmware %q: %w; write a version such as \"22.39.1002\" or \">=22.39.1002\"", s, err)
	}
	c.Version = ver
	return c, nil
}

// ParseVersion parses a dotted version ("22.39.1002") into its numbers.
// Anything after the version proper, separated by a space or a
// parenthesis ("14.32.1010 (MT_2420110034)", as some devices report), is
// ignored.
func ParseVersion(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if i := strings.IndexAny(s, " ("); i >= 0 {
		s = s[:i]
	}
	if s == "" {
		return nil, errors.New("no version")
	}
	parts := strings.Split(s, ".")
	out := make([]int, len(parts))
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || p[0] == '+' || p[0] == '-' {
			return nil, fmt.Errorf("%q is not a dotted version of decimal numbers", s)
		}
		out[i] = n
	}
	return out, nil
}

// Compare compares two versions number by number; a missing number counts
// as 0 (22.39 = 22.39.0). It returns -1, 0 or +1.
func Compare(a, b []int) int {
	for i := range max(len(a), len(b)) {
		var x, y int
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		switch {
		case x < y:
			return -1
		case x > y:
			return 1
		}
	}
	return 0
}

// Allows reports whether version satisfies c.
func (c Constraint) Allows(version []int) bool {
	n := Compare(version, c.Version)
	switch c.Op {
	case ">=":
		return n >= 0
	case ">":
		return n > 0
	case "<=":
		return n <= 0
	case "<":
		return n < 0
	}
	return n == 0
}

// String is the constraint as written, trimmed.
func (c Constraint) String() string { return c.text }

// ErrUnknown is wrapped when a device reports no firmware version.
var ErrUnknown = errors.New("the device reports no firmware version")

// Read returns device's firmware version as sysfs has it
// (<root>/sys/class/infiniband/<device>/fw_ver); root "" is "/".
func Read(root, device string) (string, error) {
	if root == "" {
		root = "/"
	}
	b, err := os.ReadFile(filepath.Join(root, "sys", "class", "infiniband", device, "fw_ver"))
	if errors.Is(err, fs.ErrNotExist) {
		if _, derr := os.Stat(filepath.Join(root, "sys", "class", "infiniband", device)); derr != nil {
			return "", fmt.Errorf("firmware: %s: %w", device, derr)
		}
		return "", fmt.Errorf("firmware: %s: %w (no fw_ver in sysfs)", device, ErrUnknown)
	}
	if err != nil {
		return "", fmt.Errorf("firmware: read the version of %s: %w", device, err)
	}
	v := strings.TrimSpace(string(b))
	if v == "" {
		return "", fmt.Errorf("firmware: %s: %w (fw_ver is empty)", device, ErrUnknown)
	}
	return v, nil
}
