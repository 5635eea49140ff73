package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/client"
	"github.com/rdmad/rdmad/inventory"
)

// rdmactl bugreport collects what a support ticket needs into one archive
// (#27 item 8). It runs as root, so it trusts neither what it writes over
// nor what it reads: the output is created with O_EXCL|O_NOFOLLOW (an
// existing file or symlink at the path is refused), every item is bounded,
// the external tools run without a shell under a timeout, and the only
// files it reads are the *.toml of the configuration, never the key file
// they name.

const (
	// bugItemMax bounds one collected item; the journal gets more.
	bugItemMax    = 8 << 20
	bugJournalMax = 32 << 20
	// bugToolTimeout bounds each external tool (journalctl, rdma,
	// ibv_devinfo, rdmad --check-config).
	bugToolTimeout = 20 * time.Second
	// bugSinceMax bounds --since.
	bugSinceMax = 31 * 24 * time.Hour
	// bugConfigDir is where the configuration's files must be: a path
	// rdmad's answer names elsewhere is not read.
	bugConfigDir = "/etc/rdmad/"
)

// A bugItem is one file of the report.
type bugItem struct {
	name string
	data []byte
	// status is "ok", "truncated" or "failed"; note says why.
	status, note string
}

// A bugReport is what rdmactl bugreport collects; the fields other than
// items are the host's roots and tools, replaced in tests.
type bugReport struct {
	items    []bugItem
	sysRoot  string // "/" on a host
	procRoot string // "/proc"
	confDir  string // bugConfigDir
	lookPath func(string) (string, error)
	now      time.Time
	// doctorInterval is rdmactl doctor --interval; toolTimeout bounds
	// each external tool.
	doctorInterval string
	toolTimeout    time.Duration
	// afterMkdir, when set, runs between writeDir's mkdir and its writes:
	// where a test swaps the directory as an attacker would.
	afterMkdir func(path string)
}

// newBugReport returns the collector of this host (tests replace it).
var newBugReport = func() *bugReport {
	return &bugReport{sysRoot: "/", procRoot: "/proc", confDir: bugConfigDir, lookPath: exec.LookPath, now: time.Now(), doctorInterval: "2s", toolTimeout: bugToolTimeout}
}

func (b *bugReport) add(name string, data []byte, err error) {
	it := bugItem{name: name, data: data, status: "ok"}
	if err != nil {
		it.status, it.note = "failed", err.Error()
		if len(data) == 0 {
			it.data = []byte(err.Error() + "\n")
		}
	}
	b.items = append(b.items, it)
}

func (b *bugReport) addCapped(name string, c *capped, err error) {
	b.add(name, c.Bytes(), err)
	if c.cut && err == nil {
		it := &b.items[len(b.items)-1]
		it.status, it.note = "truncated", fmt.Sprintf("cut at %d bytes", c.max)
	}
}

// capped is a buffer that keeps the first max bytes written to it and
// drops the rest, remembering that it did. The buffer is a field, not
// embedded: an embedded bytes.Buffer's ReadFrom would let io.Copy write
// past the bound.
type capped struct {
	buf bytes.Buffer
	max int
	cut bool
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.buf.Len(); len(p) > room {
		c.cut = true
		if room > 0 {
			c.buf.Write(p[:room])
		}
		return len(p), nil
	}
	return c.buf.Write(p)
}

func (c *capped) Bytes() []byte  { return c.buf.Bytes() }
func (c *capped) String() string { return c.buf.String() }

// readBounded reads at most max bytes of path without following a
// symlink at its end, and only a regular file.
func readBounded(path string, max int) (*capped, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (%s)", path, fi.Mode().Type())
	}
	c := &capped{max: max}
	_, err = io.Copy(c, io.LimitReader(f, int64(max)+1))
	return c, err
}

