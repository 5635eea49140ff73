package main

import (
	"bytes"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestHelpAndMistakes runs the built rdmad: --help is the answer and goes
// to stdout with exit 0 (rdmad --help | less shows it); an unknown flag is
// a mistake, on stderr in one line that points at --help, with exit 2.
func TestHelpAndMistakes(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "rdmad")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	run := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		cmd := exec.Command(bin, args...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		switch {
		case err == nil:
			return 0, stdout.String(), stderr.String()
		case errors.As(err, &ee):
			return ee.ExitCode(), stdout.String(), stderr.String()
		}
		t.Fatalf("rdmad %v: %v", args, err)
		return 0, "", ""
	}
	for _, h := range []string{"--help", "-h"} {
		code, out, errs := run(h)
		if code != 0 || !strings.HasPrefix(out, "Usage: rdmad [flags]") || !strings.Contains(out, "-check-config") || errs != "" {
			t.Errorf("rdmad %s: exit %d, stdout %q, stderr %q; want 0, the usage on stdout, nothing on stderr", h, code, out, errs)
		}
	}
	code, out, errs := run("--bogus")
	if code != 2 || out != "" || errs != "rdmad: flag provided but not defined: -bogus (see rdmad --help)\n" {
		t.Errorf("rdmad --bogus: exit %d, stdout %q, stderr %q; want 2 and one line on stderr", code, out, errs)
	}
}
