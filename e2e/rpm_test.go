//go:build e2e

package e2e

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestPackageRPM installs the .rpm of the same build in place of the .deb,
// for real, on the test bed's Debian guest with systemd as PID 1 (Debian's
// rpm, --nodeps: the dependencies are Debian's packages): rpm -i applies the
// presets as %systemd_post does (Debian's enable rdmad) and starts nothing,
// as on RHEL (#27 item 7), rpm -U restarts it, rpm -e stops it and removes what the
// package installed. Then the scriptlets run as in an image build, with no
// running systemd: the unit is enabled, not started, and an erase disables
// it (its wants links go). The .deb is installed again at the end, with the
// test bed's drop-ins, for the tests after this.
func TestPackageRPM(t *testing.T) {
	pkgRequire(t)
	debs, _ := filepath.Glob("/mnt/vm/project/deb/rdmad_*.deb")
	rpms, _ := filepath.Glob("/mnt/vm/project/rpm/rdmad-*.rpm")
	if len(debs) != 1 || len(rpms) != 1 {
		t.Fatalf("want one .deb and one .rpm staged in /mnt/vm/project (test/vm/run copies dist/ there), found %v and %v: run make package", debs, rpms)
	}
	deb, rpm := debs[0], rpms[0]
	if _, err := pkgRun("rpm", "--version"); err != nil {
		t.Fatalf("rpm is not in the test VM image (test/vm/packages lists it): %v", err)
	}
	pkgWaitRunning(t)

	dropins := pkgSaveDropins(t)
	restored := false
	restore := func() {
		if restored {
			return
		}
		restored = true
		pkgRun("rpm", "-e", "--nodeps", "rdmad")
		pkgRun("dpkg", "-i", deb)
		pkgRestoreDropins(t, dropins)
	}
	t.Cleanup(restore)
	pkgMustRun(t, "dpkg", "--purge", "rdmad")
	if u := pkgShow(t, "LoadState"); u["LoadState"] != "not-found" {
		t.Fatalf("after dpkg --purge rdmad.service is %v, want not-found", u)
	}

	// Install: %post applies the presets (none of Debian's disables
	// rdmad, so it is enabled) and starts nothing; the admin does.
	pkgMustRun(t, "rpm", "-i", "--nodeps", rpm)
	if got, _ := pkgRun("systemctl", "is-enabled", "rdmad.service"); got != "enabled" {
		t.Errorf("after rpm -i: is-enabled = %q, want enabled (the presets)", got)
	}
	if u := pkgShow(t, "ActiveState"); u["ActiveState"] != "inactive" {
		t.Errorf("after rpm -i: rdmad.service %v, want inactive (%%systemd_post starts nothing)", u)
	}
	pkgMustRun(t, "systemctl", "start", "rdmad.service")
	pid := pkgWaitRunning(t)
	files := strings.Split(pkgMustRun(t, "rpm", "-ql", "rdmad"), "\n")
	for _, f := range []string{"/usr/sbin/rdmad", "/usr/bin/rdmactl", "/usr/lib/systemd/system/rdmad.service", "/etc/rdmad/rdmad.toml"} {
		if !contains(files, f) {
			t.Errorf("rpm -ql lacks %s", f)
		}
	}

	// Upgrade (the same package again): %postun of the old one restarts
	// the running unit.
	pkgMustRun(t, "rpm", "-U", "--replacepkgs", "--nodeps", rpm)
	pkgWait(t, 90*time.Second, "restarted by rpm -U", func() (bool, string) {
		u := pkgShow(t, "ActiveState", "MainPID")
		return u["ActiveState"] == "active" && u["MainPID"] != "0" && u["MainPID"] != strconv.Itoa(pid), fmt.Sprint(u)
	})
	if got, _ := pkgRun("systemctl", "is-enabled", "rdmad.service"); got != "enabled" {
		t.Errorf("after rpm -U: is-enabled = %q, want enabled", got)
	}
	pkgWaitRunning(t)

	// Erase: %preun stops and disables it, the files go.
	pkgMustRun(t, "rpm", "-e", "rdmad")
	if out, err := pkgRun("pidof", "rdmad"); err == nil {
		t.Errorf("rdmad still runs after rpm -e: pid %s", out)
	}
	for _, f := range files {
		if f == "" {
			continue
		}
		fi, err := os.Lstat(f)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		// Shared directories stay.
		if err == nil && fi.IsDir() && !strings.Contains(f, "rdmad") {
			continue
		}
		t.Errorf("after rpm -e %s is still there (%v)", f, err)
	}
	for _, p := range []string{"/run/rdmad", "/etc/systemd/system/multi-user.target.wants/rdmad.service"} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("after rpm -e %s: %v, want it gone", p, err)
		}
	}
	pkgMustRun(t, "systemctl", "daemon-reload")
	if u := pkgShow(t, "LoadState", "ActiveState"); u["LoadState"] != "not-found" || u["ActiveState"] != "inactive" {
		t.Errorf("rdmad.service after rpm -e: %v, want not-found and inactive", u)
	}

	// An image build: no running systemd (a private /run/systemd hides
	// /run/systemd/system from the scriptlets). The unit must be enabled
	// so that the image's first boot starts it, and nothing is started.
	pkgMustRun(t, "unshare", "--mount", "--propagation", "private", "sh", "-c",
		"mount -t tmpfs tmpfs /run/systemd && rpm -i --nodeps "+rpm)
	pkgMustRun(t, "systemctl", "daemon-reload")
	if got, _ := pkgRun("systemctl", "is-enabled", "rdmad.service"); got != "enabled" {
		t.Errorf("after rpm -i without a running systemd: is-enabled = %q, want enabled", got)
	}
	// The links of [Install] WantedBy= in systemd/rdmad.service.
	wants := []string{"/etc/systemd/system/multi-user.target.wants/rdmad.service", "/etc/systemd/system/rdma-hw.target.wants/rdmad.service"}
	for _, p := range wants {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("after rpm -i without a running systemd: no %s: %v", p, err)
		}
	}
	if u := pkgShow(t, "ActiveState"); u["ActiveState"] != "inactive" {
		t.Errorf("after rpm -i without a running systemd: rdmad.service %v, want inactive (started at boot)", u)
	}
	// Erased in the image build too: %preun disables offline, as
	// %systemd_preun does. Before, it disabled only with a running
	// systemd, and the wants links outlived the package.
	pkgMustRun(t, "unshare", "--mount", "--propagation", "private", "sh", "-c",
		"mount -t tmpfs tmpfs /run/systemd && rpm -e rdmad")
	for _, p := range wants {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("after rpm -e without a running systemd: %s: %v, want it gone", p, err)
		}
	}
	pkgMustRun(t, "systemctl", "daemon-reload")

	restore()
	if got := pkgMustRun(t, "systemctl", "is-enabled", "rdmad.service"); got != "enabled" {
		t.Errorf("after the .deb again: is-enabled = %q, want enabled", got)
	}
	pkgWaitRunning(t)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
