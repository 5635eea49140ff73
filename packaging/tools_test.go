// Package packaging holds the tests of packaging/build and packaging/check,
// the scripts behind `make package`.
package packaging

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/rdmad/rdmad/internal/testenv"
)

// needLine is a `need CMD PACKAGE` call of a script.
var needLine = regexp.MustCompile(`(?m)^\s*need (\S+) (\S+)$`)

type need struct{ tool, pkg string }

func needs(t *testing.T, script string) []need {
	t.Helper()
	body, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	var out []need
	for _, m := range needLine.FindAllStringSubmatch(string(body), -1) {
		out = append(out, need{m[1], m[2]})
	}
	return out
}

// TestMissingToolIsNamed runs packaging/build and packaging/check, as a
// user who cannot install anything, with each tool they need missing from
// PATH in turn. Each must stop before doing any work, with exactly one
// line that names the missing tool and the Debian package to install,
// and a non-zero status: before, build went on without dpkg-shlibdeps
// and wrote a deb whose Depends had no versions, and a tool missing in
// check surfaced as a wrong result further down ("rpm unit differs").
func TestMissingToolIsNamed(t *testing.T) {
	for _, tc := range []struct {
		script string
		status int
		// want are the tools the script must install before it starts:
		// everything `make package` uses beyond a Debian base system
		// (Essential: yes) and Go. The script may need more; those are
		// tried as well.
		want []need
	}{
		{"build", 1, []need{{"gcc", "gcc"}, {"/usr/include/infiniband/verbs.h", "libibverbs-dev"}, {"perl", "perl-base"},
			{"dpkg-shlibdeps", "dpkg-dev"}, {"git", "git"}}},
		{"check", 2, []need{{"lintian", "lintian"}, {"rpm", "rpm"}, {"rpm2cpio", "rpm2cpio"}, {"cpio", "cpio"},
			{"readelf", "binutils"}, {"systemd-analyze", "systemd"}, {"man", "man-db"}, {"zsh", "zsh"},
			{"/usr/share/bash-completion/bash_completion", "bash-completion"}, {"go", "golang-go"}}},
	} {
		t.Run(tc.script, func(t *testing.T) {
			all := tc.want
			for _, n := range needs(t, tc.script) {
				if !slices.Contains(all, n) {
					all = append(all, n)
				}
			}
			for _, n := range all {
				if strings.Contains(n.tool, "/") || n.tool == "go" {
					// A file cannot be hidden from the script by PATH;
					// go has its own fallback (/usr/local/go/bin).
					continue
				}
				t.Run(n.tool, func(t *testing.T) {
					out, status := runWithout(t, tc.script, all, n.tool)
					want := "packaging/" + tc.script + ": " + n.tool + " not found; install " + n.pkg +
						" (apt-get install " + n.pkg + ") or run as root\n"
					if out != want {
						t.Errorf("output without %s:\n%s\nwant exactly:\n%s", n.tool, out, want)
					}
					if status != tc.status {
						t.Errorf("exit status %d without %s, want %d", status, n.tool, tc.status)
					}
				})
			}
		})
	}
}

