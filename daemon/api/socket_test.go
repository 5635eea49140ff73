package api

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/daemon/access"
	"github.com/rdmad/rdmad/daemon/service/servicetest"
)

const (
	sockGID  = 61001 // [daemon] socket_group
	adminGID = 61002 // [daemon] admin_group
)

var (
	reader   = testUser{61000, 61000, []uint32{sockGID}}        // socket group only
	admin    = testUser{61003, 61003, []uint32{adminGID}}       // admin group only, NOT in the socket group
	stranger = testUser{61004, 61004, []uint32{61005}}          // neither
	both     = testUser{61006, 61006, []uint32{sockGID, 61005}} // socket group, a supplementary one among others
)

// serveShared serves the API on a socket in a directory every uid can
// enter, with the given socket access and the matching policy.
func serveShared(t *testing.T, a SocketAccess) (sock, bin string, ln *Listener, b *servicetest.Backend) {
	t.Helper()
	dir, bin := sharedDir(t)
	sock = filepath.Join(dir, "rdmad.sock")
	ln, err := Listen(sock, a)
	if err != nil {
		t.Fatal(err)
	}
	pol := access.Roles{}
	if g, _ := LookupGID(a.Group); g >= 0 {
		pol.ReadGID = access.GID(uint32(g))
	}
	if g, _ := LookupGID(a.AdminGroup); g >= 0 {
		pol.AdminGID = access.GID(uint32(g))
	}
	b = &servicetest.Backend{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- NewServer(b, pol).Serve(ctx, ln, time.Second) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return sock, bin, ln, b
}

// TestSocketAccessRealUsers runs real processes under other uids and groups
// against the real socket: the kernel's connect check on the socket file
// (mode, group, ACL) and the daemon's check (SO_PEERCRED, SO_PEERGROUPS,
// the access table) together.
func TestSocketAccessRealUsers(t *testing.T) {
	requireRoot(t)
	a := SocketAccess{Group: strconv.Itoa(sockGID), AdminGroup: strconv.Itoa(adminGID)}
	sock, bin, ln, b := serveShared(t, a)
	req := func(u testUser, method, target string) string {
		return as(t, bin, u, "request", method+" "+target+" "+sock)
	}
	tests := []struct {
		name           string
		u              testUser
		method, target string
		want           string // prefix of "CODE BODY" or "error ..."
	}{
		{"socket group reads status", reader, "GET", "/v1/status", "200 "},
		{"socket group reads the diff", reader, "GET", "/v1/policy/diff", "200 "},
		{"socket group may not reload", reader, "POST", "/v1/reload", `403 { "error": "uid 61000 may not change rdmad's state (/v1/reload)`},
		{"socket group may not apply", reader, "POST", "/v1/policy/apply", `403 { "error": "uid 61000 may not change rdmad's state (/v1/policy/apply)`},
		{"socket group may not probe", reader, "POST", "/v1/probe?peer=192.0.2.17", `403 { "error": "uid 61000 may not make rdmad probe now (/v1/probe)`},
		{"socket group among other groups reads", both, "GET", "/v1/status", "200 "},
		{"socket group among other groups may not reload", both, "POST", "/v1/reload", "403 "},
		{"admin outside the socket group reads", admin, "GET", "/v1/status", "200 "},
		{"admin outside the socket group probes", admin, "POST", "/v1/probe?peer=192.0.2.17", "200 "},
		{"admin outside the socket group reloads", admin, "POST", "/v1/reload", `200 { "ok": true, "generation": 2, "restart_needed": [] }`},
		{"stranger cannot connect", stranger, "GET", "/v1/status", "error dial unix " + sock + ": connect: permission denied"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := req(tt.u, tt.method, tt.target); !strings.HasPrefix(got, tt.want) {
				t.Errorf("%s %s as uid %d: %q, want %q...", tt.method, tt.target, tt.u.uid, got, tt.want)
			}
		})
	}
	if n := b.Count("Reload"); n != 1 {
		t.Errorf("backend reloaded %d times, want 1 (the admin's)", n)
	}
	// root does everything.
	if code, body, err := rawRequest(sock, "POST", "/v1/policy/apply"); err != nil || code != 200 {
		t.Errorf("apply as root: %d %s %v", code, body, err)
	}

	var st unix.Stat_t
	if err := unix.Lstat(sock, &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&0o7777 != 0o660 || st.Gid != sockGID || st.Uid != 0 {
		t.Errorf("socket mode %04o uid %d gid %d, want 0660 root %d", st.Mode&0o7777, st.Uid, st.Gid, sockGID)
	}

	// A reload that makes the admin group the socket group drops the ACL;
	// one that drops the admin group locks the former admin out at the
	// kernel's connect check already.
	if err := ln.Secure(SocketAccess{Group: a.Group}); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.Getxattr(sock, aclXattr, make([]byte, 256)); !errors.Is(err, unix.ENODATA) {
		t.Errorf("ACL after admin_group was dropped: %v, want none", err)
	}
	if got := req(admin, "GET", "/v1/status"); !strings.Contains(got, "permission denied") {
		t.Errorf("former admin after admin_group was dropped: %q, want permission denied at connect", got)
	}
	if got := req(reader, "GET", "/v1/status"); !strings.HasPrefix(got, "200 ") {
		t.Errorf("socket group after a reload: %q", got)
	}
}

// TestSecureRefusesSwappedSocket plays the symlink attack of issue #13
// item 3: the socket directory is group-writable for a while, a member of
// the socket group (a real process with that uid) replaces the socket with
// a symlink to a root-owned 0600 file, then rdmad reloads. Secure must
// leave the file alone and say why; so too when the directory was fixed
// again in between, and when the replacement is another socket.
func TestSecureRefusesSwappedSocket(t *testing.T) {
	requireRoot(t)
	a := SocketAccess{Group: strconv.Itoa(sockGID), AdminGroup: strconv.Itoa(adminGID)}
	sock, bin, ln, _ := serveShared(t, a)
	dir := filepath.Dir(sock)

	secretDir := t.TempDir()
	secret := filepath.Join(secretDir, "shadow")
	const content = "root:$y$secret:19000:0:99999:7:::\n"
	if err := os.WriteFile(secret, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	// The attacker must be able to name the target, not read it.
	os.Chmod(secretDir, 0o755)
	unchanged := func(t *testing.T) {
		t.Helper()
		var st unix.Stat_t
		if err := unix.Stat(secret, &st); err != nil {
			t.Fatal(err)
		}
		if st.Mode&0o7777 != 0o600 || st.Uid != 0 || st.Gid != 0 {
			t.Errorf("target is now mode %04o uid %d gid %d, want 0600 root root", st.Mode&0o7777, st.Uid, st.Gid)
		}
		if _, err := unix.Getxattr(secret, aclXattr, make([]byte, 256)); !errors.Is(err, unix.ENODATA) {
			t.Errorf("target got an ACL: %v", err)
		}
		if b, _ := os.ReadFile(secret); string(b) != content {
			t.Errorf("target content changed to %q", b)
		}
		if got := as(t, bin, reader, "read", secret); !strings.Contains(got, "permission denied") {
			t.Errorf("the attacker can read the target now: %q", got)
		}
	}

	// The misconfiguration: the socket group may write the directory.
	if err := os.Chown(dir, 0, sockGID); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o775); err != nil {
		t.Fatal(err)
	}
	if got := as(t, bin, reader, "swap", sock+" "+secret); got != "ok" {
		t.Fatalf("attacker's swap: %s", got)
	}
	if fi, err := os.Lstat(sock); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the attack did not replace the socket: %v %v", fi, err)
	}

	t.Run("writable directory", func(t *testing.T) {
		err := ln.Secure(a)
		if err == nil || !strings.Contains(err.Error(), "socket directory "+dir+" has mode 0775") || !strings.Contains(err.Error(), "chmod go-w "+dir) {
			t.Errorf("Secure in a group-writable directory: %v, want a refusal naming the directory and the fix", err)
		}
		unchanged(t)
	})

	// The directory is fixed, the symlink stays: the inode check holds.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Run("symlink", func(t *testing.T) {
		err := ln.Secure(a)
		if err == nil || !strings.Contains(err.Error(), sock) || !strings.Contains(err.Error(), "restart rdmad") {
			t.Errorf("Secure with the socket swapped for a symlink: %v, want a refusal naming the socket", err)
		}
		unchanged(t)
	})

	t.Run("another socket", func(t *testing.T) {
		os.Chmod(dir, 0o775)
		if got := as(t, bin, reader, "rebind", sock); got != "ok" {
			t.Fatalf("attacker's rebind: %s", got)
		}
		os.Chmod(dir, 0o755)
		err := ln.Secure(a)
		if err == nil || !strings.Contains(err.Error(), "is no longer the socket rdmad created (now another socket") {
			t.Errorf("Secure with the socket swapped for another socket: %v", err)
		}
	})
}

