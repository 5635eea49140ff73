package metrics

import (
	"strings"
	"testing"

	"github.com/rdmad/rdmad/client/apitype"
)

// fixtureResources is rxe0 with ibv_rc_pingpong's and ib_core's objects.
func fixtureResources() apitype.Resources {
	return apitype.Resources{
		Processes: []apitype.ProcessResources{{PID: 4242, Comm: "ibv_rc_pingpong", Devices: []string{"rxe0"},
			ResourceCounts: apitype.ResourceCounts{QPs: 1, CQs: 1, MRs: 1, PDs: 1, PinnedBytes: 4096}}},
		Devices: []apitype.DeviceResources{{Device: "rxe0",
			ResourceCounts: apitype.ResourceCounts{QPs: 2, CQs: 2, MRs: 1, PDs: 2, PinnedBytes: 4096}}},
	}
}

// TestResourcesMetrics: per device and type, no per-process series; a
// read that failed exports nothing rather than zeros.
func TestResourcesMetrics(t *testing.T) {
	snap := fixtureSnapshot(t)
	res := fixtureResources()
	c := NewCollector(Options{Snapshot: func() *apitype.Snapshot { return snap }, SysfsRoot: "testdata/netroot", GoVersion: "go1.x",
		Resources: func() apitype.Resources { return res }})
	out := string(scrape(t, c))
	for _, line := range []string{
		`rdmad_rdma_resources{device="rxe0",type="qp"} 2`,
		`rdmad_rdma_resources{device="rxe0",type="cq"} 2`,
		`rdmad_rdma_resources{device="rxe0",type="mr"} 1`,
		`rdmad_rdma_resources{device="rxe0",type="pd"} 2`,
		`rdmad_rdma_pinned_bytes{device="rxe0"} 4096`,
	} {
		if !strings.Contains(out, line+"\n") {
			t.Errorf("scrape lacks %s", line)
		}
	}
	if strings.Contains(out, "4242") || strings.Contains(out, "ibv_rc_pingpong") {
		t.Error("the scrape names a process: no per-process labels")
	}
	res = apitype.Resources{Error: "rdmares: open an RDMA netlink socket: protocol not supported"}
	if out := string(scrape(t, c)); strings.Contains(out, "rdmad_rdma_") {
		t.Error("a failed read exported rdmad_rdma_ metrics")
	}
}
