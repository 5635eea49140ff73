package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/internal/testenv"
	"github.com/rdmad/rdmad/policy/memlock"
)

// A scriptRoot is a temporary root directory in which a package script
// runs for real, with the arguments dpkg or rpm pass: chrooted, in a
// private mount namespace, with the host's /usr (read-only, for sh and
// the tools the scripts call), its /bin, /lib... and /dev/null, and
// otherwise only what the test puts there. Whatever the script removes
// (rm -rf /var/lib/rdmad /etc/rdmad on purge) is the temporary root's.
type scriptRoot struct {
	t     *testing.T
	dir   string
	binds []string
}

func newScriptRoot(t *testing.T) *scriptRoot {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the package scripts run chrooted in a mount namespace")
	}
	if out, err := exec.Command("unshare", "--mount", "--propagation", "private", "true").CombinedOutput(); err != nil {
		t.Skipf("no mount namespace here (unshare --mount: %v %s)", err, out)
	}
	r := &scriptRoot{t: t, dir: t.TempDir(), binds: []string{"/usr"}}
	for _, d := range []string{"usr", "dev", "etc/security/limits.d", "var/lib/rdmad", "run", "tmp"} {
		if err := os.MkdirAll(r.path(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(r.path("dev/null"), nil, 0o666); err != nil {
		t.Fatal(err)
	}
	// Merged /usr: links as on the host; otherwise bound too.
	for _, name := range []string{"bin", "sbin", "lib", "lib32", "lib64", "libx32"} {
		fi, err := os.Lstat("/" + name)
		switch {
		case err != nil:
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink("/" + name)
			if err != nil {
				t.Fatal(err)
			}
			os.Symlink(target, r.path(name))
		case fi.IsDir():
			os.Mkdir(r.path(name), 0o755)
			r.binds = append(r.binds, "/"+name)
		}
	}
	return r
}

func (r *scriptRoot) path(p string) string { return filepath.Join(r.dir, p) }

// run runs packaging/scripts/<script> with args in the root.
func (r *scriptRoot) run(script string, args ...string) {
	t := r.t
	t.Helper()
	body, err := os.ReadFile(filepath.Join("../../packaging/scripts", script))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(r.path("scriptlet"), body, 0o755); err != nil {
		t.Fatal(err)
	}
	setup := "set -e\nroot=$1; shift\n"
	for _, b := range r.binds {
		setup += fmt.Sprintf("mount --bind %s \"$root%s\"\nmount -o remount,bind,ro \"$root%s\"\n", b, b, b)
	}
	setup += "mount --bind /dev/null \"$root/dev/null\"\nexec chroot \"$root\" /bin/sh \"$@\"\n"
	cmd := exec.Command("unshare", append([]string{"--mount", "--propagation", "private", "sh", "-c", setup, "sh", r.dir, "/scriptlet"}, args...)...)
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"}
	if name, ok := strings.CutPrefix(script, "deb-"); ok {
		// As dpkg: deb-systemd-helper refuses to run without.
		cmd.Env = append(cmd.Env, "DPKG_MAINTSCRIPT_PACKAGE=rdmad", "DPKG_MAINTSCRIPT_NAME="+name)
	}
	out, err := cmd.CombinedOutput()
	// The mounts die with the namespace; never leave the host's /usr
	// under a directory the test's cleanup removes.
	if ents, _ := os.ReadDir(r.path("usr")); len(ents) > 0 {
		unix.Unmount(r.path("usr"), unix.MNT_DETACH)
		t.Fatalf("%s: /usr is still bound under %s after the run", script, r.dir)
	}
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", script, strings.Join(args, " "), err, out)
	}
	if len(out) > 0 {
		t.Logf("%s %s:\n%s", script, strings.Join(args, " "), out)
	}
}

func (r *scriptRoot) exists(p string) bool {
	_, err := os.Lstat(r.path(p))
	return err == nil
}

// TestPackageScriptsRemoveOnlyRdmadsLimits runs the deb postrm and the rpm
// postun for real, with the arguments dpkg and rpm pass, in a temporary
// root (issue #13 item 13). On purge and erase, and only then, the limits.d
// files rdmad wrote go: the default one and every one rdmad recorded in
// /var/lib/rdmad/limits-files (before, a non-default limits_file survived
// and PAM kept applying it), then the record. Only files rdmad wrote
// (written by rdmad's code, so header and script cannot drift apart), and
// only directly in /etc/security/limits.d: an admin's file, a symlink, a
// FIFO, a recorded path elsewhere, relative or with a control character,
// and a record that is a symlink are left as they are.
func TestPackageScriptsRemoveOnlyRdmadsLimits(t *testing.T) {
	const ld = "/etc/security/limits.d"
	marker := regexp.MustCompile(`(?s)# begin remove_rdmad_limits\n(.*)# end remove_rdmad_limits\n`)
	var blocks [][]byte
	for _, script := range []string{"deb-postrm", "rpm-postun"} {
		body, err := os.ReadFile(filepath.Join("../../packaging/scripts", script))
		if err != nil {
			t.Fatal(err)
		}
		m := marker.FindSubmatch(body)
		if m == nil {
			t.Fatalf("%s has no remove_rdmad_limits between the markers", script)
		}
		blocks = append(blocks, m[1])
		if regexp.MustCompile(`rm -[a-z]*f[a-z]* [^\n]*limits\.d`).Match(body) {
			t.Errorf("%s removes a limits.d file unconditionally", script)
		}
	}
	if string(blocks[0]) != string(blocks[1]) {
		t.Errorf("the functions between the markers of deb-postrm and rpm-postun differ: keep them the same")
	}

	rules := []memlock.Rule{{Domain: "@rdma", Soft: memlock.Unlimited, Hard: memlock.Unlimited}}
	type layout struct {
		removed, kept []string
	}
	// setup puts rdmad's files, an admin's and odd ones in the root and
	// records them as rdmad (and a bad edit) would.
	setup := func(r *scriptRoot) layout {
		ours := func(p string) string {
			os.MkdirAll(filepath.Dir(r.path(p)), 0o755)
			if _, err := memlock.WriteLimits(r.path(p), rules); err != nil {
				t.Fatal(err)
			}
			return p
		}
		other := func(p, content string) string {
			if err := os.WriteFile(r.path(p), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			return p
		}
		var l layout
		l.removed = []string{ours(ld + "/90-rdmad.conf"), ours(ld + "/95-moved.conf"), ours(ld + "/96-last.conf")}
		admin := other(ld+"/50-admin.conf", "@hpc hard memlock unlimited\n")
		near := other(ld+"/near.conf", "#Managed by rdmad, said nobody\n")
		empty := other(ld+"/empty.conf", "")
		target := ours(ld + "/keep-target")
		link := ld + "/link.conf"
		os.Symlink(target, r.path(link))
		fifo := ld + "/fifo.conf"
		unix.Mkfifo(r.path(fifo), 0o644)
		elsewhere := ours("/etc/security/other/rdmad.conf")
		deep := ours(ld + "/sub/deep.conf")
		rel := ours(ld + "/rel.conf")
		outside := ours("/etc/security/outside.conf")
		ctl := ours(ld + "/ctl\r.conf")
		l.kept = []string{admin, near, empty, target, link, fifo, elsewhere, deep, rel, outside, ctl}

		rec, err := memlock.LoadRecord(r.path("/var/lib/rdmad/" + memlock.RecordName))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{l.removed[1], admin, near, empty, link, fifo, ld + "/missing.conf", elsewhere, deep} {
			if err := rec.Add(p); err != nil {
				t.Fatal(err)
			}
		}
		// What rdmad never records, and a last line without a newline.
		f, err := os.OpenFile(rec.Path(), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(f, "%s\n%s\n%s\n%s\n%s", strings.TrimPrefix(rel, "/"), ld+"/../outside.conf", ctl, ld+"/..", l.removed[2])
		f.Close()
		return l
	}

	for _, tt := range []struct {
		script string
		arg    string
		erase  bool
	}{
		{"deb-postrm", "remove", false},
		{"deb-postrm", "purge", true},
		{"rpm-postun", "1", false}, // upgrade
		{"rpm-postun", "0", true},  // erase
	} {
		t.Run(tt.script+" "+tt.arg, func(t *testing.T) {
			r := newScriptRoot(t)
			l := setup(r)
			r.run(tt.script, tt.arg)
			for _, p := range l.removed {
				if got := r.exists(p); got == tt.erase {
					t.Errorf("%s %s: rdmad's %s exists = %v, want %v", tt.script, tt.arg, p, got, !tt.erase)
				}
			}
			for _, p := range l.kept {
				if !r.exists(p) {
					t.Errorf("%s %s removed %q", tt.script, tt.arg, p)
				}
			}
			if got := r.exists("/var/lib/rdmad/" + memlock.RecordName); got == tt.erase {
				t.Errorf("%s %s: record exists = %v, want %v", tt.script, tt.arg, got, !tt.erase)
			}
		})
	}

	// A record that is a symlink is not read.
	t.Run("record symlink", func(t *testing.T) {
		r := newScriptRoot(t)
		if _, err := memlock.WriteLimits(r.path(ld+"/95-moved.conf"), rules); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(r.path("/tmp/list"), []byte(ld+"/95-moved.conf\n"), 0o644)
		os.Symlink("/tmp/list", r.path("/var/lib/rdmad/"+memlock.RecordName))
		r.run("rpm-postun", "0")
		if !r.exists(ld + "/95-moved.conf") {
			t.Errorf("a path named by a symlinked record was removed")
		}
	})
}

// TestRPMPreunDisablesWithoutSystemd runs the rpm %post and %preun for
// real in a root without a running systemd (an image build): %post
// enables rdmad.service (the wants links of its [Install] section), an
// upgrade's %preun keeps them, and an erase's removes them. Before,
// %preun disabled only with a running systemd, and the links outlived the
// package (%systemd_preun disables in both cases).
func TestRPMPreunDisablesWithoutSystemd(t *testing.T) {
	testenv.Tool(t, "systemctl", "apt-get install systemd")
	r := newScriptRoot(t)
	unit, err := os.ReadFile("../../systemd/rdmad.service")
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(r.path("/etc/systemd/system"), 0o755)
	if err := os.WriteFile(r.path("/etc/systemd/system/rdmad.service"), unit, 0o644); err != nil {
		t.Fatal(err)
	}
	wants := []string{"/etc/systemd/system/multi-user.target.wants/rdmad.service", "/etc/systemd/system/rdma-hw.target.wants/rdmad.service"}
	check := func(when string, want bool) {
		t.Helper()
		for _, p := range wants {
			if got := r.exists(p); got != want {
				t.Errorf("after %s: %s exists = %v, want %v", when, p, got, want)
			}
		}
	}
	r.run("rpm-post", "1")
	check("rpm-post 1 (install)", true)
	r.run("rpm-preun", "1")
	check("rpm-preun 1 (upgrade)", true)
	r.run("rpm-preun", "0")
	check("rpm-preun 0 (erase)", false)
}

// TestRPMPostFollowsPresets runs the rpm %post for real (#27 item 7): as
// %systemd_post, a fresh install applies the presets, so RHEL's and
// Fedora's "disable *" leaves rdmad.service disabled, a site's "enable
// rdmad.service" before it enables it, and an upgrade keeps what the
// admin chose whatever the presets say. (With no preset about rdmad the
// unit is enabled: TestRPMPreunDisablesWithoutSystemd.)
func TestRPMPostFollowsPresets(t *testing.T) {
	testenv.Tool(t, "systemctl", "apt-get install systemd")
	unit, err := os.ReadFile("../../systemd/rdmad.service")
	if err != nil {
		t.Fatal(err)
	}
	wants := []string{"/etc/systemd/system/multi-user.target.wants/rdmad.service", "/etc/systemd/system/rdma-hw.target.wants/rdmad.service"}
	for _, tt := range []struct {
		name, preset, arg string
		adminEnabled      bool // the links are there before %post
		want              bool
	}{
		{name: "install, disable *", preset: "disable *\n", arg: "1", want: false},
		{name: "install, site enables rdmad", preset: "enable rdmad.service\ndisable *\n", arg: "1", want: true},
		{name: "upgrade, admin enabled, disable *", preset: "disable *\n", arg: "2", adminEnabled: true, want: true},
		{name: "upgrade, not enabled, enable *", preset: "enable *\n", arg: "2", want: false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newScriptRoot(t)
			os.MkdirAll(r.path("/etc/systemd/system-preset"), 0o755)
			os.MkdirAll(r.path("/etc/systemd/system"), 0o755)
			if err := os.WriteFile(r.path("/etc/systemd/system/rdmad.service"), unit, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(r.path("/etc/systemd/system-preset/90-default.preset"), []byte(tt.preset), 0o644); err != nil {
				t.Fatal(err)
			}
			if tt.adminEnabled {
				for _, p := range wants {
					os.MkdirAll(filepath.Dir(r.path(p)), 0o755)
					if err := os.Symlink("/etc/systemd/system/rdmad.service", r.path(p)); err != nil {
						t.Fatal(err)
					}
				}
			}
			r.run("rpm-post", tt.arg)
			for _, p := range wants {
				if got := r.exists(p); got != tt.want {
					t.Errorf("rpm-post %s with presets %q: %s exists = %v, want %v", tt.arg, tt.preset, p, got, tt.want)
				}
			}
		})
	}
}
