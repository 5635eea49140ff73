package packaging

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestMaintainerPlaceholder: packaging/maintainer, which packaging/build
// asks about the package's maintainer, warns about an address without a
// real domain (the checkout's commits name a reserved .example one) and,
// for a release build (PKG_RELEASE_BUILD=1), refuses it; a real address
// passes silently either way (#40 item 7).
func TestMaintainerPlaceholder(t *testing.T) {
	for _, c := range []struct {
		m           string
		placeholder bool
	}{
		{"Seed 8994c9b0 maintainers <maintainers@users.noreply.a-seed-8994c9b0.example>", true},
		{"Someone <someone@example.com>", true},
		{"Someone <root@localhost>", true},
		{"Someone <a@b.INVALID>", true},
		{"no address at all", true},
		{"RDMA Team <rdma-team@hpc.university.edu>", false},
	} {
		for _, release := range []bool{false, true} {
			cmd := exec.Command("./maintainer", c.m)
			cmd.Env = append(os.Environ(), "PKG_RELEASE_BUILD=0")
			if release {
				cmd.Env = append(os.Environ(), "PKG_RELEASE_BUILD=1")
			}
			var stderr strings.Builder
			cmd.Stderr = &stderr
			err := cmd.Run()
			switch {
			case !c.placeholder && (err != nil || stderr.Len() > 0):
				t.Errorf("%q (release %v): %v, %q; want it accepted silently", c.m, release, err, stderr.String())
			case c.placeholder && !strings.Contains(stderr.String(), "PKG_MAINTAINER="):
				t.Errorf("%q (release %v): stderr %q; want it to say how to set PKG_MAINTAINER", c.m, release, stderr.String())
			case c.placeholder && release && err == nil:
				t.Errorf("%q: a release build accepted a placeholder maintainer", c.m)
			case c.placeholder && !release && err != nil:
				t.Errorf("%q: a test build refused a placeholder maintainer (%v); it should only warn", c.m, err)
			}
		}
	}
}
