package doctor

import (
	"fmt"
	"strings"

	"github.com/rdmad/rdmad/client/apitype"
)

// checkHealth is rdmad's health verdict (GET /v1/health, docs/HEALTH.md) as
// the doctor shows it: each condition that is a problem fails, each that
// is unknown warns, with the condition's own message. The checks after it
// give the details of some (ports, pcie, memlock, peers); port flapping
// and kernel faults have only this one.
func checkHealth(e *Env) Result {
	s := e.Snapshot
	if s == nil {
		return skip("needs rdmad's verdict (rdmactl check decides one from the inventory when rdmad is down)")
	}
	h := s.Health
	if h.Status == "" {
		return skip("this rdmad has no health verdict (it predates GET /v1/health)")
	}
	var c collector
	for _, st := range []string{apitype.ConditionProblem, apitype.ConditionUnknown} {
		for _, cond := range h.Conditions {
			if cond.Status != st {
				continue
			}
			v := Fail
			if st == apitype.ConditionUnknown {
				v = Warn
			}
			c.add(v, fmt.Sprintf("%s %s (%s): %s", cond.Type, st, cond.Reason, cond.Message),
				"docs/HEALTH.md ("+cond.Type+") says what to do; rdmactl check prints the verdict schedulers read")
		}
	}
	if c.verdict == "" {
		names := make([]string, 0, len(h.Conditions))
		for _, cond := range h.Conditions {
			names = append(names, cond.Type)
		}
		c.add(OK, fmt.Sprintf("every condition is ok (%s)", strings.Join(names, ", ")), "")
	}
	return c.result("")
}
