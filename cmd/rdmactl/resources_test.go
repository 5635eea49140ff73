package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/client/apitype"
)

var fixtureResources = apitype.Resources{
	Processes: []apitype.ProcessResources{
		{PID: 4242, Comm: "ibv_rc_pingpong", Devices: []string{"rxe0"}, ResourceCounts: apitype.ResourceCounts{QPs: 1, CQs: 1, MRs: 1, PDs: 1, PinnedBytes: 4096}},
		{Comm: "ib_core", Kernel: true, Devices: []string{"rxe0"}, ResourceCounts: apitype.ResourceCounts{QPs: 1, CQs: 1, PDs: 1}},
	},
	Devices: []apitype.DeviceResources{{Device: "rxe0", ResourceCounts: apitype.ResourceCounts{QPs: 2, CQs: 2, MRs: 1, PDs: 2, PinnedBytes: 4096}}},
}

func TestResourcesTable(t *testing.T) {
	sock := fakeRdmad(t, map[string]http.HandlerFunc{"GET /v1/resources": answer(t, fixtureResources)})
	code, out, errs := rdmactl(t, "--socket", sock, "resources")
	if code != exitOK {
		t.Fatalf("exit %d, stderr %s", code, errs)
	}
	const want = `PID   COMM             DEVICES  QPS  CQS  MRS  PDS  PINNED
4242  ibv_rc_pingpong  rxe0     1    1    1    1    4.0 KiB
-     [ib_core]        rxe0     1    1    0    1    0 B

DEVICE  QPS  CQS  MRS  PDS  PINNED
rxe0    2    2    1    2    4.0 KiB
`
	if out != want {
		t.Errorf("table:\n%s\nwant:\n%s", out, want)
	}

	code, out, _ = rdmactl(t, "--socket", sock, "resources", "--json")
	var got apitype.Resources
	if err := json.Unmarshal([]byte(out), &got); code != exitOK || err != nil || len(got.Processes) != 2 || got.Processes[0].PinnedBytes != 4096 {
		t.Errorf("--json: exit %d, %v: %s", code, err, out)
	}
	for _, key := range []string{`"pid": 4242`, `"comm": "ibv_rc_pingpong"`, `"qps": 1`, `"mrs": 1`, `"pinned_bytes": 4096`} {
		if !strings.Contains(out, key) {
			t.Errorf("--json lacks %s", key)
		}
	}
}

// TestResourcesRefused: rdmad's refusal is the answer; rdmactl does not
// go around it.
func TestResourcesRefused(t *testing.T) {
	sock := fakeRdmad(t, map[string]http.HandlerFunc{"GET /v1/resources": func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusForbidden)
		json.NewEncoder(w).Encode(apitype.ErrorBody{Error: "uid 1003 may not read rdmad's state (/v1/resources)"})
	}})
	code, _, errs := rdmactl(t, "--socket", sock, "resources")
	if code != exitError || !strings.Contains(errs, "access denied") || strings.Contains(errs, "directly") {
		t.Errorf("exit %d, stderr %q; want 1 and access denied, without reading the kernel", code, errs)
	}
}

// TestResourcesWithoutDaemon: with rdmad down, rdmactl reads RDMA netlink
// itself. On a host without RDMA (no ib_core: EPROTONOSUPPORT) it says so.
func TestResourcesWithoutDaemon(t *testing.T) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_RDMA)
	if err == nil {
		unix.Close(fd)
		t.Skip("this host has RDMA netlink; the e2e suite covers reading it (e2e/resources_test.go)")
	}
	code, _, errs := rdmactl(t, "--socket", t.TempDir()+"/none.sock", "resources")
	if code != exitError {
		t.Errorf("exit %d, want 1", code)
	}
	for _, s := range []string{"rdmad did not answer", "reading the kernel's RDMA resources directly",
		"cannot read the RDMA resources", "ib_core is not loaded", "protocol not supported"} {
		if !strings.Contains(errs, s) {
			t.Errorf("stderr lacks %q:\n%s", s, errs)
		}
	}
}

// TestResourcesNotRead: an rdmad on a fixture tree answers 501 (it does not
// read this host's kernel). rdmactl says what rdmad said, not that rdmad
// did not answer, and never tells a caller to run it as root: it reads the
// kernel itself whoever runs it.
func TestResourcesNotRead(t *testing.T) {
	sock := fakeRdmad(t, map[string]http.HandlerFunc{"GET /v1/resources": func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotImplemented)
		json.NewEncoder(w).Encode(apitype.ErrorBody{Error: "this rdmad does not read the kernel's RDMA resources (it runs on a fixture sysfs tree, not this host's); rdmactl resources reads them from the kernel itself"})
	}})
	_, _, errs := rdmactl(t, "--socket", sock, "resources")
	if !strings.Contains(errs, "rdmactl: this rdmad does not read the kernel's RDMA resources") || !strings.Contains(errs, "reading the kernel's RDMA resources directly") {
		t.Errorf("stderr %q; want rdmad's reason, then the direct read", errs)
	}
	for _, bad := range []string{"did not answer", "as root", "501"} {
		if strings.Contains(errs, bad) {
			t.Errorf("stderr says %q:\n%s", bad, errs)
		}
	}
}
