//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The probes' traffic class on the wire (issue #14 item 1). Soft-RoCE builds
// the IPv4 header of a RoCE v2 packet from the address vector's GRH: the
// ToS byte is the traffic class (rxe_net.c prepare4 passes
// av->grh.traffic_class to prepare_ipv4_hdr, which sets iph->tos to it),
// so a tc u32 filter on eth0's egress that matches the ToS byte of UDP
// packets to port 4791 counts the probes leaving with a given class.
//
// Only the peer probes leave eth0: rxe hands a packet to its own GID back
// to itself (rxe_loopback) without a netdev, so the loopback probe's class
// is checked in the status (the class its QPs were built with) only.
//
// The filters match the whole ToS byte (mask 0xff), ECN bits included:
// rxe writes the class unchanged, and clsact's egress hook runs before any
// qdisc that could mark ECN. 104 is DSCP 26 with ECN 00, 106 DSCP 26 with
// ECN 10 (ECT(0)).

const tclassDropin = "/etc/rdmad/rdmad.d/70-e2e-tclass.toml"

// tclassFilters are the u32 filters on eth0's egress, by preference: RoCE v2
// packets with ToS 104, 106 and 0.
var tclassFilters = map[int]int{10: 0x68, 20: 0x6a, 30: 0x00}

// tclassStatus is the part of the status this test reads.
type tclassStatus struct {
	Loopback []struct {
		Device       string `json:"device"`
		Port         int    `json:"port"`
		State        string `json:"state"`
		TrafficClass *int   `json:"traffic_class"`
	} `json:"loopback"`
	Peers struct {
		Ports []struct {
			Key          string `json:"key"`
			TrafficClass *int   `json:"traffic_class"`
		} `json:"ports"`
	} `json:"peers"`
}

// tclassSetup adds the clsact qdisc and the counting filters to node 1's
// eth0, removed at the end of the test.
func tclassSetup(t *testing.T) {
	t.Helper()
	run("tc", "qdisc", "del", "dev", "eth0", "clsact") // a leftover of an aborted run
	mustRun(t, "tc", "qdisc", "add", "dev", "eth0", "clsact")
	t.Cleanup(func() { run("tc", "qdisc", "del", "dev", "eth0", "clsact") })
	for pref, tos := range tclassFilters {
		mustRun(t, "tc", "filter", "add", "dev", "eth0", "egress", "pref", strconv.Itoa(pref), "protocol", "ip", "u32",
			"match", "ip", "tos", fmt.Sprintf("0x%02x", tos), "0xff",
			"match", "ip", "protocol", "17", "0xff",
			"match", "ip", "dport", "4791", "0xffff",
			"action", "pass")
	}
}

var tclassSent = regexp.MustCompile(`Sent \d+ bytes (\d+) pkt`)

// tclassCount reads the packets the filter of pref has matched.
func tclassCount(t *testing.T, pref int) uint64 {
	t.Helper()
	out := mustRun(t, "tc", "-s", "filter", "show", "dev", "eth0", "egress", "pref", strconv.Itoa(pref))
	m := tclassSent.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no packet counter in the filter of pref %d:\n%s", pref, out)
	}
	n, _ := strconv.ParseUint(m[1], 10, 64)
	return n
}

// tclassCounts reads every filter's counter.
func tclassCounts(t *testing.T) map[int]uint64 {
	t.Helper()
	c := map[int]uint64{}
	for pref := range tclassFilters {
		c[pref] = tclassCount(t, pref)
	}
	return c
}

// tclassWait waits until the status reports class for rxe0/1 on both
// probes, with the loopback probe ok.
func tclassWait(t *testing.T, class int) {
	t.Helper()
	waitFor(t, 30*time.Second, fmt.Sprintf("traffic class %d on the loopback and peer probes of rxe0/1", class), func() (bool, string) {
		out, _ := run("rdmactl", "status", "--json")
		var s tclassStatus
		if err := json.Unmarshal([]byte(out), &s); err != nil {
			return false, err.Error()
		}
		lo, peer := false, false
		for _, p := range s.Loopback {
			lo = lo || (p.Device == roceDev && p.Port == 1 && p.State == "ok" && p.TrafficClass != nil && *p.TrafficClass == class)
		}
		for _, p := range s.Peers.Ports {
			peer = peer || (p.Key == roceDev+"/1" && p.TrafficClass != nil && *p.TrafficClass == class)
		}
		return lo && peer, fmt.Sprintf("loopback %s peers.ports %s", mustJSON(s.Loopback), mustJSON(s.Peers.Ports))
	})
}

