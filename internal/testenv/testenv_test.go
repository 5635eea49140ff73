package testenv

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestMissingToolSkipsOrFails runs a test that needs a tool nobody has, in
// a child process, with and without StrictEnv: skipped, then failed, each
// with the tool's name and how to install it.
func TestMissingToolSkipsOrFails(t *testing.T) {
	if os.Getenv("TESTENV_CHILD") != "" {
		Tool(t, "rdmad-no-such-tool", "apt-get install rdmad-no-such-tool")
		t.Log("ran past a missing tool")
		return
	}
	for _, strict := range []bool{false, true} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestMissingToolSkipsOrFails$", "-test.v")
		cmd.Env = append(os.Environ(), "TESTENV_CHILD=1", StrictEnv+"=")
		if strict {
			cmd.Env = append(cmd.Env, StrictEnv+"=1")
		}
		out, err := cmd.CombinedOutput()
		s := string(out)
		if !strings.Contains(s, "rdmad-no-such-tool is not installed (apt-get install rdmad-no-such-tool)") || strings.Contains(s, "ran past") {
			t.Errorf("strict=%v: output lacks the tool's message or went on:\n%s", strict, s)
		}
		switch {
		case strict && (err == nil || !strings.Contains(s, "--- FAIL")):
			t.Errorf("strict: want a failure, got err=%v:\n%s", err, s)
		case !strict && (err != nil || !strings.Contains(s, "--- SKIP")):
			t.Errorf("not strict: want a skip, got err=%v:\n%s", err, s)
		}
	}
	if p := Tool(t, "sh", "coreutils"); p == "" {
		t.Error("sh not found")
	}
}
