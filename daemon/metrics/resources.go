package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/rdmad/rdmad/client/apitype"
)

// --- RDMA objects the kernel tracks (rdma resource show) ---------------------

// The RDMA objects per device, read over RDMA netlink at scrape time
// through Options.Resources. Per device only: a label per process would
// give a new series for every pid (rdmactl resources names the processes).
var (
	rdmaResources = prometheus.NewDesc("rdmad_rdma_resources",
		"RDMA objects the kernel tracks on the device (rdma resource show), by type: qp, cq, mr or pd.",
		[]string{"device", "type"}, nil)
	rdmaPinned = prometheus.NewDesc("rdmad_rdma_pinned_bytes",
		"Bytes the device's memory regions pin (the sum of their lengths, rdma resource show mr), of every process and the kernel.",
		[]string{"device"}, nil)
)

var resourcesSection = section{
	descs: []*prometheus.Desc{rdmaResources, rdmaPinned},
	collect: func(c *Collector, _ *apitype.Snapshot, ch chan<- prometheus.Metric) {
		if c.opts.Resources == nil {
			return
		}
		var res apitype.Resources
		c.timed(collectorRDMANetlink, ch, func() bool {
			res = c.opts.Resources()
			return res.Error == ""
		})
		if res.Error != "" {
			return
		}
		for _, d := range res.Devices {
			for _, tc := range []struct {
				typ string
				n   int
			}{{"qp", d.QPs}, {"cq", d.CQs}, {"mr", d.MRs}, {"pd", d.PDs}} {
				ch <- gauge(rdmaResources, float64(tc.n), d.Device, tc.typ)
			}
			ch <- gauge(rdmaPinned, float64(d.PinnedBytes), d.Device)
		}
	},
}
