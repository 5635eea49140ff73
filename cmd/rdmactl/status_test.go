package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
)

// TestPrintStatusNoDevice: without an RDMA device the status says that
// nothing can be proven and what to do about it.
func TestPrintStatusNoDevice(t *testing.T) {
	s := &apitype.Snapshot{Version: "t", State: apitype.Degraded, Devices: []apitype.Device{},
		Components: map[string]apitype.Component{"inventory": {State: apitype.Unavailable, Error: apitype.NoDevice, Since: time.Now()}}}
	var b bytes.Buffer
	printStatus(&b, s, &shortener{full: true})
	for _, want := range []string{"DEGRADED: no RDMA device: rdmad can prove nothing on this node", "rdma link add rxe0 type rxe netdev eth0", "ls /sys/class/infiniband"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, b.String())
		}
	}
	if s.Healthy() {
		t.Errorf("a snapshot without devices is healthy; rdmactl status would exit 0")
	}
}