// tool runs name with args, without a shell, under bugToolTimeout, and
// keeps at most max bytes of its output (stdout and stderr together).
func (b *bugReport) tool(ctx context.Context, item string, max int, name string, args ...string) {
	path, err := b.lookPath(name)
	if err != nil {
		b.add(item, nil, fmt.Errorf("%s is not installed here (not on PATH): nothing collected", name))
		return
	}
	ctx, cancel := context.WithTimeout(ctx, b.toolTimeout)
	defer cancel()
	out := &capped{max: max}
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = []string{"LC_ALL=C", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "SYSTEMD_PAGER=", "SYSTEMD_COLORS=0"}
	cmd.WaitDelay = 2 * time.Second // a child that keeps the pipe open
	err = cmd.Run()
	if ctx.Err() == context.DeadlineExceeded {
		err = fmt.Errorf("%s %s: killed after %v", name, strings.Join(args, " "), b.toolTimeout)
	} else if err != nil {
		err = fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	b.addCapped(item, out, err)
}

// jsonItem adds v, rdmad's answer, as indented JSON, or the error that
// kept it.
func (b *bugReport) jsonItem(name string, v any, err error) {
	if err != nil {
		b.add(name, nil, fmt.Errorf("ask rdmad: %w", err))
		return
	}
	data, err := json.MarshalIndent(v, "", "  ")
	b.add(name, append(data, '\n'), err)
}

// redactTOML replaces the values of keys that may hold a secret. rdmad's
// configuration names its fleet key by path (key_file, kept: a path says
// where to look, not what is there); any key that looks like a secret
// (key, *_key, *secret*, *token*, *password*) is blanked, in case an
// operator wrote one inline.
func redactTOML(data []byte) []byte {
	lines := strings.SplitAfter(string(data), "\n")
	for i, line := range lines {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || trimmed[0] == '#' || trimmed[0] == '[' {
			continue
		}
		eq := strings.IndexByte(line, '=')
		if eq < 0 {
			continue
		}
		key := strings.ToLower(strings.Trim(strings.TrimSpace(line[:eq]), `"'`))
		if key == "key_file" {
			continue
		}
		if key == "key" || strings.HasSuffix(key, "_key") || strings.Contains(key, "secret") ||
			strings.Contains(key, "token") || strings.Contains(key, "password") || strings.Contains(key, "passwd") {
			nl := ""
			if strings.HasSuffix(line, "\n") {
				nl = "\n"
			}
			lines[i] = line[:eq] + `= "(redacted by rdmactl bugreport)"` + nl
		}
	}
	return []byte(strings.Join(lines, ""))
}

// configFiles are the configuration's files to collect: those rdmad says
// it loaded, else the main file and the drop-ins on disk; only *.toml
// under confDir.
func (b *bugReport) configFiles(fromStatus []string) []string {
	files := fromStatus
	if len(files) == 0 {
		files = []string{filepath.Join(b.confDir, "rdmad.toml")}
		drop, _ := filepath.Glob(filepath.Join(b.confDir, "rdmad.d", "*.toml"))
		files = append(files, drop...)
	}
	sort.Strings(files)
	return files
}

// configPathOK reports whether f may be read as a configuration file: an
// absolute, clean *.toml under confDir. Whatever answers on the socket
// names the files, and rdmactl may run as root.
func (b *bugReport) configPathOK(f string) bool {
	return filepath.IsAbs(f) && filepath.Clean(f) == f && strings.HasPrefix(f, b.confDir) && strings.HasSuffix(f, ".toml")
}

func (b *bugReport) collectConfig(ctx context.Context, fromStatus []string, mainPath string) {
	for _, f := range b.configFiles(fromStatus) {
		name := "config" + filepath.Clean("/"+f)
		clean := filepath.Clean(f)
		if !b.configPathOK(f) {
			b.add(name, nil, fmt.Errorf("%q is not a *.toml file under %s: not read", f, b.confDir))
			continue
		}
		c, err := readBounded(clean, bugItemMax)
		if err != nil {
			b.add(name, nil, fmt.Errorf("read %s: %w", clean, err))
			continue
		}
		r := &capped{max: bugItemMax, cut: c.cut}
		r.Write(redactTOML(c.Bytes()))
		b.addCapped(name, r, nil)
	}
	if !b.configPathOK(mainPath) {
		// Its errors quote the file: only a configuration file.
		mainPath = filepath.Join(b.confDir, "rdmad.toml")
	}
	// Whether the files on disk now would be accepted: status.json's
	// config says which generation rdmad runs and why a load failed.
	b.tool(ctx, "config/check-config.txt", bugItemMax, "rdmad", "--check-config", mainPath)
}

// collectHost adds the kernel, OS and devices of this host.
func (b *bugReport) collectHost(ctx context.Context, since time.Duration) {
	var kernel bytes.Buffer
	for _, f := range []string{filepath.Join(b.procRoot, "version"), filepath.Join(b.sysRoot, "etc/os-release")} {
		c, err := readBounded(f, 64<<10)
		if err != nil {
			fmt.Fprintf(&kernel, "# %s: %v\n", f, err)
			continue
		}
		fmt.Fprintf(&kernel, "# %s\n%s\n", f, c.Bytes())
	}
	b.add("kernel.txt", kernel.Bytes(), nil)

	// The devices' sysfs as rdmad's inventory reads it.
	devs, err := inventory.Reader{Root: b.sysRoot}.Read()
	if err != nil {
		b.add("inventory.json", nil, fmt.Errorf("read the RDMA devices' sysfs: %w", err))
	} else {
		data, err := json.MarshalIndent(devs, "", "  ")
		b.add("inventory.json", append(data, '\n'), err)
	}

	b.tool(ctx, "rdma-dev.txt", bugItemMax, "rdma", "-d", "dev", "show")
	b.tool(ctx, "rdma-link.txt", bugItemMax, "rdma", "-d", "link", "show")
	b.tool(ctx, "rdma-system.txt", bugItemMax, "rdma", "system", "show")
	b.tool(ctx, "ibv_devinfo.txt", bugItemMax, "ibv_devinfo", "-v")
	from := b.now.Add(-since).Local().Format("2006-01-02 15:04:05")
	b.tool(ctx, "journal.txt", bugJournalMax, "journalctl", "-u", "rdmad", "--since", from, "--no-pager", "-o", "short-iso-precise")
}

// manifest lists every item with its outcome, the failures first.
func (b *bugReport) manifest(host string) []byte {
	var w bytes.Buffer
	fmt.Fprintf(&w, "rdmactl bugreport\nhost: %s\ntime: %s\nrdmactl: %s\n\n", host, b.now.UTC().Format(time.RFC3339), version)
	failed := 0
	for _, it := range b.items {
		if it.status == "failed" {
			failed++
		}
	}
	fmt.Fprintf(&w, "%d items, %d failed\n\n", len(b.items), failed)
	for _, it := range b.items {
		line := fmt.Sprintf("%-9s %-40s %9d bytes", it.status, it.name, len(it.data))
		if it.note != "" {
			line += "  " + oneLine(it.note)
		}
		fmt.Fprintln(&w, line)
	}
	return w.Bytes()
}

// createExclusive creates path for writing, mode 0600, refusing anything
// already there: a file, a directory, a symlink (dangling or not).
func createExclusive(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
}

// writeArchive writes the items as a gzip'd tar under the directory top.
func (b *bugReport) writeArchive(path, top string) error {
	f, err := createExclusive(path)
	if err != nil {
		return err
	}
	zw := gzip.NewWriter(f)
	tw := tar.NewWriter(zw)
	for _, it := range b.items {
		hdr := &tar.Header{Name: top + "/" + it.name, Mode: 0o600, Size: int64(len(it.data)), ModTime: b.now, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if err = tw.WriteHeader(hdr); err != nil {
			break
		}
		if _, err = tw.Write(it.data); err != nil {
			break
		}
	}
	if err == nil {
		err = tw.Close()
	}
	if err == nil {
		err = zw.Close()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
	}
	return err
}

// writeDir writes the items as files under a new directory at path (mode
// 0700; it must not exist). Everything after the mkdir goes through a
// descriptor of that directory, opened without following a link and
// checked to be a directory of this user that nobody else may enter: a
// user who may write the parent (root's report in a user's home) and swaps
// the new directory for a symlink or a directory of their own between the
// mkdir and the writes gets nothing written anywhere (#41 item 5). Inside,
// each subdirectory and file is made relative to its parent's descriptor,
// again without following links.
func (b *bugReport) writeDir(path string) error {
	if err := os.Mkdir(path, 0o700); err != nil {
		return err
	}
	if b.afterMkdir != nil {
		b.afterMkdir(path)
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		// ELOOP: a symlink; ENOTDIR: something else. Not ErrExist's
		// message: rdmactl made the directory, somebody replaced it.
		return fmt.Errorf("%s was replaced after rdmactl created it (%v): nothing written; write the report into a directory that only you can write", path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if int(st.Uid) != os.Geteuid() || st.Mode&0o077 != 0 {
		return fmt.Errorf("%s was replaced after rdmactl created it (owner uid %d, mode %#o; rdmactl made it uid %d, 0700): nothing written; write the report into a directory that only you can write", path, st.Uid, st.Mode&0o7777, os.Geteuid())
	}
	for _, it := range b.items {
		if err := writeAt(fd, it.name, it.data); err != nil {
			return fmt.Errorf("%s: %w", filepath.Join(path, it.name), err)
		}
	}
	return nil
}

// writeAt creates the file name (slash-separated, relative) under the
// directory dir, making its parent directories (mode 0700), all through
// descriptors and without following a link.
func writeAt(dir int, name string, data []byte) error {
	parts := strings.Split(name, "/")
	for _, p := range parts {
		if p == "" || p == "." || p == ".." {
			return fmt.Errorf("item name %q is not a clean relative path", name)
		}
	}
	cur := dir
	for _, p := range parts[:len(parts)-1] {
		if err := unix.Mkdirat(cur, p, 0o700); err != nil && err != unix.EEXIST {
			return err
		}
		fd, err := unix.Openat(cur, p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if cur != dir {
			unix.Close(cur)
		}
		if err != nil {
			return err
		}
		cur = fd
	}
	fd, err := unix.Openat(cur, parts[len(parts)-1], unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if cur != dir {
		unix.Close(cur)
	}
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), name)
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// safeHost is the host name as it may appear in a file name.
func safeHost(h string) string {
	out := []byte(h)
	for i, c := range out {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			out[i] = '_'
		}
	}
	if len(out) == 0 {
		return "unknown"
	}
	return string(out)
}

func cmdBugreport(ctx context.Context, g *globals, c *client.Client, x call) int {
	since := 24 * time.Hour
	if v, ok := x.flags["since"]; ok {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 || d > bugSinceMax {
			usageError(g.stderr, lookupCommand("bugreport"), fmt.Errorf("--since %q: give a duration from 1m to %v, such as 24h", v, bugSinceMax))
			return exitUsage
		}
		since = d
	}
	b := newBugReport()
	host, _ := os.Hostname()
	host = safeHost(host)
	_, dir := x.flags["dir"]
	top := fmt.Sprintf("rdmad-bugreport-%s-%s", host, b.now.UTC().Format("20060102T150405Z"))
	out := x.flags["output"]
	if out == "" {
		out = top
		if !dir {
			out += ".tar.gz"
		}
	}
	b.collect(ctx, g, c, since)
	if ctx.Err() != nil {
		return fail(g, ctx.Err())
	}
	b.items = append([]bugItem{{name: "MANIFEST", data: b.manifest(host), status: "ok"}}, b.items...)
	var err error
	if dir {
		err = b.writeDir(out)
	} else {
		err = b.writeArchive(out, top)
	}
	if errors.Is(err, os.ErrExist) || errors.Is(err, syscall.ELOOP) {
		fmt.Fprintf(g.stderr, "rdmactl: %s exists (a file, directory or symlink): bugreport never writes over anything; give a new path with --output\n", out)
		return exitError
	}
	if err != nil {
		fmt.Fprintf(g.stderr, "rdmactl: write the bug report to %s: %v\n", out, err)
		return exitError
	}
	failed := 0
	for _, it := range b.items {
		if it.status == "failed" {
			failed++
		}
	}
	fmt.Fprintf(g.stdout, "wrote %s: %d items, %d failed (MANIFEST says which and why); attach it to the ticket\n", out, len(b.items)-1, failed)
	return exitOK
}

// collect gathers every item: rdmad's answers (each saying so when rdmad
// does not answer), the doctor, the configuration, the host.
func (b *bugReport) collect(ctx context.Context, g *globals, c *client.Client, since time.Duration) {
	versions := fmt.Sprintf("rdmactl %s\n", version)
	var files []string
	var mainPath string
	down := g.socketErr
	if down == nil {
		raw, err := c.StatusRaw(ctx)
		var notRunning *client.NotRunningError
		switch {
		case errors.As(err, &notRunning) || errors.Is(err, context.DeadlineExceeded):
			down = err // nothing answers, or it hangs: not asked again
		case err != nil:
			// It answered, but not with a status (too large, an
			// error): the other questions may still be answered.
			b.add("status.json", nil, fmt.Errorf("ask rdmad for its status: %w", err))
			versions += fmt.Sprintf("rdmad: no status (%v)\n", err)
		default:
			b.add("status.json", append(bytes.TrimSpace(raw), '\n'), nil)
			var s struct {
				Version string `json:"version"`
				Config  struct {
					Path  string   `json:"path"`
					Files []string `json:"files"`
				} `json:"config"`
			}
			if err := json.Unmarshal(raw, &s); err == nil {
				versions += fmt.Sprintf("rdmad %s\n", s.Version)
				files, mainPath = s.Config.Files, s.Config.Path
			}
		}
	}
	if down != nil {
		b.add("status.json", nil, fmt.Errorf("rdmad did not answer: %w", down))
		versions += fmt.Sprintf("rdmad: did not answer (%v)\n", down)
		b.add("health.json", nil, fmt.Errorf("rdmad did not answer: %w", down))
		b.add("policy-diff.json", nil, fmt.Errorf("rdmad did not answer: %w", down))
		b.add("resources.json", nil, fmt.Errorf("rdmad did not answer: %w", down))
	} else {
		_, raw, err := c.HealthRaw(ctx)
		if err != nil {
			b.add("health.json", nil, fmt.Errorf("ask rdmad for its health: %w", err))
		} else {
			b.add("health.json", append(bytes.TrimSpace(raw), '\n'), nil)
		}
		diff, err := c.PolicyDiff(ctx)
		b.jsonItem("policy-diff.json", diff, err)
		res, err := c.Resources(ctx)
		b.jsonItem("resources.json", res, err)
	}
	b.add("version.txt", []byte(versions), nil)

	// rdmactl doctor --json, as the operator would run it (it runs the
	// table itself when rdmad does not answer).
	dout, derr := &capped{max: bugItemMax}, &capped{max: 64 << 10}
	dg := *g
	dg.stdout, dg.stderr, dg.json = dout, derr, true
	code := cmdDoctor(ctx, &dg, c, call{flags: map[string]string{"interval": b.doctorInterval}})
	var err error
	if code != exitOK && code != exitDegraded {
		err = fmt.Errorf("rdmactl doctor exited %d: %s", code, oneLine(strings.TrimSpace(derr.String())))
	}
	b.addCapped("doctor.json", dout, err)

	b.collectConfig(ctx, files, mainPath)
	b.collectHost(ctx, since)
}
