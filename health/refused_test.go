package health

import (
	"strings"
	"testing"

	"github.com/rdmad/rdmad/client/apitype"
)

// TestEvaluateInputRefused: a refused input file is a problem of the node
// whose message names each file, why, what stays in force and the fix; it
// is ok again once the daemon takes the refusal back, and unknown in
// rdmactl's own verdict (only rdmad reads the files).
func TestEvaluateInputRefused(t *testing.T) {
	s := node()
	s.RefusedFiles = []apitype.RefusedFile{
		{Key: "probe.key_file", Path: "/etc/rdmad/fleet.key", Why: "readable or writable by group or others (mode 0644)",
			Kept: "the peer probes go on with the key and settings in force", Fix: "chmod 600 /etc/rdmad/fleet.key, then rdmactl reload"},
		{Key: "probe.peers_file", Path: "/etc/rdmad/peers", Why: "owned by uid 1000, not root",
			Kept: "none of its peers is probed", Fix: "chown root: /etc/rdmad/peers, then rdmactl reload"},
	}
	h := Evaluate(Input{Snap: s, Now: t0})
	c := cond(t, h, apitype.CondInputRefused)
	if c.Status != apitype.ConditionProblem || c.Reason != "FileRefused" || h.Healthy || h.Status != apitype.ConditionProblem {
		t.Fatalf("InputRefused %+v, verdict %s; want a problem that makes the node's", c, h.Status)
	}
	for _, want := range []string{
		"probe.key_file /etc/rdmad/fleet.key refused: readable or writable by group or others (mode 0644); the peer probes go on with the key and settings in force; fix: chmod 600 /etc/rdmad/fleet.key, then rdmactl reload",
		"probe.peers_file /etc/rdmad/peers refused: owned by uid 1000, not root; none of its peers is probed; fix: chown root: /etc/rdmad/peers",
	} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("message %q lacks %q", c.Message, want)
		}
	}
	for _, other := range h.Conditions {
		if other.Type != apitype.CondInputRefused && other.Status != apitype.ConditionOK {
			t.Errorf("%s is %s: %s; a refused file is InputRefused's alone", other.Type, other.Status, other.Message)
		}
	}

	s.RefusedFiles = nil
	if c := cond(t, Evaluate(Input{Snap: s, Now: t0}), apitype.CondInputRefused); c.Status != apitype.ConditionOK {
		t.Errorf("without refused files: %+v, want ok", c)
	}
	if c := cond(t, Evaluate(Input{Snap: s, Now: t0, Local: true}), apitype.CondInputRefused); c.Status != apitype.ConditionUnknown {
		t.Errorf("rdmactl's own verdict: %+v, want unknown", c)
	}
}
