package main

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rdmad/rdmad/client/apitype"
)

// qosSnapshot has an mlx5 netdev trusting DSCP with the firmware's default
// map (DSCP>>3), PFC on 3 and two ETS classes, and Soft-RoCE's netdev
// without DCB.
func qosSnapshot() apitype.Snapshot {
	mlx := apitype.NetdevQoS{Netdev: "ens1f0np0", Device: "mlx5_0", Supported: true, Trust: "dscp", DCBX: []string{"host", "ieee"},
		HasPFC: true, PFCCap: 8, PFCDelay: 7, PFCEnabled: []int{3},
		ETS: &apitype.ETS{Cap: 8, PrioTC: []int{0, 0, 0, 1, 0, 0, 0, 0}, TCs: []apitype.TrafficClass{
			{TC: 0, TSA: "ets", Bandwidth: 50}, {TC: 1, TSA: "ets", Bandwidth: 50}, {TC: 2, TSA: "strict"}}}}
	for d := range 64 {
		if d != 46 {
			mlx.DSCP = append(mlx.DSCP, apitype.DSCPPriority{DSCP: d, Priority: d >> 3})
		}
	}
	mlx.DSCP = append(mlx.DSCP, apitype.DSCPPriority{DSCP: 46, Priority: 3})
	return apitype.Snapshot{Version: "t", State: apitype.Running, QoS: []apitype.NetdevQoS{mlx,
		{Netdev: "eth0", Device: "rxe0", Error: "no DCB: the driver of eth0 has no dcbnl support (dcb: get IEEE on eth0: operation not supported), so its trust, PFC and DSCP map cannot be read or set"}}}
}

func TestQoS(t *testing.T) {
	sock := fakeRdmad(t, map[string]http.HandlerFunc{"GET /v1/status": answer(t, qosSnapshot())})

	code, out, errs := rdmactl(t, "-s", sock, "qos")
	if code != exitOK || errs != "" {
		t.Fatalf("rdmactl qos: exit %d, stderr %q", code, errs)
	}
	want := `ens1f0np0 (mlx5_0)
  DCBX mode:  host ieee
  trust:      dscp (by the APP table: DSCP entries make it trust DSCP)
  DSCP map:  
    prio 0:  dscp 0-7
    prio 1:  dscp 8-15
    prio 2:  dscp 16-23
    prio 3:  dscp 24-31,46
    prio 4:  dscp 32-39
    prio 5:  dscp 40-45,47
    prio 6:  dscp 48-55
    prio 7:  dscp 56-63
  PFC:        priority   0  1  2  3  4  5  6  7   (cap 8, delay 7)
              enabled    0  0  0  1  0  0  0  0
  ETS:
    tc 0:    ets 50%  priorities 0 1 2 4 5 6 7
    tc 1:    ets 50%  priorities 3
    tc 2:    strict   priorities -

eth0 (rxe0): no DCB: the driver of eth0 has no dcbnl support (dcb: get IEEE on eth0: operation not supported), so its trust, PFC and DSCP map cannot be read or set
`
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("rdmactl qos (-want +got):\n%s", diff)
	}

	// One netdev, as JSON: the status's entry.
	code, out, _ = rdmactl(t, "-s", sock, "--json", "qos", "eth0")
	var got []apitype.NetdevQoS
	if err := json.Unmarshal([]byte(out), &got); code != exitOK || err != nil || len(got) != 1 || got[0].Netdev != "eth0" || got[0].Supported {
		t.Errorf("rdmactl --json qos eth0: exit %d, %v, %+v\n%s", code, err, got, out)
	}
	for _, key := range []string{`"supported": false`, `"pfc_enabled": []`, `"dscp": []`, `"error": "no DCB`} {
		if !strings.Contains(out, key) {
			t.Errorf("rdmactl --json qos eth0 lacks %s:\n%s", key, out)
		}
	}
	code, out, _ = rdmactl(t, "-s", sock, "qos", "ens1f0np0", "--json")
	if err := json.Unmarshal([]byte(out), &got); code != exitOK || err != nil || len(got) != 1 || !got[0].PFCOn(3) || got[0].ETS == nil {
		t.Errorf("rdmactl qos ens1f0np0 --json: exit %d, %v, %+v", code, err, got)
	}

	// A netdev rdmad does not know: an error naming it and those it knows.
	code, out, errs = rdmactl(t, "-s", sock, "qos", "ens9")
	if code != exitError || out != "" || !strings.Contains(errs, `"ens9" is not a RoCE netdev of this node`) || !strings.Contains(errs, "give one of: ens1f0np0, eth0") {
		t.Errorf("rdmactl qos ens9: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	// Two netdevs: usage.
	if code, _, errs = rdmactl(t, "-s", sock, "qos", "a", "b"); code != exitUsage || !strings.Contains(errs, "usage") && !strings.Contains(errs, "Usage") {
		t.Errorf("rdmactl qos a b: exit %d, stderr %q; want usage", code, errs)
	}
}

// TestQoSNone: a node without RoCE netdevs (InfiniBand only) says so; JSON
// is [] (also from an rdmad that predates the qos field).
func TestQoSNone(t *testing.T) {
	sock := fakeRdmad(t, map[string]http.HandlerFunc{"GET /v1/status": answer(t, apitype.Snapshot{Version: "t"})})
	if code, out, _ := rdmactl(t, "-s", sock, "qos"); code != exitOK || !strings.Contains(out, "No RoCE netdevs") {
		t.Errorf("rdmactl qos without RoCE netdevs: exit %d, %q", code, out)
	}
	if code, out, _ := rdmactl(t, "-s", sock, "--json", "qos"); code != exitOK || strings.TrimSpace(out) != "[]" {
		t.Errorf("rdmactl --json qos without RoCE netdevs: exit %d, %q; want []", code, out)
	}
}

func TestRanges(t *testing.T) {
	for _, tt := range []struct {
		in   []int
		want string
	}{{[]int{26}, "26"}, {[]int{24, 25, 26, 27, 46}, "24-27,46"}, {[]int{1, 3, 4}, "1,3-4"}, {[]int{5, 4}, "5,4"}} {
		if got := ranges(tt.in); got != tt.want {
			t.Errorf("ranges(%v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestStatusQoS: rdmactl status has a line per RoCE netdev's DCB state.
func TestStatusQoS(t *testing.T) {
	sock := fakeRdmad(t, map[string]http.HandlerFunc{"GET /v1/status": answer(t, qosSnapshot())})
	_, out, errs := rdmactl(t, "-s", sock, "status")
	for _, re := range []string{`(?m)^QOS\s+DEVICE\s+TRUST\s+PFC\s+DSCP MAP\s+ETS\s+DETAIL$`,
		`(?m)^ens1f0np0\s+mlx5_0\s+dscp\s+3\s+64 values\s+3 tcs\s*$`,
		`(?m)^eth0\s+rxe0\s+-\s+-\s+-\s+-\s+no DCB: the driver of eth0 has no dcbnl support`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("rdmactl status lacks %s:\n%s%s", re, out, errs)
		}
	}
}
