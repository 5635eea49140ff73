package rdmares

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/client/apitype"
)

// fixtureObjects decodes every fixture: the devices of res-get.hex and the
// objects of the per-kind dumps.
func fixtureObjects(t *testing.T) ([]Device, []Object) {
	t.Helper()
	dd := &dump{summary: true}
	feedAll(t, dd, readHex(t, "res-get.hex"))
	var objs []Object
	for file, kind := range map[string]Kind{"res-qp.hex": QP, "res-cq.hex": CQ, "res-mr.hex": MR, "res-mr-pad.hex": MR, "res-pd.hex": PD} {
		d := &dump{kind: kind}
		feedAll(t, d, readHex(t, file))
		objs = append(objs, d.objects...)
	}
	return dd.devices, objs
}

// fakeProc makes a procfs with the comm of each pid.
func fakeProc(t *testing.T, comms map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for pid, comm := range comms {
		if err := os.MkdirAll(filepath.Join(root, pid), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, pid, "comm"), []byte(comm+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		status := "Name:\t" + comm + "\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t" + pid + "\nNgid:\t0\nPid:\t" + pid + "\n"
		if err := os.WriteFile(filepath.Join(root, pid, "status"), []byte(status), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestAggregate(t *testing.T) {
	devs, objs := fixtureObjects(t)
	proc := fakeProc(t, map[string]string{"4242": "ibv_rc_pingpong"})
	got := Aggregate(devs, objs, procReader(proc))
	want := apitype.Resources{
		Processes: []apitype.ProcessResources{
			// nvme_rdma's kernel MR on mlx5_0 pins the most.
			{PID: 0, Comm: "nvme_rdma", Kernel: true, Devices: []string{"mlx5_0"},
				ResourceCounts: apitype.ResourceCounts{MRs: 1, PinnedBytes: 1<<32 + 4096}},
			{PID: 4242, Comm: "ibv_rc_pingpong", Devices: []string{"rxe0"},
				ResourceCounts: apitype.ResourceCounts{QPs: 1, CQs: 1, MRs: 2, PDs: 1, PinnedBytes: 4096 + 1<<20}},
			// The exiting process: no pid, no name.
			{PID: 0, Devices: []string{"rxe0"}, ResourceCounts: apitype.ResourceCounts{MRs: 1, PinnedBytes: 8192}},
			{PID: 0, Comm: "ib_core", Kernel: true, Devices: []string{"rxe0"},
				ResourceCounts: apitype.ResourceCounts{QPs: 1, CQs: 1, PDs: 1}},
		},
		Devices: []apitype.DeviceResources{
			{Device: "mlx5_0", ResourceCounts: apitype.ResourceCounts{MRs: 1, PinnedBytes: 1<<32 + 4096}, Tracked: devs[1].Tracked},
			{Device: "rxe0", ResourceCounts: apitype.ResourceCounts{QPs: 2, CQs: 2, MRs: 3, PDs: 2, PinnedBytes: 4096 + 1<<20 + 8192}, Tracked: devs[0].Tracked},
		},
	}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(apitype.Resources{}, "ReadAt")); diff != "" {
		t.Errorf("Aggregate (-want +got):\n%s", diff)
	}
}

// TestAggregateHiddenComm: a process whose /proc entry the reader cannot
// see keeps its pid and an empty name; a name with escapes is made
// printable.
func TestAggregateHiddenComm(t *testing.T) {
	proc := fakeProc(t, map[string]string{"7": "evil\x1b[2J"})
	objs := []Object{{Kind: QP, Device: "rxe0", PID: 7}, {Kind: PD, Device: "rxe0", PID: 8}}
	got := Aggregate(nil, objs, procReader(proc))
	if len(got.Processes) != 2 || got.Processes[0].Comm != "evil?[2J" || got.Processes[1].PID != 8 || got.Processes[1].Comm != "" {
		t.Errorf("processes: %+v; want pid 7 named evil?[2J, then pid 8 without a name", got.Processes)
	}
}

// TestAggregateThreads: the kernel names the thread that created an
// object (a Go program's verbs calls run on any of its threads); objects
// of one process's threads count under the process.
func TestAggregateThreads(t *testing.T) {
	proc := fakeProc(t, map[string]string{"402": "rdmad"})
	// Thread 405 of rdmad: /proc/405/status says Tgid 402.
	write := func(name, body string) {
		if err := os.MkdirAll(filepath.Join(proc, "405"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(proc, "405", name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("status", "Name:\trdmad\nTgid:\t402\nPid:\t405\n")
	write("comm", "rdmad\n")
	objs := []Object{
		{Kind: MR, Device: "rxe0", PID: 402, Length: 4096},
		{Kind: MR, Device: "rxe0", PID: 405, Length: 1 << 20},
		{Kind: QP, Device: "rxe0", PID: 405},
	}
	got := Aggregate(nil, objs, procReader(proc))
	want := []apitype.ProcessResources{{PID: 402, Comm: "rdmad", Devices: []string{"rxe0"},
		ResourceCounts: apitype.ResourceCounts{QPs: 1, MRs: 2, PinnedBytes: 4096 + 1<<20}}}
	if diff := cmp.Diff(want, got.Processes); diff != "" {
		t.Errorf("processes (-want +got):\n%s", diff)
	}

	// rdmad's sandbox saw neither (hidepid): FillComms, from the
	// caller's view, names and merges them.
	hidden := Aggregate(nil, objs, procReader(t.TempDir()))
	if len(hidden.Processes) != 2 || hidden.Processes[0].Comm != "" {
		t.Fatalf("hidden: %+v, want two unnamed pids", hidden.Processes)
	}
	FillComms(&hidden, proc)
	if diff := cmp.Diff(want, hidden.Processes); diff != "" {
		t.Errorf("FillComms (-want +got):\n%s", diff)
	}
}

// TestResourcesJSON: the wire form, with [] for empty lists.
func TestResourcesJSON(t *testing.T) {
	b, err := json.Marshal(Aggregate(nil, nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"processes":[]`) || !strings.Contains(string(b), `"devices":[]`) {
		t.Errorf("empty resources: %s; want [] lists", b)
	}
	b, err = json.Marshal(apitype.ProcessResources{PID: 4242, Comm: "ibv_rc_pingpong", ResourceCounts: apitype.ResourceCounts{QPs: 1, MRs: 1, PinnedBytes: 4096}})
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"pid":4242,"comm":"ibv_rc_pingpong","kernel":false,"devices":[],"qps":1,"cqs":0,"mrs":1,"pds":0,"pinned_bytes":4096}`
	if string(b) != want {
		t.Errorf("process JSON:\n got %s\nwant %s", b, want)
	}
}

// TestRequest: the dump request is what rdma(8) sends: NLM_F_REQUEST|
// NLM_F_DUMP, the operation's type, and the device index the per-device
// dumps need (nldev.c answers EINVAL without it).
func TestRequest(t *testing.T) {
	idx := uint32(3)
	m := request(cmdResMRGet, &idx)
	m.Header.Sequence = 9 // as netlink.Conn.Send numbers and sizes it
	m.Header.Length = uint32(unix.SizeofNlMsghdr + len(m.Data))
	got, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{
		24, 0, 0, 0, 0x0d, 0x14, 0x01, 0x03, 9, 0, 0, 0, 0, 0, 0, 0, // len 24, type 0x140d, flags REQUEST|DUMP (0x301), seq 9
		8, 0, 1, 0, 3, 0, 0, 0, // RDMA_NLDEV_ATTR_DEV_INDEX u32 3
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("request (-want +got):\n%s", diff)
	}
	if got := request(cmdResGet, nil); len(got.Data) != 0 {
		t.Errorf("the device dump request has %d bytes of payload, want the bare header", len(got.Data))
	}
}

// TestIntegrationRead reads the real kernel. On a host without RDMA (no
// ib_core, as on CI's host) the socket cannot be opened: the error must
// say so, with EPROTONOSUPPORT. The VM suite (e2e/resources_test.go) reads
// a real rxe0.
func TestIntegrationRead(t *testing.T) {
	res, err := Read(context.Background(), Options{})
	if errors.Is(err, unix.EPROTONOSUPPORT) {
		if !errors.Is(err, ErrNoRDMA) || !strings.Contains(err.Error(), "ib_core is not loaded") {
			t.Errorf("err = %v; want ErrNoRDMA, naming ib_core", err)
		}
		t.Logf("no RDMA here, as expected on this host: %v", err)
		return
	}
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	t.Logf("%d devices, %d processes", len(res.Devices), len(res.Processes))
	if _, statErr := os.Stat("/sys/class/infiniband"); statErr == nil && len(res.Devices) == 0 {
		entries, _ := os.ReadDir("/sys/class/infiniband")
		if len(entries) > 0 {
			t.Errorf("sysfs has %d RDMA devices, RDMA netlink none", len(entries))
		}
	}
}

// TestSourceOneAtATime: concurrent readers share one read; a read in
// progress longer than MaxWait makes the others give up with ErrBusy.
func TestSourceOneAtATime(t *testing.T) {
	var calls atomic.Int32
	release := make(chan struct{})
	s := NewSource(Options{})
	s.MaxAge = time.Minute
	s.read = func(ctx context.Context, _ Options) (apitype.Resources, error) {
		calls.Add(1)
		<-release
		return apitype.Resources{Processes: []apitype.ProcessResources{{PID: 1}}}, nil
	}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = s.Read(context.Background())
		}()
	}
	time.Sleep(50 * time.Millisecond)
	close(release)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("reader %d: %v", i, err)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("%d reads of the kernel for 4 concurrent readers within MaxAge, want 1", n)
	}

	// A stuck read: the next caller waits MaxWait, then is told why.
	stuck := NewSource(Options{})
	stuck.MaxWait = 50 * time.Millisecond
	block := make(chan struct{})
	defer close(block)
	stuck.read = func(ctx context.Context, _ Options) (apitype.Resources, error) {
		<-block
		return apitype.Resources{}, nil
	}
	go stuck.Read(context.Background())
	time.Sleep(20 * time.Millisecond)
	_, err := stuck.Read(context.Background())
	if !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), "try again") {
		t.Errorf("err = %v, want ErrBusy saying to try again", err)
	}
}

// TestSourceMaxAge: a result older than MaxAge is read again.
func TestSourceMaxAge(t *testing.T) {
	var calls atomic.Int32
	s := NewSource(Options{})
	s.MaxAge = time.Millisecond
	s.read = func(context.Context, Options) (apitype.Resources, error) {
		calls.Add(1)
		return apitype.Resources{}, ErrNoRDMA
	}
	for range 3 {
		if _, err := s.Read(context.Background()); !errors.Is(err, ErrNoRDMA) {
			t.Fatalf("err = %v, want the read's", err)
		}
		time.Sleep(3 * time.Millisecond)
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("%d reads, want 3 (each older than MaxAge)", n)
	}
}
