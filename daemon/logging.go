package daemon

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"unicode"

	"github.com/coreos/go-systemd/v22/journal"
)

// newLogger logs to the journal with structured fields (DEVICE=, NETDEV=,
// POLICY=, ...) when stderr is connected to it, and as text to stderr
// otherwise.
func newLogger(stderr io.Writer, level *slog.LevelVar) *slog.Logger {
	if ok, _ := journal.StderrIsJournalStream(); ok && journal.Enabled() {
		return slog.New(&journalHandler{level: level})
	}
	return slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
}

func parseLevel(s string) slog.Level {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return slog.LevelInfo
	}
	return l
}

// A journalHandler sends records to journald's native protocol, each attribute
// as an upper-case field, so `journalctl -u rdmad NETDEV=ens1f0` finds them.
type journalHandler struct {
	level  slog.Leveler
	attrs  []slog.Attr
	prefix string // of open groups, "GROUP_"
}

func (h *journalHandler) Enabled(_ context.Context, l slog.Level) bool {
	return l >= h.level.Level()
}

func (h *journalHandler) Handle(_ context.Context, r slog.Record) error {
	vars := map[string]string{"SYSLOG_IDENTIFIER": "rdmad"}
	var text strings.Builder
	text.WriteString(r.Message)
	add := func(prefix string, a slog.Attr) {
		a.Value = a.Value.Resolve()
		if a.Key == "" {
			return
		}
		k := fieldName(prefix + a.Key)
		v := a.Value.String()
		vars[k] = v
		fmt.Fprintf(&text, " %s=%s", a.Key, quoteIfNeeded(v))
	}
	for _, a := range h.attrs {
		add("", a)
	}
	r.Attrs(func(a slog.Attr) bool { add(h.prefix, a); return true })
	return journal.Send(text.String(), priority(r.Level), vars)
}

func (h *journalHandler) WithAttrs(as []slog.Attr) slog.Handler {
	n := *h
	n.attrs = append(append([]slog.Attr(nil), h.attrs...), as...)
	return &n
}

func (h *journalHandler) WithGroup(name string) slog.Handler {
	n := *h
	n.prefix = h.prefix + name + "_"
	return &n
}

func priority(l slog.Level) journal.Priority {
	switch {
	case l >= slog.LevelError:
		return journal.PriErr
	case l >= slog.LevelWarn:
		return journal.PriWarning
	case l >= slog.LevelInfo:
		return journal.PriInfo
	}
	return journal.PriDebug
}

// fieldName makes a valid journal field name: upper case, [A-Z0-9_], not
// starting with "_" (reserved for trusted fields).
func fieldName(k string) string {
	b := []rune(strings.ToUpper(k))
	for i, r := range b {
		if !(r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_') {
			b[i] = '_'
		}
	}
	s := strings.TrimLeft(string(b), "_")
	if s == "" || unicode.IsDigit(rune(s[0])) {
		s = "F_" + s
	}
	return s
}

func quoteIfNeeded(s string) string {
	if strings.ContainsAny(s, " \t\"=") || s == "" {
		return fmt.Sprintf("%q", s)
	}
	return s
}
