package daemon

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/internal/syncbuf"
)

// TestHealthLogChanges: the journal gets a condition that became a problem
// (WARN, MsgHealthProblem), one that is ok again after a problem (INFO,
// MsgHealthOK) and one ok that became unknown; not the start's unknown ->
// ok of every condition.
func TestHealthLogChanges(t *testing.T) {
	var buf syncbuf.Buffer
	h := newHealthPart(slog.New(slog.NewTextHandler(&buf, nil)))
	v := func(pairs ...string) apitype.Health {
		var out apitype.Health
		for i := 0; i < len(pairs); i += 2 {
			out.Conditions = append(out.Conditions, apitype.Condition{Type: pairs[i], Status: pairs[i+1], Reason: "R", Message: "m " + pairs[i]})
		}
		return out
	}
	const ok, unk, prob = apitype.ConditionOK, apitype.ConditionUnknown, apitype.ConditionProblem
	h.logChanges(v("PortDown", unk, "KernelFault", unk, "NoDevice", unk), v("PortDown", ok, "KernelFault", prob, "NoDevice", ok))
	h.logChanges(v("PortDown", ok, "KernelFault", prob), v("PortDown", unk, "KernelFault", ok))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	want := []string{
		"level=WARN msg=\"health condition problem\" MESSAGE_ID=" + apitype.MsgHealthProblem + " condition=KernelFault status=problem",
		"level=INFO msg=\"health condition unknown\" MESSAGE_ID=" + apitype.MsgHealthProblem + " condition=PortDown status=unknown",
		"level=INFO msg=\"health condition ok again\" MESSAGE_ID=" + apitype.MsgHealthOK + " condition=KernelFault status=ok",
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), buf.String())
	}
	for i, w := range want {
		if !strings.Contains(lines[i], w) {
			t.Errorf("line %d: %s\nwant it to contain %s", i, lines[i], w)
		}
	}
}
