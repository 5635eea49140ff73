package health

import (
	"fmt"

	"github.com/rdmad/rdmad/client/apitype"
)

// inputs is InputRefused: a file the configuration names (the peers file,
// the fleet key) that rdmad refused at its last read. It is a problem, as
// a rejected configuration is (ConfigInvalid): what the admin declared is
// not what runs (a peers file refused leaves its peers unprobed, or probed
// as they were before; a key file refused leaves the peer probes on the
// old key or not started), and a file that others can write is exactly
// what an operator must hear of at once, not find in the journal. The
// message names the file, why and the fix, so that rdmactl check's one
// line and NHC's drain reason are enough to act on.
func (e evaluator) inputs() apitype.Condition {
	const t = apitype.CondInputRefused
	if len(e.s.RefusedFiles) > 0 {
		msgs := make([]string, 0, len(e.s.RefusedFiles))
		for _, f := range e.s.RefusedFiles {
			msgs = append(msgs, RefusedLine(f))
		}
		return problem(t, "FileRefused", nil, list(msgs))
	}
	if e.in.Local {
		return unknown(t, "DaemonNotAnswering", "rdmad does not answer: the files its configuration names are read by rdmad")
	}
	return ok(t, "FilesAccepted", "every file the configuration names was read")
}

// RefusedLine says in one line which file f is, why it was refused, what
// runs instead and the fix: the InputRefused condition's message and
// rdmactl status's line.
func RefusedLine(f apitype.RefusedFile) string {
	m := fmt.Sprintf("%s %s refused: %s", f.Key, f.Path, f.Why)
	if f.Kept != "" {
		m += "; " + f.Kept
	}
	if f.Fix != "" {
		m += "; fix: " + f.Fix
	}
	return m
}
