package qos

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/rdmad/rdmad/policy/dcb"
)

// TSA names, as mlnx_qos and iproute2's dcb spell them.
const (
	TSAStrict = "strict"
	TSAETS    = "ets"
	TSAVendor = "vendor"
)

// ETS is the desired enhanced transmission selection (IEEE 802.1Qaz) of a
// port: which traffic class each priority is in, and how the classes share
// the link. All three lists are indexed 0..7, as mlnx_qos takes them.
type ETS struct {
	// PrioTC is the traffic class of each priority.
	PrioTC [dcb.MaxPriorities]int
	// TSA is each traffic class's transmission selection algorithm:
	// TSAStrict, TSAETS or TSAVendor.
	TSA [dcb.MaxPriorities]string
	// BW is each traffic class's share of the bandwidth, in percent. Only
	// ETS classes have one: the others must say 0, and the shares of the
	// ETS classes sum to 100.
	BW [dcb.MaxPriorities]int
}

// tsaCode maps a TSA name to struct ieee_ets's tc_tsa value.
func tsaCode(name string) (uint8, bool) {
	switch name {
	case TSAStrict:
		return dcb.TSAStrict, true
	case TSAETS:
		return dcb.TSAETS, true
	case TSAVendor:
		return dcb.TSAVendor, true
	}
	return 0, false
}

// Validate reports the first value of e that no device takes, with the
// rules mlnx_qos applies: classes 0..7, a known TSA, shares only for ETS
// classes, and shares of the ETS classes that sum to 100.
func (e ETS) Validate() error {
	for prio, tc := range e.PrioTC {
		if tc < 0 || tc >= dcb.MaxPriorities {
			return fmt.Errorf("qos: ets prio_tc: priority %d -> traffic class %d: want 0..%d", prio, tc, dcb.MaxPriorities-1)
		}
	}
	sum, ets := 0, false
	for tc, name := range e.TSA {
		if _, ok := tsaCode(name); !ok {
			return fmt.Errorf("qos: ets tsa: traffic class %d: %q is not %q, %q or %q", tc, name, TSAStrict, TSAETS, TSAVendor)
		}
		bw := e.BW[tc]
		if bw < 0 || bw > 100 {
			return fmt.Errorf("qos: ets tc_bw: traffic class %d: %d%% is not 0..100", tc, bw)
		}
		if name != TSAETS && bw != 0 {
			return fmt.Errorf("qos: ets tc_bw: traffic class %d is %s and gets no share (%d%%): only ets classes share the bandwidth; give it 0", tc, name, bw)
		}
		if name == TSAETS {
			ets = true
			sum += bw
		}
	}
	if ets && sum != 100 {
		return fmt.Errorf("qos: ets tc_bw: the shares of the ets traffic classes sum to %d%%, want 100%%", sum)
	}
	return nil
}

// String formats e for status: "prio_tc=0,0,0,3,0,0,0,0 tsa=ets,... tc_bw=50,...".
func (e ETS) String() string {
	return fmt.Sprintf("prio_tc=%s tsa=%s tc_bw=%s", joinInts(e.PrioTC[:]), strings.Join(e.TSA[:], ","), joinInts(e.BW[:]))
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

// ETSFrom converts a device's ETS object to the shape of the policy, for
// comparison and status. The bandwidth of a class that is not ETS is shown
// as 0 whatever the driver reports (mlx5 reports 100 for strict classes,
// which is not a share).
func ETSFrom(e *dcb.ETS) ETS {
	var out ETS
	for i := range dcb.MaxPriorities {
		out.PrioTC[i] = int(e.PrioTC[i])
		out.TSA[i] = dcb.TSAName(e.TCTSA[i])
		if e.TCTSA[i] == dcb.TSAETS {
			out.BW[i] = int(e.TCTxBW[i])
		}
	}
	return out
}

// classes is how many traffic classes the device has: ets_cap, or all 8
// when the driver leaves it 0.
func classes(e *dcb.ETS) int {
	if e.Cap == 0 || e.Cap > dcb.MaxPriorities {
		return dcb.MaxPriorities
	}
	return int(e.Cap)
}

// planETS compares the desired ETS with the device's. Only the device's
// first ets_cap classes are compared; a policy that uses a class beyond
// them is refused, naming the limit.
func planETS(want ETS, actual Actual) ([]Change, error) {
	if actual.ets == nil {
		return nil, fmt.Errorf("qos: ets on %s: %w: the driver does not report ETS (no IEEE ETS object); leave ets out of its policy",
			actual.Ifname, ErrUnsupported)
	}
	n := classes(actual.ets)
	for prio, tc := range want.PrioTC {
		if tc >= n {
			return nil, fmt.Errorf("qos: ets on %s: priority %d -> traffic class %d, but the device has %d traffic classes (ets_cap %d): use classes 0..%d",
				actual.Ifname, prio, tc, n, actual.ets.Cap, n-1)
		}
	}
	for tc := n; tc < dcb.MaxPriorities; tc++ {
		if want.BW[tc] != 0 {
			return nil, fmt.Errorf("qos: ets on %s: traffic class %d gets %d%%, but the device has %d traffic classes (ets_cap %d): give classes %d..7 no share",
				actual.Ifname, tc, want.BW[tc], n, actual.ets.Cap, n)
		}
	}
	have := ETSFrom(actual.ets)
	same := have.PrioTC == want.PrioTC
	for tc := range n {
		same = same && have.TSA[tc] == want.TSA[tc] && have.BW[tc] == want.BW[tc]
	}
	if same {
		return nil, nil
	}
	next := *actual.ets
	for i := range dcb.MaxPriorities {
		next.PrioTC[i] = uint8(want.PrioTC[i])
		if i < n {
			next.TCTSA[i], _ = tsaCode(want.TSA[i])
			next.TCTxBW[i] = uint8(want.BW[i])
		}
	}
	return []Change{{Kind: KindETS, From: have.String(), To: want.String(), ets: &next}}, nil
}
