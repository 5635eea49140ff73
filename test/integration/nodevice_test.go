package integration

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/client/apitype"
)

// TestNoDeviceDegraded runs rdmad on a sysfs root without RDMA devices: a
// node agent that can prove nothing is degraded. rdmactl status exits 3 and
// says why and what to do, and rdmad_healthy is 0.
func TestNoDeviceDegraded(t *testing.T) {
	// A later --sysfs-root wins over the fixture's.
	n := start(t, "", "--sysfs-root", t.TempDir())
	var s status
	var code int
	eventually(t, "the inventory to be read", func() bool {
		s, code = n.status()
		_, ok := s.Components[apitype.ComponentInventory]
		return ok && s.State != "starting"
	})
	if code != 3 || s.State != "degraded" || len(s.Devices) != 0 {
		t.Errorf("status --json without devices: exit %d, state %q, %d devices; want exit 3, degraded, none", code, s.State, len(s.Devices))
	}
	out, errOut, code := n.ctl("status")
	if code != 3 {
		t.Errorf("status exit %d without devices, want 3\n%s%s", code, out, errOut)
	}
	for _, want := range []string{"degraded", "no RDMA device: rdmad can prove nothing on this node", "rdma link add rxe0 type rxe netdev eth0", "ls /sys/class/infiniband"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}

	// The same verdict for monitoring: GET /metrics on the API socket.
	hc := http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", n.socket)
	}}}
	resp, err := hc.Get("http://rdmad/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "\nrdmad_healthy 0\n") {
		t.Errorf("GET /metrics: %s, rdmad_healthy not 0:\n%s", resp.Status, grepLines(string(body), "rdmad_healthy"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
