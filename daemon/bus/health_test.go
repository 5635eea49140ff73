package bus

import (
	"bytes"
	"encoding/binary"
	"slices"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/client/apitype"
)

// healthSnap has two devices, rxe1's port down (a problem about rxe1 only)
// and rxe0's loopback probe in state st.
func healthSnap(st string) *apitype.Snapshot {
	s := &apitype.Snapshot{
		Devices: []apitype.Device{{Name: "rxe0", Ports: []apitype.Port{{Port: 1, State: "ACTIVE"}}},
			{Name: "rxe1", Ports: []apitype.Port{{Port: 1, State: "DOWN"}}}},
		Loopback: []apitype.LoopbackPort{{Device: "rxe0", Port: 1, State: st, LastError: "bad\xffbyte",
			Write: apitype.OpStats{LastRTT: 40 * time.Microsecond}, UpdatedAt: time.Unix(1700000000, 0)}},
		Health: apitype.Health{Status: apitype.ConditionProblem, Conditions: []apitype.Condition{
			{Type: apitype.CondConfig, Status: apitype.ConditionOK, Reason: "ConfigLoaded"},
			{Type: apitype.CondPortDown, Status: apitype.ConditionProblem, Reason: "PortNotActive", Objects: []string{"rxe1/1"},
				Message: "rxe1/1 is DOWN", Since: time.Unix(1700000000, 0)},
		}},
	}
	s.FillLists()
	return s
}

func TestHealthProperties(t *testing.T) {
	v := newView(healthSnap("failed"))
	agent := v.objects[Path].props[Interface]
	if got := agent["HealthStatus"].Value(); got != "problem" {
		t.Errorf("agent HealthStatus %v", got)
	}
	h := agent["Health"].Value().(map[string]dbus.Variant)
	conds := h["conditions"].Value().([]map[string]dbus.Variant)
	if len(conds) != 2 || conds[1]["type"].Value() != "PortDown" || !slices.Equal(conds[1]["objects"].Value().([]string), []string{"rxe1/1"}) ||
		conds[1]["since"].Value() != int64(1700000000*1e6) {
		t.Errorf("agent Health conditions %v", conds)
	}
	d0, d1 := v.objects[DevicePath("rxe0")].props[DeviceInterface], v.objects[DevicePath("rxe1")].props[DeviceInterface]
	if d0["HealthStatus"].Value() != "ok" || d1["HealthStatus"].Value() != "problem" {
		t.Errorf("device health: rxe0 %v, rxe1 %v (rxe1's port is down)", d0["HealthStatus"], d1["HealthStatus"])
	}
	if d0["ProbeState"].Value() != "failed" || d1["ProbeState"].Value() != "none" {
		t.Errorf("ProbeState rxe0 %v rxe1 %v", d0["ProbeState"], d1["ProbeState"])
	}
	res := d0["ProbeResults"].Value().([]ProbeResult)
	want := []ProbeResult{{Probe: "loopback rxe0/1", OK: false, LastRTT: 40000, LastRun: 1700000000, Error: "bad\uFFFDbyte"}}
	if !slices.Equal(res, want) {
		t.Errorf("ProbeResults %+v, want %+v (invalid UTF-8 replaced)", res, want)
	}
	// Every property marshals: one bad byte must not break GetAll (the
	// same message with the raw text fails, so the check can fail).
	encode := func(ps any) error {
		msg := &dbus.Message{Type: dbus.TypeSignal, Headers: map[dbus.HeaderField]dbus.Variant{
			dbus.FieldPath: dbus.MakeVariant(Path), dbus.FieldInterface: dbus.MakeVariant(Interface),
			dbus.FieldMember: dbus.MakeVariant("X"), dbus.FieldSignature: dbus.MakeVariant(dbus.SignatureOf(ps))}, Body: []any{ps}}
		var buf bytes.Buffer
		return msg.EncodeTo(&buf, binary.LittleEndian)
	}
	if encode(map[string]dbus.Variant{"x": dbus.MakeVariant("bad\xffbyte")}) == nil {
		t.Fatal("godbus encodes invalid UTF-8: the check below proves nothing")
	}
	for _, o := range v.objects {
		for _, ps := range o.props {
			if err := encode(ps); err != nil {
				t.Errorf("%s: %v", o.path, err)
			}
		}
	}
}

func TestProbeAndHealthSignals(t *testing.T) {
	okSnap, failed := healthSnap("ok"), healthSnap("failed")
	okSnap.Health.Conditions[1].Status, okSnap.Health.Conditions[1].Objects = apitype.ConditionOK, nil
	names := func(sigs []signal) []string {
		var out []string
		for _, s := range sigs {
			out = append(out, s.name)
		}
		return out
	}
	down := changes(newView(okSnap), newView(failed))
	for _, want := range []string{Interface + ".ProbeFailed", Interface + ".HealthChanged"} {
		if !slices.Contains(names(down), want) {
			t.Errorf("ok -> failed: %v lacks %s", names(down), want)
		}
	}
	for _, s := range down {
		if s.name == Interface+".ProbeFailed" && (s.body[0] != DevicePath("rxe0") || s.body[1] != "loopback rxe0/1") {
			t.Errorf("ProbeFailed %v", s.body)
		}
		if s.name == Interface+".HealthChanged" && (s.body[0] != "PortDown" || s.body[1] != "ok" || s.body[2] != "problem") {
			t.Errorf("HealthChanged %v", s.body)
		}
	}
	up := changes(newView(failed), newView(okSnap))
	if !slices.Contains(names(up), Interface+".ProbeRecovered") || slices.Contains(names(up), Interface+".ProbeFailed") {
		t.Errorf("failed -> ok: %v", names(up))
	}
	if same := changes(newView(failed), newView(healthSnap("failed"))); slices.Contains(names(same), Interface+".ProbeFailed") {
		t.Errorf("failed -> failed signals again: %v", names(same))
	}
}
