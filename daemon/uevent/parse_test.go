package uevent

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func msg(fields ...string) []byte { return []byte(strings.Join(fields, "\x00") + "\x00") }

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		in      []byte
		want    Event
		wantErr string
	}{
		{
			name: "net add",
			in: msg("add@/devices/virtual/net/veth0", "ACTION=add", "DEVPATH=/devices/virtual/net/veth0",
				"SUBSYSTEM=net", "INTERFACE=veth0", "IFINDEX=7", "SEQNUM=4711"),
			want: Event{Action: "add", DevPath: "/devices/virtual/net/veth0", Subsystem: "net", Seqnum: 4711,
				Env: map[string]string{"ACTION": "add", "DEVPATH": "/devices/virtual/net/veth0", "SUBSYSTEM": "net",
					"INTERFACE": "veth0", "IFINDEX": "7", "SEQNUM": "4711"}},
		},
		{
			name: "infiniband remove, value containing '='",
			in:   msg("remove@/devices/virtual/infiniband/rxe0", "ACTION=remove", "SUBSYSTEM=infiniband", "NAME=a=b", "SEQNUM=1"),
			want: Event{Action: "remove", DevPath: "/devices/virtual/infiniband/rxe0", Subsystem: "infiniband", Seqnum: 1,
				Env: map[string]string{"ACTION": "remove", "SUBSYSTEM": "infiniband", "NAME": "a=b", "SEQNUM": "1"}},
		},
		{
			name: "header only",
			in:   []byte("change@/devices/x"),
			want: Event{Action: "change", DevPath: "/devices/x", Env: map[string]string{}},
		},
		{name: "libudev", in: append([]byte("libudev\x00\xfe\xed\xca\xfe"), msg("add@/x")...), wantErr: "libudev"},
		{name: "no at", in: msg("add/devices/x"), wantErr: "not ACTION@DEVPATH"},
		{name: "empty action", in: msg("@/devices/x"), wantErr: "not ACTION@DEVPATH"},
		{name: "empty devpath", in: msg("add@"), wantErr: "not ACTION@DEVPATH"},
		{name: "empty", in: nil, wantErr: "not ACTION@DEVPATH"},
		{name: "field without =", in: msg("add@/x", "JUNK"), wantErr: `field "JUNK" is not KEY=VALUE`},
		{name: "empty key", in: msg("add@/x", "=v"), wantErr: "is not KEY=VALUE"},
		{name: "action mismatch", in: msg("add@/x", "ACTION=remove"), wantErr: "disagrees"},
		{name: "bad seqnum", in: msg("add@/x", "SEQNUM=12a"), wantErr: `SEQNUM "12a"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Parse error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Parse (-want +got):\n%s", diff)
			}
		})
	}
}

// FuzzParse checks that Parse never panics and that what it accepts is
// self-consistent.
func FuzzParse(f *testing.F) {
	f.Add(msg("add@/devices/virtual/net/veth0", "ACTION=add", "SUBSYSTEM=net", "SEQNUM=1"))
	f.Add(msg("remove@/devices/virtual/infiniband/rxe0", "SUBSYSTEM=infiniband"))
	f.Add([]byte("libudev\x00\xfe\xed\xca\xfe"))
	f.Add([]byte("@"))
	f.Add([]byte("a@b\x00=\x00SEQNUM=18446744073709551616"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ev, err := Parse(b)
		if err != nil {
			return
		}
		if ev.Action == "" || ev.DevPath == "" {
			t.Fatalf("accepted event with empty action or devpath: %+v", ev)
		}
		if ev.Subsystem != ev.Env["SUBSYSTEM"] {
			t.Fatalf("Subsystem %q != Env[SUBSYSTEM] %q", ev.Subsystem, ev.Env["SUBSYSTEM"])
		}
		if a, ok := ev.Env["ACTION"]; ok && a != ev.Action {
			t.Fatalf("Action %q != Env[ACTION] %q", ev.Action, a)
		}
	})
}
