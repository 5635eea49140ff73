package daemon

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"

	"github.com/rdmad/rdmad/daemon/config"
)

// CheckConfig loads the configuration at path and its drop-ins as a start
// would, without starting anything (rdmad --check-config), and writes each
// problem to w as file:line: key: message. It returns the exit status: 0
// when the configuration is valid, 1 when it is not (a missing main file
// included: a check is of a file).
//
// A check runs where the files are written as often as where rdmad runs (CI,
// a pre-commit hook, a configuration management server), so what depends on
// the host rather than on the files is a warning, prefixed "warning:", that
// says so: a group that does not exist here, a key or peers file that is
// not here. What rdmad would refuse at start in a file that is here (a key
// file others can read, a peers file others can write, a short key, a
// peers file's bad line) is an error, as at start, where it degrades rdmad.
func CheckConfig(path string, w io.Writer) int {
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	cfg, warnings, err := config.Check(path)
	if err != nil {
		var es config.Errors
		if errors.As(err, &es) {
			for _, e := range es {
				fmt.Fprintln(w, e.Error())
			}
		} else {
			fmt.Fprintln(w, "rdmad:", err)
		}
		return 1
	}
	for _, e := range warnings {
		fmt.Fprintf(w, "warning: %s (of this host, not of the files: rdmad here would refuse the configuration)\n", e.Error())
	}
	code := 0
	for _, p := range checkInputFiles(cfg) {
		if p.host {
			fmt.Fprintf(w, "warning: %s (not on this host; rdmad needs it where it runs)\n", p.err)
			continue
		}
		fmt.Fprintln(w, p.err)
		code = 1
	}
	return code
}

// An inputProblem is one file the configuration names that a start would
// refuse; host: the file is not on this host at all.
type inputProblem struct {
	err  error
	host bool
}

// checkInputFiles reads the files cfg names as a start reads them: the
// fleet key ([probe] key_file) and the peers file ([probe] peers_file),
// each through the same reader and checks as the daemon's.
func checkInputFiles(cfg *config.Config) []inputProblem {
	var out []inputProblem
	if f := cfg.Probe.KeyFile; f != "" {
		if _, err := readProbeKey(f); err != nil {
			out = append(out, inputProblem{err: err, host: errors.Is(err, fs.ErrNotExist)})
		}
	}
	if f := cfg.Probe.PeersFile; f != "" {
		if _, err := readPeersFile(f); err != nil {
			out = append(out, inputProblem{err: err, host: errors.Is(err, fs.ErrNotExist)})
		}
	}
	return out
}
