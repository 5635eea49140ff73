package daemon

import (
	"log/slog"
	"maps"
	"slices"

	"github.com/rdmad/rdmad/client/apitype"
)

// logComponents logs each component whose health changed from prev to
// next: a problem (error, unavailable, or ok with a partial failure) that
// begins or changes at WARN with MsgComponentProblem, its end at INFO with
// MsgComponentOK. It runs in the store's finish step, so that every change,
// whoever made it (state.SetComponent from the main loop or the mailbox),
// is logged once, in one place. A component's first report is logged only
// if it is a problem: "ok" at start is no news.
func logComponents(log *slog.Logger, prev, next map[string]apitype.Component) {
	for _, name := range slices.Sorted(maps.Keys(next)) {
		c := next[name]
		old, had := prev[name]
		if had && old.State == c.State && old.Error == c.Error && old.Reason == c.Reason {
			continue
		}
		from := "none"
		if had {
			from = old.State
		}
		switch {
		case componentProblem(c):
			log.Warn("component "+name+" is "+c.State+": "+c.Detail(), apitype.MessageIDKey, apitype.MsgComponentProblem,
				"component", name, "from", from, "to", c.State, "reason", c.Detail())
		case had && componentProblem(old):
			log.Info("component "+name+" is "+c.State+" again", apitype.MessageIDKey, apitype.MsgComponentOK,
				"component", name, "from", from, "to", c.State, "was", old.Detail(), "reason", c.Reason)
		case had && c.State == apitype.Disabled:
			log.Info("component "+name+" is disabled", "component", name, "from", from, "reason", c.Reason)
		}
	}
}

// componentProblem reports whether c is something an operator must look
// at: failed, missing on this node, or working with a partial failure.
func componentProblem(c apitype.Component) bool {
	switch c.State {
	case apitype.Error, apitype.Unavailable:
		return true
	case apitype.OK:
		return c.Error != ""
	}
	return false
}
