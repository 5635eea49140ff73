package doctor

import (
	"strings"
	"testing"

	"github.com/rdmad/rdmad/client/apitype"
)

func TestCheckFirmware(t *testing.T) {
	for _, tt := range []struct {
		name    string
		targets []apitype.Target
		verdict string
		msg     string
		fix     string
	}{
		{"none declared", nil, Skip, "no [[policy]] declares a firmware version", ""},
		{"in sync", []apitype.Target{{Kind: "firmware", Object: "mlx5_0", Desired: ">=22.39.1002", Actual: "22.39.1002", State: apitype.InSync}},
			OK, `mlx5_0: firmware 22.39.1002 as policy "fabric" expects (>=22.39.1002)`, ""},
		{"old", []apitype.Target{
			{Kind: "firmware", Object: "mlx5_0", Desired: ">=22.39.1002", Actual: "22.39.1002", State: apitype.InSync},
			{Kind: "firmware", Object: "mlx5_1", Desired: ">=22.39.1002", Actual: "22.38.1900", State: apitype.Drifted},
		}, Warn, `mlx5_1: firmware 22.38.1900, policy "fabric" expects >=22.39.1002`, "rdmad does not flash firmware"},
		{"unknown", []apitype.Target{{Kind: "firmware", Object: "rxe0", Desired: "22.39.1002", Actual: "unknown", State: apitype.Unsupported, Error: "no fw_ver"}},
			Warn, "rxe0: firmware version unknown (no fw_ver)", "rxe"},
		{"other kinds ignored", []apitype.Target{{Kind: "mtu", Object: "ens1f0", Desired: "9000", Actual: "1500", State: apitype.Drifted}},
			Skip, "no [[policy]] declares a firmware version", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := checkFirmware(&Env{Snapshot: snapWith(tt.targets...)})
			if r.Verdict != tt.verdict || !strings.Contains(r.Message, tt.msg) || !strings.Contains(r.Fix, tt.fix) {
				t.Errorf("checkFirmware = %+v; want %s, message with %q, fix with %q", r, tt.verdict, tt.msg, tt.fix)
			}
		})
	}
	if r := checkFirmware(&Env{}); r.Verdict != Skip {
		t.Errorf("without rdmad: %+v, want skip", r)
	}
}
