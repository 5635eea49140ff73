// Package testenv decides what a test does when a tool it drives is not
// installed: it skips on a developer's machine, and fails under make test
// (RDMAD_TEST_STRICT=1), which installs every such tool first
// (scripts/deps test). So CI never passes by skipping what it was meant to
// run; only capabilities a CI machine really lacks (RDMA devices, a kernel
// without configfs) may skip there.
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// StrictEnv is the variable make test sets.
const StrictEnv = "RDMAD_TEST_STRICT"

// Strict reports whether a missing tool fails the test.
func Strict() bool { return os.Getenv(StrictEnv) != "" }

// Tool returns the path of the named program, or skips t (fails it when
// Strict) naming the program and how to install it.
func Tool(t testing.TB, name, install string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	missing(t, fmt.Sprintf("%s is not installed (%s)", name, install))
	return ""
}

// File skips t (fails it when Strict) when path does not exist, naming
// what installs it.
func File(t testing.TB, path, install string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		missing(t, fmt.Sprintf("%s is missing (%s)", path, install))
	}
}

func missing(t testing.TB, msg string) {
	t.Helper()
	if Strict() {
		t.Fatalf("%s; make test installs it (scripts/deps test), and with %s set a missing tool fails instead of skipping", msg, StrictEnv)
	}
	t.Skip(msg)
}