// TestListenRefusesWritableDir: Listen (and Secure) refuse a directory
// others can write, unless it is sticky and root's.
func TestListenRefusesWritableDir(t *testing.T) {
	requireRoot(t)
	tests := []struct {
		name  string
		setup func(dir string) error
		err   string // "" for accepted
	}{
		{"private", func(dir string) error { return os.Chmod(dir, 0o755) }, ""},
		{"world-writable", func(dir string) error { return os.Chmod(dir, 0o777) }, "has mode 0777: other users can write it"},
		{"group-writable", func(dir string) error { return os.Chmod(dir, 0o775) }, "has mode 0775"},
		// unix.Chmod: os.Chmod spells the sticky bit os.ModeSticky.
		{"sticky root", func(dir string) error { return unix.Chmod(dir, 0o1777) }, ""},
		{"sticky, not root's", func(dir string) error {
			if err := os.Chown(dir, 61000, 61000); err != nil {
				return err
			}
			return unix.Chmod(dir, 0o1777)
		}, "belongs to uid 61000"},
		{"another user's", func(dir string) error { return os.Chown(dir, 61000, 61000) }, "belongs to uid 61000, who could replace rdmad's socket"},
		// A named entry's write needs the mask's, which the mode shows.
		{"ACL lets a group write", func(dir string) error {
			if err := os.Chmod(dir, 0o755); err != nil {
				return err
			}
			acl := encodeACL([]aclEntry{
				{aclUserObj, 7, aclUndefinedID}, {aclGroupObj, 5, aclUndefinedID},
				{aclGroup, 7, sockGID}, {aclMask, 7, aclUndefinedID}, {aclOther, 5, aclUndefinedID},
			})
			return unix.Setxattr(dir, aclXattr, acl, 0)
		}, "has mode 0775"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "run")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := tt.setup(dir); err != nil {
				t.Fatal(err)
			}
			sock := filepath.Join(dir, "rdmad.sock")
			ln, err := Listen(sock, SocketAccess{})
			if tt.err == "" {
				if err != nil {
					t.Fatalf("Listen in %s: %v", tt.name, err)
				}
				ln.Close()
				return
			}
			if err == nil {
				ln.Close()
				t.Fatalf("Listen in a %s directory succeeded", tt.name)
			}
			if !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), tt.err) || !strings.Contains(err.Error(), "/run/rdmad") {
				t.Errorf("Listen: %v, want it to name %s, say %q and the fix", err, dir, tt.err)
			}
			if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a refused Listen left %s: %v", sock, err)
			}
		})
	}
}

