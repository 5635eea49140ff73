package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/client/apitype"
)

// filterSnapshot is a node probing 40 peers in two groups and four
// without a group: peer 7 is down, 8 and 9 degraded, 10 not probed yet,
// the rest up; tor-b is a suspect group.
func filterSnapshot() apitype.Snapshot {
	s := apitype.Snapshot{Version: "9.9", State: apitype.Running, Components: map[string]apitype.Component{apitype.ComponentPeers: {State: apitype.OK}}}
	s.Peers = apitype.Peers{Configured: 50, Ports: []apitype.PeerPort{{Key: "rxe0/1", GID: "192.0.2.1", QPN: 0x11}},
		GroupFaults: []apitype.GroupFault{{Group: "tor-b", Reason: "all 2 probed peers of group tor-b are down from every local port"}}}
	for i := range 40 {
		p := apitype.Peer{Name: fmt.Sprintf("192.0.2.%d", 100+i), Group: "tor-a", State: apitype.PeerUp,
			Paths: []apitype.PeerPath{{Local: "rxe0/1", State: apitype.PeerUp, Samples: 100}}}
		switch {
		case i >= 36:
			p.Group = ""
		case i >= 20:
			p.Group = "tor-b"
		}
		switch i {
		case 7:
			p.State, p.Reason = apitype.PeerDown, "rxe0/1: 3 probes in a row unanswered"
		case 8, 9:
			p.State, p.Reason = apitype.PeerDegraded, "rxe0/1: loss 2.0% over the last 100 probes (threshold 1.0%)"
		case 10:
			p.State = apitype.PeerUnknown
		}
		p.Paths[0].State = p.State
		s.Peers.Peers = append(s.Peers.Peers, p)
	}
	return s
}

// peerRows returns the peers of the table rows in out.
func peerRows(out string) []string {
	var rows []string
	inTable := false
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) > 0 && f[0] == "PEER":
			inTable = true
		case inTable && len(f) >= 3 && strings.HasPrefix(f[0], "192.0.2.") && !strings.HasSuffix(f[0], ":"):
			rows = append(rows, f[0])
		default:
			inTable = false
		}
	}
	return rows
}

// TestPeersFilters: --state (repeated or a comma list) and --group select
// the rows, the reasons under the table and the exit code, and say how
// many of the probed peers they show.
func TestPeersFilters(t *testing.T) {
	sock := fakeRdmad(t, map[string]http.HandlerFunc{"GET /v1/status": answer(t, filterSnapshot())})
	tests := []struct {
		args  []string
		rows  []string
		code  int
		lines []string // in the output
		not   []string // not in the output
	}{
		{[]string{"--state", "down"}, []string{"192.0.2.107"}, exitDegraded,
			[]string{"Showing 1 of 40 probed peers (--state down).", "192.0.2.107: rxe0/1: 3 probes in a row unanswered", "Probing 40 of 50 configured peers"},
			[]string{"192.0.2.108:"}},
		{[]string{"--state", "down,degraded"}, []string{"192.0.2.107", "192.0.2.108", "192.0.2.109"}, exitDegraded,
			[]string{"Showing 3 of 40 probed peers (--state down,degraded)."}, nil},
		{[]string{"--state", "down", "--state=DEGRADED"}, []string{"192.0.2.107", "192.0.2.108", "192.0.2.109"}, exitDegraded,
			[]string{"(--state down,degraded)"}, nil},
		{[]string{"--state", "unknown"}, []string{"192.0.2.110"}, exitDegraded, nil, nil},
		{[]string{"--group", "tor-b", "--state", "up"}, rowRange(120, 136), exitOK,
			[]string{"Showing 16 of 40 probed peers (--state up --group tor-b).", "GROUP FAULT? all 2 probed peers of group tor-b"}, nil},
		{[]string{"--group", "tor-a", "--state", "up"}, rowRange(100, 120), exitOK,
			[]string{"Showing 16 of 40 probed peers"}, []string{"GROUP FAULT?"}},
		{[]string{"--group", "-"}, rowRange(136, 140), exitOK, []string{"Showing 4 of 40 probed peers (--group -)."}, nil},
		{[]string{"--state", "down", "--group", "tor-b"}, nil, exitOK,
			[]string{"No peer matches --state down --group tor-b (of 40 probed).", "Probe ports: rxe0/1"}, []string{"PEER"}},
		{nil, allRows(100, 140), exitDegraded, []string{"Probing 40 of 50 configured peers"}, []string{"Showing"}},
	}
	for _, tt := range tests {
		name := strings.Join(tt.args, " ")
		t.Run(name, func(t *testing.T) {
			args := append([]string{"--socket", sock, "peers"}, tt.args...)
			code, out, errs := rdmactl(t, args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d; stderr %q", code, tt.code, errs)
			}
			if got := peerRows(out); strings.Join(got, " ") != strings.Join(tt.rows, " ") {
				t.Errorf("rows %v, want %v:\n%s", got, tt.rows, out)
			}
			for _, l := range tt.lines {
				if !strings.Contains(out, l) {
					t.Errorf("output lacks %q:\n%s", l, out)
				}
			}
			for _, l := range tt.not {
				if strings.Contains(out, l) {
					t.Errorf("output has %q:\n%s", l, out)
				}
			}
		})
	}
}

