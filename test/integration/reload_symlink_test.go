package integration

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// These tests are issue #13 item 3 with the real rdmad and its real reload
// path (SIGHUP): reload re-applies the socket's group, mode and ACL, and
// must never do so through whatever a user put at the socket path since,
// nor in a socket directory others can write. docs/API.md: "on reload: it
// keeps the socket's last permissions and shows the error as the api
// component in status and the journal".

// apiComponent is the api component of rdmad's status, read over socket.
type apiComponent struct {
	Generation uint64
	State      string
	Error      string
}

func (n *node) apiComponent(t *testing.T, socket string) (apiComponent, bool) {
	t.Helper()
	saved := n.socket
	n.socket = socket
	out, _, _ := n.ctl("--json", "status")
	n.socket = saved
	var s struct {
		Config struct {
			Generation uint64 `json:"generation"`
		} `json:"config"`
		Components map[string]struct {
			State string `json:"state"`
			Error string `json:"error"`
		} `json:"components"`
	}
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		return apiComponent{}, false
	}
	c := s.Components["api"]
	return apiComponent{Generation: s.Config.Generation, State: c.State, Error: c.Error}, true
}

// stillRunning fails the test if rdmad has exited.
func (n *node) stillRunning(t *testing.T) {
	t.Helper()
	select {
	case err := <-n.exited:
		n.exited <- err
		t.Fatalf("rdmad exited after the reload: %v", err)
	default:
	}
}

// fileState is what an attack on a file would change: type and mode,
// owner, its ACL and its content.
type fileState struct {
	mode     uint32
	uid, gid uint32
	acl      bool
	content  []byte
}

func stateOf(t *testing.T, path string) fileState {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	content, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, xerr := unix.Lgetxattr(path, "system.posix_acl_access", nil)
	if xerr != nil && !errors.Is(xerr, unix.ENODATA) && !errors.Is(xerr, unix.EOPNOTSUPP) {
		t.Fatal(xerr)
	}
	return fileState{mode: st.Mode, uid: st.Uid, gid: st.Gid, acl: xerr == nil, content: content}
}

// TestReloadDoesNotFollowSymlinkAtSocket replaces rdmad's socket with a
// symlink to a root-only file and sends SIGHUP. Before the fix, reload
// chowned and chmodded through the symlink: the file became 0660 and the
// socket group's, who could then read and append to it. Now the file is
// untouched, rdmad runs on, and status (over the socket, moved aside by
// the attacker but still served) and the log show the api component in
// error, saying to restart rdmad.
func TestReloadDoesNotFollowSymlinkAtSocket(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the target is a root-owned file and the socket group another group (CI runs as root)")
	}
	// The socket group and the admin group differ, so reload would chown
	// the path to nogroup, chmod it 0660 and set an ACL for adm.
	n := start(t, "[daemon]\nsocket_group = \"nogroup\"\nadmin_group = \"adm\"\n")
	var dst unix.Stat_t
	if err := unix.Stat(n.dir, &dst); err != nil || dst.Uid != 0 || dst.Mode&0o7777 != 0o755 {
		t.Fatalf("socket directory %s: %v, mode %04o uid %d; want root's 0755", n.dir, err, dst.Mode&0o7777, dst.Uid)
	}
	before, ok := n.apiComponent(t, n.socket)
	if !ok || before.State == "error" {
		t.Fatalf("api component before the attack: %+v, answered %v; want an answer, not in error", before, ok)
	}

	target := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(target, []byte("root's secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	want := stateOf(t, target)
	if want.mode&0o7777 != 0o600 || want.uid != 0 || want.gid != 0 || want.acl {
		t.Fatalf("target %s: %+v; want root's 0600 without an ACL", target, want)
	}

	// The attacker moves the socket aside (rdmad still serves it there:
	// connect finds the bound inode by any name) and puts the symlink at
	// its path.
	moved := n.socket + ".moved"
	if err := os.Rename(n.socket, moved); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, n.socket); err != nil {
		t.Fatal(err)
	}
	n.cmd.Process.Signal(syscall.SIGHUP)
	eventually(t, "rdmad to reload", func() bool {
		after, ok := n.apiComponent(t, moved)
		return ok && after.Generation > before.Generation
	})
	time.Sleep(200 * time.Millisecond) // a reload by the watcher, if any, ends too
	n.stillRunning(t)
	after, ok := n.apiComponent(t, moved)
	if !ok || after.State != "error" {
		t.Errorf("api component after the reload: %+v, answered %v; want an answer with the api component in error", after, ok)
	}

	if got := stateOf(t, target); got.mode != want.mode || got.uid != want.uid || got.gid != want.gid || got.acl != want.acl || !bytes.Equal(got.content, want.content) {
		t.Errorf("target after SIGHUP: mode %o uid %d gid %d acl %v content %q; want mode %o uid %d gid %d acl %v content %q (unchanged)",
			got.mode, got.uid, got.gid, got.acl, got.content, want.mode, want.uid, want.gid, want.acl, want.content)
	}
	if fi, err := os.Lstat(n.socket); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("socket path after SIGHUP: %v, %v; want the attacker's symlink left as it is", fi, err)
	}
	for _, w := range []string{n.socket, "is no longer the socket rdmad created", "a symlink", "restart rdmad"} {
		if !strings.Contains(after.Error, w) {
			t.Errorf("api component error %q; want it to contain %q", after.Error, w)
		}
	}
	logText := n.log.String()
	if !strings.Contains(logText, "socket permissions not updated") || !strings.Contains(logText, "is no longer the socket rdmad created") || !strings.Contains(logText, "restart rdmad") {
		t.Errorf("rdmad's log does not report the replaced socket and the restart:\n%s", logText)
	}
}

