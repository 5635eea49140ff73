package packaging

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/internal/testenv"
)

// lintedScripts are the shell scripts kept clean under shellcheck (#27
// item 7): the package build, its maintainer scripts and the install and
// run scripts of the repository, and the package check itself.
var lintedScripts = []string{
	"build", "check", "maintainer",
	"scripts/deb-postinst", "scripts/deb-prerm", "scripts/deb-postrm",
	"scripts/rpm-post", "scripts/rpm-preun", "scripts/rpm-postun",
	"../scripts/deps", "../scripts/run-foreground",
}

// TestShellcheck runs shellcheck on lintedScripts: every finding, down to
// style, fails (a finding that is intended is disabled in the script, with
// its reason).
func TestShellcheck(t *testing.T) {
	sc := testenv.Tool(t, "shellcheck", "scripts/deps test installs it: apt-get install shellcheck")
	out, err := exec.Command(sc, lintedScripts...).CombinedOutput()
	if err != nil {
		t.Errorf("shellcheck %s: %v\n%s", strings.Join(lintedScripts, " "), err, out)
	}
}

// fakeApt writes into dir an apt-get that logs its arguments to dir/log
// and, for a simulated install (-s), answers that it would upgrade
// perl-base, as installing lintian did, and an id that says root.
func fakeApt(t *testing.T, dir string) {
	t.Helper()
	scripts := map[string]string{
		"apt-get": `#!/bin/sh
echo "$*" >>"` + dir + `/log"
case " $* " in *" -s "*)
	echo "Inst libfoo-perl (1.0-1 Debian:12/stable [amd64])"
	echo "Inst perl-base [5.36.0-7+deb12u2] (5.36.0-7+deb12u4 Debian:12/stable [amd64])"
	echo "Conf perl-base (5.36.0-7+deb12u4 Debian:12/stable [amd64])";;
esac
`,
		"id": "#!/bin/sh\necho 0\n",
	}
	for name, body := range scripts {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// realInstalls returns the logged apt-get installs that were not
// simulations.
func realInstalls(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "log"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if strings.Contains(" "+l+" ", " install ") && !strings.Contains(" "+l+" ", " -s ") {
			out = append(out, l)
		}
	}
	return out
}

// TestInstallUpgradesNothing: the install helpers of packaging/build and
// packaging/check (apt_install) and of the VM test bed (host_apt_install)
// name the installed packages an install upgrades because a dependency
// wants them newer (make package upgraded perl-base with lintian), and
// install with --no-upgrade; with RDMAD_NO_UPGRADES=1 they refuse instead
// and install nothing. (A fresh machine whose image lags Debian's updates
// must still run the README's commands: refusing is the admin's choice.)
func TestInstallUpgradesNothing(t *testing.T) {
	for _, tt := range []struct{ script, fn string }{
		{"build", "apt_install"}, {"check", "apt_install"}, {"../test/vm/lib.sh", "host_apt_install"},
	} {
		t.Run(tt.script, func(t *testing.T) {
			body, err := os.ReadFile(tt.script)
			if err != nil {
				t.Fatal(err)
			}
			fn := string(body)
			start := strings.Index(fn, "\n"+tt.fn+"() {")
			if start < 0 {
				t.Fatalf("%s has no %s function", tt.script, tt.fn)
			}
			end := strings.Index(fn[start+1:], "\n}\n")
			if end < 0 {
				t.Fatalf("%s: %s does not end", tt.script, tt.fn)
			}
			fn = fn[start+1 : start+1+end+3]
			for _, strict := range []string{"", "1"} {
				dir := t.TempDir()
				fakeApt(t, dir)
				cmd := exec.Command("bash", "-c", "die() { echo \"DIE: $*\"; exit 2; }\n"+fn+tt.fn+" lintian")
				cmd.Env = []string{"PATH=" + dir + ":/usr/bin:/bin", "RDMAD_NO_UPGRADES=" + strict}
				out, err := cmd.CombinedOutput()
				installs := realInstalls(t, dir)
				if strict == "1" {
					if err == nil || !strings.Contains(string(out), "would upgrade installed packages (perl-base 5.36.0-7+deb12u2 -> 5.36.0-7+deb12u4), and RDMAD_NO_UPGRADES=1 forbids it") {
						t.Errorf("%s lintian with an upgrade pending and RDMAD_NO_UPGRADES=1: %v\n%s\nwant a refusal naming perl-base", tt.fn, err, out)
					}
					if len(installs) != 0 {
						t.Errorf("%s lintian refused, yet it ran %q", tt.fn, installs)
					}
					continue
				}
				if err != nil || len(installs) != 1 || !strings.Contains(installs[0], "--no-upgrade") || !strings.HasSuffix(installs[0], " lintian") ||
					!strings.Contains(string(out), "also upgrades installed packages") || !strings.Contains(string(out), "perl-base 5.36.0-7+deb12u2 -> 5.36.0-7+deb12u4") {
					t.Errorf("%s lintian: %v, installs %q\n%s; want one install of lintian with --no-upgrade, naming the perl-base upgrade", tt.fn, err, installs, out)
				}
			}
		})
	}
}

// TestDepsUpgradesNothing: scripts/deps, as root with a tool missing,
// installs only what is missing and names the upgrades its dependencies
// need; with RDMAD_NO_UPGRADES=1 it refuses instead.
func TestDepsUpgradesNothing(t *testing.T) {
	for _, strict := range []string{"", "1"} {
		dir := t.TempDir()
		fakeApt(t, dir)
		// Everything is installed but shellcheck; promtool, amtool and go are
		// there.
		fakes := map[string]string{
			"dpkg-query": "#!/bin/sh\nfor a; do p=$a; done\n[ \"$p\" = shellcheck ] && exit 1\necho 'install ok installed'\n",
			"promtool":   "#!/bin/sh\n", "amtool": "#!/bin/sh\n", "go": "#!/bin/sh\n",
		}
		for name, body := range fakes {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		cmd := exec.Command("sh", "../scripts/deps", "test")
		cmd.Env = []string{"PATH=" + dir + ":/usr/bin:/bin", "RDMAD_NO_UPGRADES=" + strict}
		out, err := cmd.CombinedOutput()
		installs := realInstalls(t, dir)
		if strict == "1" {
			if err == nil || !strings.Contains(string(out), "would upgrade installed packages (perl-base 5.36.0-7+deb12u2 -> 5.36.0-7+deb12u4), and RDMAD_NO_UPGRADES=1 forbids it") || len(installs) != 0 {
				t.Errorf("scripts/deps test with an upgrade pending and RDMAD_NO_UPGRADES=1: %v, installs %q\n%s\nwant a refusal naming perl-base and no install", err, installs, out)
			}
			continue
		}
		if err != nil || len(installs) != 1 || !strings.Contains(installs[0], "--no-upgrade") || !strings.HasSuffix(installs[0], " shellcheck") ||
			!strings.Contains(string(out), "perl-base 5.36.0-7+deb12u2 -> 5.36.0-7+deb12u4") {
			t.Errorf("scripts/deps test: %v, installs %q\n%s\nwant one install of shellcheck alone, with --no-upgrade, naming the perl-base upgrade", err, installs, out)
		}
	}
}