// runWithout runs a copy of packaging/SCRIPT in an otherwise empty tree
// (with a .git, so that build needs git) as a user who is not root, with a
// PATH that has stand-ins for the tools of others (need only looks for
// them) and the real dirname and id, but not missing. It returns stdout
// and stderr together, and the exit status.
func runWithout(t *testing.T, script string, others []need, missing string) (string, int) {
	t.Helper()
	root, err := os.MkdirTemp("", "rdmad-packaging-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	bin := filepath.Join(root, "bin")
	tree := filepath.Join(root, "tree")
	for _, d := range []string{bin, filepath.Join(tree, "packaging"), filepath.Join(tree, ".git")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	body, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	copyPath := filepath.Join(tree, "packaging", script)
	if err := os.WriteFile(copyPath, body, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, real := range []string{"dirname", "id"} {
		p, err := exec.LookPath(real)
		if err != nil {
			t.Fatalf("%s: %v", real, err)
		}
		if err := os.Symlink(p, filepath.Join(bin, real)); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range others {
		if n.tool == missing {
			continue
		}
		if strings.Contains(n.tool, "/") {
			testenv.File(t, n.tool, "apt-get install "+n.pkg)
			continue
		}
		if err := os.WriteFile(filepath.Join(bin, n.tool), []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bash, copyPath)
	cmd.Dir = root
	cmd.Env = []string{"PATH=" + bin, "HOME=/nonexistent", "LC_ALL=C"}
	if os.Geteuid() == 0 {
		// As root, need would install the tool: run as nobody instead.
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out.String(), 0
	case errors.As(err, &ee):
		return out.String(), ee.ExitCode()
	default:
		t.Fatalf("run packaging/%s: %v", script, err)
		return "", 0
	}
}

// TestCheckOnBuiltPackages runs packaging/check on the packages of dist/
// (`make package` makes them), given as an absolute path from another
// directory, with a go that fails and an rpm that fails one query. The
// rpm inside must still be unpacked (before, rpm2cpio was handed
// "$OLDPWD//abs/dist/...", and the script stopped), the failing go must be
// a failure and not "ok copyright checked", and rpm's own message must be
// in the output (before, 2>/dev/null dropped it). It asserts these lines
// only, so packages made by an older tree still serve.
func TestCheckOnBuiltPackages(t *testing.T) {
	if testing.Short() {
		t.Skip("runs packaging/check, lintian included")
	}
	dist, err := filepath.Abs("../dist")
	if err != nil {
		t.Fatal(err)
	}
	debs, _ := filepath.Glob(filepath.Join(dist, "rdmad_*.deb"))
	rpms, _ := filepath.Glob(filepath.Join(dist, "rdmad-*.rpm"))
	if len(debs) != 1 || len(rpms) != 1 {
		msg := fmt.Sprintf("want one .deb and one .rpm in %s, found %d and %d: run make package", dist, len(debs), len(rpms))
		if os.Getenv("RDMAD_DIST_BUILT") != "" {
			// .ci/run sets it after make e2e has built them: the
			// test must run there, not skip.
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	realRPM, err := exec.LookPath("rpm")
	if err != nil {
		msg := fmt.Sprintf("rpm is not installed (packaging/check installs it: run make package): %v", err)
		if os.Getenv("RDMAD_DIST_BUILT") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	check, err := filepath.Abs("check")
	if err != nil {
		t.Fatal(err)
	}
	wrap := t.TempDir()
	os.WriteFile(filepath.Join(wrap, "go"), []byte("#!/bin/sh\necho 'go: simulated failure' >&2\nexit 1\n"), 0o755)
	os.WriteFile(filepath.Join(wrap, "rpm"), []byte(`#!/bin/sh
for a; do
	[ "$a" = --recommends ] && { echo 'rpm: simulated failure of --recommends' >&2; exit 1; }
done
exec `+realRPM+` "$@"
`), 0o755)
	cmd := exec.Command(check, dist)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "PATH="+wrap+":"+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	t.Logf("packaging/check %s: %v", dist, err)
	bad := false
	for _, want := range []string{
		"ok   rpm unit is systemd/rdmad.service\n",
		"go: simulated failure\n",
		"FAIL: go version -m on the packaged binaries failed",
		"rpm: simulated failure of --recommends\n",
		"FAIL: rpm recommends",
	} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("packaging/check's output lacks %q", want)
			bad = true
		}
	}
	if bytes.Contains(out, []byte("ok   copyright names the binaries'")) || bytes.Contains(out, []byte("ok   copyright checked")) {
		t.Errorf("packaging/check reports the copyright checked although go version -m failed")
		bad = true
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Errorf("packaging/check: %v, want exit status 1 (problems found)", err)
		bad = true
	}
	if bad {
		t.Logf("packaging/check's output:\n%s", out)
	}
}
