package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/internal/syncbuf"
)

// copyTree copies the directory src to dst, symbolic links as links.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		to := filepath.Join(dst, rel)
		switch {
		case de.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			return os.Symlink(target, to)
		case de.IsDir():
			return os.MkdirAll(to, 0o755)
		default:
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			return os.WriteFile(to, b, 0o644)
		}
	})
	if err != nil {
		t.Fatalf("copy %s: %v", src, err)
	}
}

// TestJournalEvents runs rdmad as systemd would start it (JOURNAL_STREAM
// naming stderr) with a fake journal socket, and makes it log the tagged
// events a host can produce: drift detected (an observe-mode MTU policy on
// lo), drift applied (a memlock limits file), configuration rejected, a
// port state change, a device removed and added (in a copy of the sysfs
// fixture). Each is one native entry with its MESSAGE_ID and fields, and
// none goes to stderr as well. The status JSON has no null list, and the
// disabled peers component gives its reason apart from any error.
func TestJournalEvents(t *testing.T) {
	j := newFakeJournal(t)
	dir := t.TempDir()
	root := filepath.Join(dir, "sysfs")
	copyTree(t, "../inventory/testdata/roce-ib", root)
	sock := filepath.Join(dir, "rdmad.sock")
	limits := filepath.Join(dir, "90-rdmad.conf")
	t.Setenv(config.TestLimitsDirEnv, dir)
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		t.Skipf("no loopback interface to observe: %v", err)
	}
	want := 1500
	if lo.MTU == want {
		want = 9000
	}
	good := fmt.Sprintf("[daemon]\nsocket = %q\n\n[memlock]\nusers = \"1GiB\"\nlimits_file = %q\n\n"+
		"[[policy]]\nname = \"observe-lo\"\nnetdevs = [\"lo\"]\nmode = \"observe\"\nmtu = %d\n", sock, limits, want)
	cfgPath := filepath.Join(dir, "rdmad.toml")
	if err := os.WriteFile(cfgPath, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	stderr := &syncbuf.Buffer{}
	c := runDaemon(t, sock, Options{ConfigPath: cfgPath, ConfigRequired: true, SysfsRoot: root, Version: "test", Stderr: stderr})
	ctx := context.Background()
	const wait = 10 * time.Second

	j.next(t, wait, map[string]string{"MESSAGE_ID": apitype.MsgDriftDetected, "PRIORITY": "4", "SYSLOG_IDENTIFIER": "rdmad",
		"POLICY": "observe-lo", "KIND": "mtu", "OBJECT": "lo", "DESIRED": strconv.Itoa(want), "ACTUAL": strconv.Itoa(lo.MTU)})
	j.next(t, wait, map[string]string{"MESSAGE_ID": apitype.MsgDriftApplied, "POLICY": "memlock", "KIND": "memlock",
		"OBJECT": limits, "DESIRED": "* memlock 1GiB"})

	// Lists are [] in the status, and a disabled component has a reason.
	raw, err := c.StatusRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if nulls := nullLists(raw); len(nulls) > 0 {
		t.Errorf("GET /v1/status has null where a list or object belongs: %s", strings.Join(nulls, ", "))
	}
	var st struct {
		Peers struct {
			Ports []json.RawMessage `json:"ports"`
			Peers []json.RawMessage `json:"peers"`
		} `json:"peers"`
		Components map[string]map[string]string `json:"components"`
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		t.Fatal(err)
	}
	if st.Peers.Ports == nil || st.Peers.Peers == nil {
		t.Errorf("peers.ports %v, peers.peers %v: want [] without peer probes", st.Peers.Ports, st.Peers.Peers)
	}
	if p := st.Components["peers"]; p["state"] != apitype.Disabled || p["error"] != "" || !strings.Contains(p["reason"], "[[peer]]") {
		t.Errorf("peers component %v: want disabled, the reason in reason and no error", p)
	}

	// A rejected configuration.
	if err := os.WriteFile(cfgPath, []byte(good+"bogus = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if res, err := c.Reload(ctx); err != nil || res.OK {
		t.Fatalf("reload of a bad file: %+v, %v; want it rejected", res, err)
	}
	e := j.next(t, wait, map[string]string{"MESSAGE_ID": apitype.MsgConfigRejected, "PRIORITY": "3", "WHY": "request"})
	if !strings.Contains(e["ERR"], "bogus") || !strings.HasPrefix(e["MESSAGE"], "configuration rejected") {
		t.Errorf("config rejected entry %v: want the message and the error naming bogus in ERR", e)
	}
	if err := os.WriteFile(cfgPath, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	if res, err := c.Reload(ctx); err != nil || !res.OK {
		t.Fatalf("reload of the good file: %+v, %v", res, err)
	}

	// Port 2 of mlx5_0 comes up; rxe0 goes and comes back. A policy
	// apply reads the inventory again.
	lookAgain := func(what string) {
		t.Helper()
		if _, err := c.PolicyApply(ctx); err != nil {
			t.Fatalf("%s: policy apply: %v", what, err)
		}
	}
	port := filepath.Join(root, "sys/class/infiniband/mlx5_0/ports/2")
	if err := os.WriteFile(filepath.Join(port, "state"), []byte("4: ACTIVE\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(port, "phys_state"), []byte("5: LinkUp\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	lookAgain("port up")
	j.next(t, wait, map[string]string{"MESSAGE_ID": apitype.MsgPortState, "PRIORITY": "6", "DEVICE": "mlx5_0", "PORT": "2",
		"FROM": "DOWN/Disabled", "TO": "ACTIVE/LinkUp"})

	rxe := filepath.Join(root, "sys/class/infiniband/rxe0")
	away := filepath.Join(dir, "rxe0-away")
	if err := os.Rename(rxe, away); err != nil {
		t.Fatal(err)
	}
	lookAgain("rxe0 removed")
	j.next(t, wait, map[string]string{"MESSAGE_ID": apitype.MsgDeviceRemoved, "PRIORITY": "4", "DEVICE": "rxe0"})
	if err := os.Rename(away, rxe); err != nil {
		t.Fatal(err)
	}
	lookAgain("rxe0 back")
	j.next(t, wait, map[string]string{"MESSAGE_ID": apitype.MsgDeviceAdded, "PRIORITY": "6", "DEVICE": "rxe0", "PORTS": "1"})

	// One way only: nothing of it on stderr.
	for _, msg := range []string{"rdmad started", "configuration rejected", "policy drift", "RDMA device", "RDMA port"} {
		if strings.Contains(stderr.String(), msg) {
			t.Errorf("%q went to the fake journal and to stderr too:\n%s", msg, stderr.String())
		}
	}
}

// nullLists returns the paths of the nulls in a JSON document, except the
// fields documented as null when unknown (fingerprint).
func nullLists(raw []byte) []string {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return []string{"undecodable: " + err.Error()}
	}
	var out []string
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case nil:
			if !strings.HasSuffix(path, ".fingerprint") {
				out = append(out, path)
			}
		case map[string]any:
			for k, x := range v {
				walk(path+"."+k, x)
			}
		case []any:
			for i, x := range v {
				walk(fmt.Sprintf("%s[%d]", path, i), x)
			}
		}
	}
	walk("", v)
	return out
}
