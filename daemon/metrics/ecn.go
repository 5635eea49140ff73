package metrics

import (
	"slices"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rdmad/rdmad/client/apitype"
)

// --- RoCE netdevs: ECN / DCQCN ----------------------------------------------

// ecnEnabled exports the snapshot's ECN state (mlx5's
// /sys/class/net/<netdev>/ecn/roce_{np,rp}/enable/<prio>, read at every
// inventory refresh): one series per netdev, point and priority, so that
// an alert can name the priority that is off.
var ecnEnabled = prometheus.NewDesc("rdmad_ecn_enabled",
	"1 when DCQCN's point is enabled on the priority of the RoCE netdev (mlx5 sysfs ecn/roce_np|roce_rp/enable/<prio>): point np the notification point (answers ECN-marked packets with CNPs), rp the reaction point (slows down on CNPs); 0 when disabled.",
	[]string{"netdev", "point", "priority"}, nil)

var ecnSection = section{
	descs: []*prometheus.Desc{ecnEnabled},
	collect: func(c *Collector, s *apitype.Snapshot, ch chan<- prometheus.Metric) {
		for _, e := range s.ECN {
			for _, pt := range []struct {
				name string
				on   []int
			}{{"np", e.NP}, {"rp", e.RP}} {
				for p := 0; p < 8; p++ {
					ch <- gauge(ecnEnabled, b2f(slices.Contains(pt.on, p)), e.Netdev, pt.name, strconv.Itoa(p))
				}
			}
		}
	},
}
