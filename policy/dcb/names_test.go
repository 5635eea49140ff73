package dcb

import (
	"slices"
	"testing"
)

func TestNames(t *testing.T) {
	for tsa, want := range map[uint8]string{TSAStrict: "strict", TSACBShaper: "cbs", TSAETS: "ets", TSAVendor: "vendor", 7: "tsa-7"} {
		if got := TSAName(tsa); got != want {
			t.Errorf("TSAName(%d) = %q, want %q", tsa, got, want)
		}
	}
	for mode, want := range map[uint8][]string{0: {}, DCBXHost | DCBXVerIEEE: {"host", "ieee"},
		DCBXLLDManaged | DCBXVerCEE | DCBXVerIEEE: {"lld-managed", "cee", "ieee"}, DCBXStatic | 0x80: {"static"}} {
		if got := DCBXNames(mode); !slices.Equal(got, want) || got == nil {
			t.Errorf("DCBXNames(%#x) = %#v, want %q", mode, got, want)
		}
	}
}