// allRows names peers from to to-1.
func allRows(from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("192.0.2.%d", i))
	}
	return out
}

// rowRange names the peers from to to-1 that are up.
func rowRange(from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		if i == 107 || i == 108 || i == 109 || i == 110 {
			continue // not up
		}
		out = append(out, fmt.Sprintf("192.0.2.%d", i))
	}
	return out
}

// TestPeersFiltersJSON: with --json the filters select the peers of the
// JSON as well; the rest of the peers' object is whole.
func TestPeersFiltersJSON(t *testing.T) {
	sock := fakeRdmad(t, map[string]http.HandlerFunc{"GET /v1/status": answer(t, filterSnapshot())})
	code, out, errs := rdmactl(t, "--socket", sock, "--json", "peers", "--state", "degraded", "--group", "tor-a")
	var ps apitype.Peers
	if err := json.Unmarshal([]byte(out), &ps); err != nil {
		t.Fatalf("%v: %s %s", err, out, errs)
	}
	if code != exitDegraded || len(ps.Peers) != 2 || ps.Peers[0].Name != "192.0.2.108" || ps.Configured != 50 || len(ps.Ports) != 1 {
		t.Errorf("exit %d, %+v; want 3 and the two degraded peers of tor-a, with 50 configured and the port", code, ps)
	}
	code, out, _ = rdmactl(t, "--socket", sock, "--json", "peers", "--state", "down", "--group", "nowhere")
	if code != exitOK || !strings.Contains(out, `"peers": []`) {
		t.Errorf("no match: exit %d, %s; want 0 and \"peers\": []", code, out)
	}
}

// TestPeersFilterUsage: a state that is none is a usage error (exit 2)
// naming the states, before rdmad is asked.
func TestPeersFilterUsage(t *testing.T) {
	for _, args := range [][]string{{"peers", "--state", "sideways"}, {"peers", "--state", "up,,down"}, {"peers", "--state", "up", "--state", "gone"}} {
		code, out, errs := rdmactl(t, append([]string{"--socket", "/nonexistent/rdmad.sock"}, args...)...)
		if code != exitUsage || !strings.Contains(errs, "is not a peer state; give unknown, up, degraded, down") || !strings.Contains(errs, "Usage: rdmactl [FLAGS] peers [--state STATE] [--group GROUP]") || out != "" {
			t.Errorf("rdmactl %s: exit %d, stdout %q, stderr %q; want 2 and the states", strings.Join(args, " "), code, out, errs)
		}
	}
	if code, _, errs := rdmactl(t, "peers", "--group"); code != exitUsage || !strings.Contains(errs, "--group needs a GROUP, e.g. --group tor-a") {
		t.Errorf("--group without a value: exit %d, %q", code, errs)
	}
}
