package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
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

// The pid-reuse attack (issue #13, item 1): a member of the socket group
// connects, hands the connection to a survivor and exits; an admin-group
// process is then started with the same pid. A server that reads the
// peer's groups from /proc/<pid> after the connect sees the admin's groups
// and lets the survivor reload. The test plays it for real in a new pid
// namespace, where writing ns_last_pid makes the kernel give the admin
// process exactly the freed pid, and the server is in the same namespace,
// so that its /proc would show the admin's groups for that pid.

const (
	arenaAttacker = 61000 // uid and gid of the socket-group member
	arenaAdmin    = 61003 // uid and gid of the admin-group member
	arenaSockGID  = 61001
	arenaAdminGID = 61002
	arenaDirEnv   = "RDMAD_API_ARENA_DIR"
)

// An arenaResult is what the arena reports to the test.
type arenaResult struct {
	AttackerPID int
	AdminPID    int
	Tries       int
	// ProcGroups are the groups /proc/<AttackerPID>/status showed when
	// the survivor sent its request: what the old code would have used.
	ProcGroups []uint32
	Code       int
	Body       string
	Reloads    int32
	Err        string
}

func TestPIDReuseGivesNoAdmin(t *testing.T) {
	requireRoot(t)
	dir, bin := sharedDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "arena")
	cmd.Env = append(os.Environ(), helperEnv+"=arena", arenaDirEnv+"="+dir)
	// A new pid namespace, and a mount namespace for its own /proc.
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("arena: %v; output:\n%s", err, out)
	}
	var res arenaResult
	asJSON(t, strings.TrimSpace(string(out)), &res)
	t.Logf("arena: %+v", res)
	if res.Err != "" {
		t.Fatalf("arena could not set the attack up: %s\n%s", res.Err, out)
	}
	// The attack really happened: the admin process holds the pid the
	// socket-group member connected from, and /proc says so.
	if res.AdminPID != res.AttackerPID {
		t.Fatalf("the admin process got pid %d, not the attacker's %d: the test did not reproduce the reuse", res.AdminPID, res.AttackerPID)
	}
	if !slices.Contains(res.ProcGroups, arenaAdminGID) {
		t.Fatalf("/proc/%d shows groups %v, without the admin group %d: the trap was not set", res.AttackerPID, res.ProcGroups, arenaAdminGID)
	}
	// And it gained nothing.
	if res.Code != 403 || !strings.Contains(res.Body, "uid 61000 may not change rdmad's state (/v1/reload)") {
		t.Errorf("the survivor's reload answered %d %s, want 403 naming uid %d", res.Code, res.Body, arenaAttacker)
	}
	if res.Reloads != 0 {
		t.Errorf("the backend reloaded %d times, want 0", res.Reloads)
	}
}

