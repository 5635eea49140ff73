package daemon

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
)

// TestLogComponents: the transitions of components into a problem and
// back are logged with their reason and MESSAGE_ID, at WARN and INFO; a
// component that stays the same, or starts ok, is not logged again.
func TestLogComponents(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	now := time.Now()
	steps := []map[string]apitype.Component{
		{},
		{"verbs": {State: apitype.OK, Since: now}, "dbus": {State: apitype.Unavailable, Reason: "no system bus", Since: now}},
		{"verbs": {State: apitype.OK, Since: now}, "dbus": {State: apitype.Unavailable, Reason: "no system bus", Since: now}},
		{"verbs": {State: apitype.Error, Error: "key_file /k: is a FIFO", Since: now}, "dbus": {State: apitype.Unavailable, Reason: "no system bus", Since: now}},
		{"verbs": {State: apitype.Error, Error: "no device", Since: now}, "dbus": {State: apitype.Unavailable, Reason: "no system bus", Since: now}},
		{"verbs": {State: apitype.OK, Since: now}, "dbus": {State: apitype.Disabled, Reason: "off", Since: now}},
	}
	for i := 1; i < len(steps); i++ {
		logComponents(log, steps[i-1], steps[i])
	}
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var e map[string]any
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		got = append(got, strings.Join([]string{e["level"].(string), str(e["MESSAGE_ID"]), str(e["component"]), str(e["from"]), str(e["to"]), str(e["reason"])}, " | "))
	}
	want := []string{
		"WARN | " + apitype.MsgComponentProblem + " | dbus | none | unavailable | no system bus",
		"WARN | " + apitype.MsgComponentProblem + " | verbs | ok | error | key_file /k: is a FIFO",
		"WARN | " + apitype.MsgComponentProblem + " | verbs | error | error | no device",
		"INFO | " + apitype.MsgComponentOK + " | dbus | unavailable | disabled | off",
		"INFO | " + apitype.MsgComponentOK + " | verbs | error | ok | ",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("logged:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func str(v any) string {
	if v == nil {
		return ""
	}
	s, _ := v.(string)
	return s
}
