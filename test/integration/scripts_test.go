package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/policy/memlock"
)

// TestPackageScriptsRemoveOnlyRdmadsLimits runs the limits.d removal of the
// deb postrm (purge) and the rpm postun (erase), as the scripts define it,
// against files in a temporary directory: before, purge deleted
// 90-rdmad.conf whoever wrote it. rdmad's own file (written by rdmad's
// code, so header and script cannot drift apart) goes; an admin's file, a
// symlink to rdmad's file, a FIFO and nothing at all are left as they are.
func TestPackageScriptsRemoveOnlyRdmadsLimits(t *testing.T) {
	marker := regexp.MustCompile(`(?s)# begin remove_rdmad_limits\n(.*)# end remove_rdmad_limits\n`)
	for _, script := range []string{"deb-postrm", "rpm-postun"} {
		t.Run(script, func(t *testing.T) {
			body, err := os.ReadFile(filepath.Join("../../packaging/scripts", script))
			if err != nil {
				t.Fatal(err)
			}
			m := marker.FindSubmatch(body)
			if m == nil {
				t.Fatalf("%s has no remove_rdmad_limits between the markers", script)
			}
			if !strings.Contains(string(body), "remove_rdmad_limits /etc/security/limits.d/90-rdmad.conf") {
				t.Errorf("%s does not call remove_rdmad_limits on the default path", script)
			}
			if regexp.MustCompile(`rm -[a-z]*f[a-z]* [^\n]*limits\.d`).Match(body) {
				t.Errorf("%s still removes a limits.d file unconditionally", script)
			}
			dir := t.TempDir()
			ours := filepath.Join(dir, "90-rdmad.conf")
			if _, err := memlock.WriteLimits(ours, []memlock.Rule{{Domain: "@rdma", Soft: memlock.Unlimited, Hard: memlock.Unlimited}}); err != nil {
				t.Fatal(err)
			}
			admin := filepath.Join(dir, "admin.conf")
			os.WriteFile(admin, []byte("@hpc hard memlock unlimited\n"), 0o644)
			near := filepath.Join(dir, "near.conf")
			os.WriteFile(near, []byte("#Managed by rdmad, said nobody\n"), 0o644)
			empty := filepath.Join(dir, "empty.conf")
			os.WriteFile(empty, nil, 0o644)
			keep := filepath.Join(dir, "keep-target.conf")
			if _, err := memlock.WriteLimits(keep, nil); err != nil {
				t.Fatal(err)
			}
			link := filepath.Join(dir, "link.conf")
			os.Symlink(keep, link)
			fifo := filepath.Join(dir, "fifo.conf")
			unix.Mkfifo(fifo, 0o644)
			missing := filepath.Join(dir, "missing.conf")

			sh := string(m[1]) + `
set -e
for f in "$@"; do remove_rdmad_limits "$f"; done
echo done
`
			cmd := exec.Command("sh", "-c", sh, "sh", ours, admin, near, empty, link, fifo, missing)
			out, err := cmd.CombinedOutput()
			if err != nil || strings.TrimSpace(string(out)) != "done" {
				t.Fatalf("remove_rdmad_limits: %v\n%s", err, out)
			}
			if _, err := os.Lstat(ours); !os.IsNotExist(err) {
				t.Errorf("rdmad's file not removed: %v", err)
			}
			for _, p := range []string{admin, near, empty, link, keep, fifo} {
				if _, err := os.Lstat(p); err != nil {
					t.Errorf("%s removed: %v", filepath.Base(p), err)
				}
			}
		})
	}
}