// tclassReload writes the drop-in (or removes it when body is empty) and
// reloads rdmad the way an admin does.
func tclassReload(t *testing.T, body string) {
	t.Helper()
	if body == "" {
		os.Remove(tclassDropin)
	} else if err := os.WriteFile(tclassDropin, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	mustRun(t, "systemctl", "reload", "rdmad")
}

// tclassObserve counts for window and checks that the filter of want rose
// by at least min packets while the others stayed.
func tclassObserve(t *testing.T, want int, window time.Duration, min uint64) {
	t.Helper()
	before := tclassCounts(t)
	time.Sleep(window)
	after := tclassCounts(t)
	for pref, tos := range tclassFilters {
		d := after[pref] - before[pref]
		switch {
		case pref == want && d < min:
			t.Errorf("%d RoCE v2 packets with ToS %#02x left eth0 in %v, want at least %d (counters before %v, after %v)", d, tos, window, min, before, after)
		case pref != want && d != 0:
			t.Errorf("%d RoCE v2 packets with ToS %#02x left eth0 in %v, want none: every probe and answer should carry ToS %#02x (counters before %v, after %v)",
				d, tos, window, tclassFilters[want], before, after)
		}
	}
}

// TestTrafficClassOnTheWire: with [probe] traffic_class = 104 the peer
// probes and answers leave node 1 with ToS 104 and nothing with 0; without
// the key, a [[policy]] whose [policy.roce] tos = 106 selects rxe0 and the
// probes follow it; both changes take effect on `systemctl reload rdmad`,
// and the loopback probe reports the same class with its rounds ok.
func TestTrafficClassOnTheWire(t *testing.T) {
	other := peersOther(t)
	waitActive(t)
	peersWait(t, 1, other, "up", 90*time.Second)
	origTos, _ := roceReadRaw(t, roceDev, 1)
	t.Cleanup(func() {
		os.Remove(tclassDropin)
		run("systemctl", "reload", "rdmad")
		// The policy wrote rdma_cm's default ToS: put back what the VM had.
		run("sh", "-c", "mkdir -p /sys/kernel/config/rdma_cm/rxe0 && echo "+origTos+" > /sys/kernel/config/rdma_cm/rxe0/ports/1/default_roce_tos; rmdir /sys/kernel/config/rdma_cm/rxe0")
		// Leave the bed as it was found: class 0 everywhere.
		tclassWait(t, 0)
	})
	tclassSetup(t)

	// Before: probes go in class 0 (the bed has no policy with a tos).
	tclassWait(t, 0)
	tclassObserve(t, 30, 4*time.Second, 3)

	// (a) [probe] traffic_class.
	tclassReload(t, "[probe]\ntraffic_class = 104\n")
	tclassWait(t, 104)
	peersWait(t, 1, other, "up", 30*time.Second)
	tclassObserve(t, 10, 5*time.Second, 4)

	// (b) no traffic_class: the RoCE ToS of the policy that selects rxe0.
	tclassReload(t, "[[policy]]\nname = \"e2e-tclass\"\ndevices = [\"rxe0\"]\n[policy.roce]\ntos = 106\n")
	tclassWait(t, 106)
	peersWait(t, 1, other, "up", 30*time.Second)
	tclassObserve(t, 20, 5*time.Second, 4)

	// The class is in the metrics too.
	out := tclassMetrics(t)
	for _, want := range []string{`rdmad_probe_traffic_class{port="rxe0/1",probe="loopback"} 106`, `rdmad_probe_traffic_class{port="rxe0/1",probe="peer"} 106`} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics lack %s; rdmad_probe_traffic_class lines:\n%s", want, tclassLines(out))
		}
	}
}

// tclassMetrics reads GET /metrics over rdmad's socket.
func tclassMetrics(t *testing.T) string {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", "/run/rdmad/rdmad.sock")
		}}}
	resp, err := c.Get("http://rdmad/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %v %s", err, resp.Status)
	}
	return string(b)
}

func tclassLines(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, "rdmad_probe_traffic_class") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