// TestPeerGroupsLarge: SO_PEERGROUPS with more groups than the first
// buffer holds (the ERANGE retry), from a real process.
func TestPeerGroupsLarge(t *testing.T) {
	requireRoot(t)
	var many []uint32
	for g := uint32(62000); g < 62300; g++ {
		many = append(many, g)
	}
	many = append(many, sockGID)
	u := testUser{61007, 61007, many}
	sock, bin, _, _ := serveShared(t, SocketAccess{Group: strconv.Itoa(sockGID)})
	if got := as(t, bin, u, "request", "GET /v1/status "+sock); !strings.HasPrefix(got, "200 ") {
		t.Errorf("status as a member with %d groups, the socket group last: %q", len(many), got)
	}
	// And directly: every group arrives.
	dir, _ := sharedDir(t)
	path := filepath.Join(dir, "pair.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	os.Chmod(path, 0o666)
	go func() {
		// Only the connect matters; the answer never comes.
		cmd := exec.Command(bin, "GET /x "+path)
		cmd.Env = append(os.Environ(), helperEnv+"=request")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.uid, Gid: u.gid, Groups: u.groups}}
		cmd.Run()
	}()
	l.SetDeadline(time.Now().Add(10 * time.Second))
	c, err := l.AcceptUnix()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p := peerOf(c)
	if !p.Known || p.UID != u.uid || p.GID != u.gid || len(p.Groups) != len(many) {
		t.Fatalf("peer %d/%d with %d groups, want %d/%d with %d", p.UID, p.GID, len(p.Groups), u.uid, u.gid, len(many))
	}
	// The kernel keeps groups sorted.
	slices.Sort(many)
	if !slices.Equal(p.Groups, many) {
		t.Fatalf("groups %v, want %v", p.Groups, many)
	}
}
