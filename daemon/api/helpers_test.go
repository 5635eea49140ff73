package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The tests that play other users re-execute this test binary in a helper
// mode under another uid and groups (SysProcAttr.Credential), talking to a
// real socket. helperEnv selects the mode, see TestMain.
const helperEnv = "RDMAD_API_TEST_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(runHelper(mode, os.Args[len(os.Args)-1]))
	}
	os.Exit(m.Run())
}

func runHelper(mode, arg string) int {
	switch mode {
	case "request":
		// arg is "METHOD PATH SOCKET": send one request, print the status
		// code and the body.
		f := strings.Fields(arg)
		code, body, err := rawRequest(f[2], f[0], f[1])
		if err != nil {
			fmt.Printf("error %v\n", err)
			return 0
		}
		fmt.Printf("%d %s\n", code, body)
		return 0
	case "arena":
		return pidReuseArena()
	case "attacker":
		return pidReuseAttacker(arg)
	case "survivor":
		return pidReuseSurvivor()
	case "read":
		_, err := os.ReadFile(arg)
		fmt.Println("read:", err)
		return 0
	case "swap":
		// arg is "SOCKET TARGET": replace the socket with a symlink.
		f := strings.Fields(arg)
		if err := os.Remove(f[0]); err != nil {
			fmt.Println(err)
			return 0
		}
		if err := os.Symlink(f[1], f[0]); err != nil {
			fmt.Println(err)
			return 0
		}
		fmt.Println("ok")
		return 0
	case "rebind":
		// Replace the socket with one of our own, left behind.
		if err := os.Remove(arg); err != nil {
			fmt.Println(err)
			return 0
		}
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: arg, Net: "unix"})
		if err != nil {
			fmt.Println(err)
			return 0
		}
		l.SetUnlinkOnClose(false)
		l.Close()
		fmt.Println("ok")
		return 0
	case "sleeper":
		// Holds its pid until stdin closes.
		io.Copy(io.Discard, os.Stdin)
		return 0
	}
	fmt.Fprintf(os.Stderr, "unknown helper mode %q\n", mode)
	return 2
}

// rawRequest sends one HTTP request over the socket at path and returns the
// status code and the body on one line.
func rawRequest(path, method, target string) (int, string, error) {
	c, err := net.DialTimeout("unix", path, 5*time.Second)
	if err != nil {
		return 0, "", err
	}
	defer c.Close()
	return requestOn(c, method, target)
}

func requestOn(c net.Conn, method, target string) (int, string, error) {
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: rdmad\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", method, target); err != nil {
		return 0, "", err
	}
	r := bufio.NewReader(c)
	status, err := r.ReadString('\n')
	if err != nil {
		return 0, "", fmt.Errorf("read the status line: %w", err)
	}
	f := strings.Fields(status)
	if len(f) < 2 {
		return 0, "", fmt.Errorf("bad status line %q", status)
	}
	code, err := strconv.Atoi(f[1])
	if err != nil {
		return 0, "", fmt.Errorf("bad status line %q", status)
	}
	body, _ := io.ReadAll(io.LimitReader(r, 64<<10))
	// The body follows the first empty line; on one line for the pipes.
	_, b, _ := strings.Cut(string(body), "\r\n\r\n")
	return code, strings.Join(strings.Fields(b), " "), nil
}

// sharedDir is a directory every uid can enter (t.TempDir is 0700), with
// a copy of this test binary in it that every uid can run.
func sharedDir(t *testing.T) (dir, bin string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "rdmad-api-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	bin = filepath.Join(dir, "helper.test")
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir, bin
}

// A testUser is a uid with its primary gid and supplementary groups.
type testUser struct {
	uid, gid uint32
	groups   []uint32
}

// requireRoot skips tests that must start processes under other uids.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("playing other users needs root (setuid in a re-executed test binary); run the tests as root (make test)")
	}
}

// as runs the helper mode under u and returns its output.
func as(t *testing.T, bin string, u testUser, mode, arg string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, arg)
	cmd.Env = append(os.Environ(), helperEnv+"="+mode)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.uid, Gid: u.gid, Groups: u.groups}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper %s %q as uid %d: %v; output: %s", mode, arg, u.uid, err, out)
	}
	return strings.TrimSpace(string(out))
}

// asJSON decodes the last line of a helper's output.
func asJSON(t *testing.T, out string, v any) {
	t.Helper()
	lines := strings.Split(out, "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), v); err != nil {
		t.Fatalf("decode helper output %q: %v", out, err)
	}
}