// pidReuseArena runs as pid 1 of a new pid namespace, as root: the server,
// the attacker, its survivor and the admin process all live in it.
func pidReuseArena() int {
	res := arenaResult{}
	err := func() error {
		dir := os.Getenv(arenaDirEnv)
		bin := filepath.Join(dir, "helper.test")
		// Our own /proc for this pid namespace, not propagated to the
		// host's mount namespace.
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			return fmt.Errorf("make mounts private: %w", err)
		}
		if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return fmt.Errorf("mount proc: %w", err)
		}
		sock := filepath.Join(dir, "rdmad.sock")
		ln, err := Listen(sock, SocketAccess{Group: strconv.Itoa(arenaSockGID), AdminGroup: strconv.Itoa(arenaAdminGID)})
		if err != nil {
			return err
		}
		defer ln.Close()

		// go: the arena tells the survivor to send; out: its answer.
		goR, goW, err := os.Pipe()
		if err != nil {
			return err
		}
		outR, outW, err := os.Pipe()
		if err != nil {
			return err
		}
		attacker := exec.Command(bin, sock)
		attacker.Env = append(os.Environ(), helperEnv+"=attacker")
		attacker.ExtraFiles = []*os.File{goR, outW}
		attacker.Stderr = os.Stderr
		attacker.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{
			Uid: arenaAttacker, Gid: arenaAttacker, Groups: []uint32{arenaSockGID}}}
		// The server does not accept yet: the attacker's connection waits
		// in the listen backlog, so an accept-time look-up would come
		// after the reuse.
		if err := attacker.Run(); err != nil {
			return fmt.Errorf("attacker: %w", err)
		}
		goR.Close()
		outW.Close()
		res.AttackerPID = attacker.Process.Pid

		// Give the admin process the attacker's pid: the next pid the
		// kernel hands out is ns_last_pid+1. Go's own threads also take
		// pids, so try again until the admin process lands on it.
		var admin *exec.Cmd
		var stdin *os.File
		for res.Tries = 1; res.Tries <= 100; res.Tries++ {
			r, w, err := os.Pipe()
			if err != nil {
				return err
			}
			admin = exec.Command(bin, "x")
			admin.Env = append(os.Environ(), helperEnv+"=sleeper")
			admin.Stdin = r
			admin.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{
				Uid: arenaAdmin, Gid: arenaAdmin, Groups: []uint32{arenaAdminGID}}}
			if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(res.AttackerPID-1)), 0); err != nil {
				return fmt.Errorf("write ns_last_pid: %w", err)
			}
			if err := admin.Start(); err != nil {
				return fmt.Errorf("admin: %w", err)
			}
			r.Close()
			if admin.Process.Pid == res.AttackerPID {
				stdin = w
				break
			}
			w.Close()
			admin.Wait()
		}
		res.AdminPID = admin.Process.Pid
		defer func() { stdin.Close(); admin.Wait() }()
		// Wait until the admin process runs with its credentials (setuid
		// happens in the child before exec), then read what /proc says.
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			res.ProcGroups = procGroups(res.AttackerPID)
			if slices.Contains(res.ProcGroups, arenaAdminGID) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}

		b := &servicetest.Backend{}
		pol := access.Roles{ReadGID: access.GID(arenaSockGID), AdminGID: access.GID(arenaAdminGID)}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- NewServer(b, pol).Serve(ctx, ln, time.Second) }()
		defer func() { cancel(); <-done }()

		if _, err := goW.Write([]byte{1}); err != nil {
			return fmt.Errorf("wake the survivor: %w", err)
		}
		outR.SetReadDeadline(time.Now().Add(20 * time.Second))
		line, err := bufio.NewReader(outR).ReadString('\n')
		if err != nil {
			return fmt.Errorf("read the survivor's answer: %w", err)
		}
		code, body, _ := strings.Cut(strings.TrimSpace(line), " ")
		res.Code, _ = strconv.Atoi(code)
		res.Body = body
		res.Reloads = int32(b.Count("Reload"))
		return nil
	}()
	if err != nil {
		res.Err = err.Error()
	}
	j, _ := json.Marshal(res)
	fmt.Println(string(j))
	return 0
}

// pidReuseAttacker runs as the socket-group member: it connects, starts a
// survivor that inherits the connection, and exits, freeing its pid.
func pidReuseAttacker(sock string) int {
	c, err := net.Dial("unix", sock)
	if err != nil {
		fmt.Fprintln(os.Stderr, "attacker: connect:", err)
		return 1
	}
	f, err := c.(*net.UnixConn).File()
	if err != nil {
		fmt.Fprintln(os.Stderr, "attacker:", err)
		return 1
	}
	self, _ := os.Executable()
	s := exec.Command(self, "x")
	s.Env = append(os.Environ(), helperEnv+"=survivor")
	// fd 3: the connection; 4: the go pipe; 5: the answer pipe.
	s.ExtraFiles = []*os.File{f, os.NewFile(3, "go"), os.NewFile(4, "out")}
	s.Stderr = os.Stderr
	if err := s.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "attacker: start the survivor:", err)
		return 1
	}
	return 0
}

// pidReuseSurvivor waits for the arena's signal and sends POST /v1/reload
// on the connection its parent made.
func pidReuseSurvivor() int {
	out := os.NewFile(5, "out")
	buf := make([]byte, 1)
	if _, err := os.NewFile(4, "go").Read(buf); err != nil {
		fmt.Fprintln(out, "0 survivor: wait:", err)
		return 1
	}
	c, err := net.FileConn(os.NewFile(3, "conn"))
	if err != nil {
		fmt.Fprintln(out, "0 survivor:", err)
		return 1
	}
	code, body, err := requestOn(c, "POST", "/v1/reload")
	if err != nil {
		fmt.Fprintln(out, "0 survivor:", err)
		return 1
	}
	fmt.Fprintf(out, "%d %s\n", code, body)
	return 0
}

// procGroups reads what /proc says the groups of pid are: the look-up the
// old code did, here only to prove that the attack was set up.
func procGroups(pid int) []uint32 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "Groups:"); ok {
			var gs []uint32
			for _, f := range strings.Fields(rest) {
				if g, err := strconv.ParseUint(f, 10, 32); err == nil {
					gs = append(gs, uint32(g))
				}
			}
			return gs
		}
	}
	return nil
}