// TestReloadRefusesWritableSocketDir makes the socket's directory
// writable by group nogroup after rdmad started and asks, in the same
// reload, for another socket group: rdmad keeps the socket's last
// permissions, answers status, and shows the api component in error with
// the fix. Once the directory is root's alone again, a reload applies the
// new group: the refusal came from the directory, nothing else.
func TestReloadRefusesWritableSocketDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give the socket directory to another group (CI runs as root)")
	}
	// The configuration lives in a directory of its own: one that others
	// may write is refused as a whole (#41), and this test is about the
	// socket's directory.
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	os.Chmod(filepath.Dir(dir), 0o755)
	n := newNode(t, dir)
	if err := os.Mkdir(filepath.Join(dir, "conf"), 0o755); err != nil {
		t.Fatal(err)
	}
	n.config = filepath.Join(dir, "conf", "rdmad.toml")
	n.write("")
	n.start(nil)
	sock := func() (mode, gid uint32) {
		t.Helper()
		var st unix.Stat_t
		if err := unix.Lstat(n.socket, &st); err != nil {
			t.Fatal(err)
		}
		return st.Mode, st.Gid
	}
	mode0, gid0 := sock()
	if mode0&unix.S_IFMT != unix.S_IFSOCK || mode0&0o7777 != 0o660 || gid0 != 0 {
		t.Fatalf("socket at start: mode %o gid %d; want a socket 0660 of group root", mode0, gid0)
	}
	before, ok := n.apiComponent(t, n.socket)
	if !ok || before.State == "error" {
		t.Fatalf("api component before: %+v, answered %v; want an answer, not in error", before, ok)
	}

	if err := os.Chown(n.dir, 0, 65534); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(n.dir, 0o775); err != nil {
		t.Fatal(err)
	}
	n.write("[daemon]\nsocket_group = \"nogroup\"\n")
	n.cmd.Process.Signal(syscall.SIGHUP)
	eventually(t, "rdmad to reload", func() bool {
		after, ok := n.apiComponent(t, n.socket)
		return ok && after.Generation > before.Generation
	})
	time.Sleep(200 * time.Millisecond) // the watcher's reload of the edit, if it comes second, ends too
	n.stillRunning(t)
	after, ok := n.apiComponent(t, n.socket)
	if !ok || after.State != "error" {
		t.Errorf("api component after the reload: %+v, answered %v; want an answer with the api component in error", after, ok)
	}
	if mode, gid := sock(); mode != mode0 || gid != gid0 {
		t.Errorf("socket after the refused reload: mode %o gid %d; want its last permissions, mode %o gid %d", mode, gid, mode0, gid0)
	}
	for _, w := range []string{"socket directory " + n.dir, "mode 0775", "other users can write it", "chmod go-w"} {
		if !strings.Contains(after.Error, w) {
			t.Errorf("api component error %q; want it to contain %q", after.Error, w)
		}
	}
	if logText := n.log.String(); !strings.Contains(logText, "socket permissions not updated") || !strings.Contains(logText, "mode 0775") {
		t.Errorf("rdmad's log does not report the refused directory:\n%s", logText)
	}

	// The directory is root's alone again: the next reload applies the
	// new group and clears the error.
	if err := os.Chmod(n.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	gen := after.Generation
	n.cmd.Process.Signal(syscall.SIGHUP)
	eventually(t, "the reload to clear the api error", func() bool {
		after, ok = n.apiComponent(t, n.socket)
		return ok && after.Generation > gen && after.State == "ok"
	})
	if mode, gid := sock(); mode&0o7777 != 0o660 || gid != 65534 {
		t.Errorf("socket after the reload in a safe directory: mode %o gid %d; want 0660 of nogroup", mode, gid)
	}
}
