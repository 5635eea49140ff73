package doctor

import (
	"errors"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/client/apitype"
)

// pinning is a node where a job pins most of the memory.
func pinning() (apitype.Resources, error) {
	return apitype.Resources{Processes: []apitype.ProcessResources{
		{PID: 900, Comm: "trainer", ResourceCounts: apitype.ResourceCounts{QPs: 8, MRs: 3, PinnedBytes: 3 << 30}},
		{PID: 4242, Comm: "rdmad", ResourceCounts: apitype.ResourceCounts{MRs: 264, PinnedBytes: 9 << 20}},
		{PID: 0, Comm: "ib_core", Kernel: true, ResourceCounts: apitype.ResourceCounts{QPs: 1, PDs: 1}},
		{PID: 77, Comm: "ibv_rc_pingpong", ResourceCounts: apitype.ResourceCounts{MRs: 1, PinnedBytes: 4096}},
		{PID: 78, Comm: "small", ResourceCounts: apitype.ResourceCounts{MRs: 1, PinnedBytes: 1024}},
	}}, nil
}

func TestMemlockNamesHolders(t *testing.T) {
	proc := t.TempDir()
	write(t, proc, map[string]string{"4242/limits": limits("65536                65536"), "self/limits": limits("65536                65536")})
	e := &Env{ProcRoot: proc, Resources: pinning,
		Snapshot: snapWith(apitype.Target{Kind: "memlock", Object: "rdmad", Desired: "64MiB", Actual: "64KiB", State: apitype.TargetError})}
	r := checkMemlock(e)
	const want = "; 3.0 GiB pinned in all, the most by trainer (pid 900) 3.0 GiB in 3 MRs, rdmad (pid 4242) 9.0 MiB in 264 MRs, ibv_rc_pingpong (pid 77) 4.0 KiB in 1 MR"
	if r.Verdict != Fail || !strings.HasSuffix(r.Message, want) {
		t.Errorf("memlock: %s %q; want fail ending %q", r.Verdict, r.Message, want)
	}
	if u := checkMemlockUser(e); u.Verdict != Warn || !strings.Contains(u.Message, "the most by trainer (pid 900)") {
		t.Errorf("memlock-user: %s %q; want warn naming trainer", u.Verdict, u.Message)
	}
}

// TestMemlockRegistrationFailing: rdmad's limit is fine but its canary's
// registrations fail now: a warning that names who pins the most.
func TestMemlockRegistrationFailing(t *testing.T) {
	proc := t.TempDir()
	write(t, proc, map[string]string{"4242/limits": limits("unlimited            unlimited")})
	s := snapWith()
	s.MRPool = []apitype.PoolDevice{{Device: "rxe0", Registered: true, Canary: apitype.Canary{Failures: 2, LastError: "ibv_reg_mr: Cannot allocate memory"}}}
	calls := 0
	e := &Env{ProcRoot: proc, Snapshot: s, Resources: func() (apitype.Resources, error) { calls++; return pinning() }}
	r := checkMemlock(e)
	if r.Verdict != Warn || !strings.Contains(r.Message, "memory registration fails on rxe0: ibv_reg_mr: Cannot allocate memory; 3.0 GiB pinned") ||
		!strings.Contains(r.Fix, "rdmactl resources") {
		t.Errorf("memlock: %s %q fix %q; want a warning naming the failure, the holders and rdmactl resources", r.Verdict, r.Message, r.Fix)
	}
	checkMemlock(e)
	if calls != 1 {
		t.Errorf("Resources read %d times in one Env, want once", calls)
	}

	// Once the canary registers again, all is well: no read at all.
	s.MRPool[0].Canary.LastError = ""
	e = &Env{ProcRoot: proc, Snapshot: s, Resources: func() (apitype.Resources, error) { t.Error("Resources read for a healthy node"); return pinning() }}
	if r := checkMemlock(e); r.Verdict != OK {
		t.Errorf("memlock with a healthy canary: %s %q", r.Verdict, r.Message)
	}
}

func TestPinHoldersUnknown(t *testing.T) {
	for _, tt := range []struct {
		name string
		read func() (apitype.Resources, error)
		want string
	}{
		{"read failed", func() (apitype.Resources, error) { return apitype.Resources{}, errors.New("rdmad answered 503: busy") },
			" (who pins memory is unknown: rdmad answered 503: busy)"},
		{"kernel unreadable", func() (apitype.Resources, error) { return apitype.Resources{Error: "no RDMA netlink"}, nil },
			" (who pins memory is unknown: no RDMA netlink)"},
		{"nothing pinned", func() (apitype.Resources, error) { return apitype.Resources{}, nil }, "; no process has memory registered"},
	} {
		e := &Env{Resources: tt.read}
		if got := e.pinHolders(); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
	if got := (&Env{}).pinHolders(); got != "" {
		t.Errorf("without the hook: %q, want nothing", got)
	}
}

func TestHumanBytes(t *testing.T) {
	for n, want := range map[uint64]string{0: "0 B", 1023: "1023 B", 4096: "4.0 KiB", 1536 << 20: "1.5 GiB", 1 << 62: "4.0 EiB"} {
		if got := HumanBytes(n); got != want {
			t.Errorf("HumanBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestMemlockKeepsWholeErrors: an MR pool error of several lines, and a
// resources error of several, reach the message whole (#16 item 11: rdmactl
// doctor | cat once read "... (and more)" and lost what to do).
func TestMemlockKeepsWholeErrors(t *testing.T) {
	proc := t.TempDir()
	write(t, proc, map[string]string{"4242/limits": limits("unlimited            unlimited")})
	const canary = "register 1 MiB region on rxe0: cannot allocate memory\nraise [memlock] daemon or LimitMEMLOCK= in rdmad.service"
	const pool = "register the pool on mlx5_0: cannot allocate memory\nthe pool needs 64 MiB"
	const res = "read RDMA resources: operation not permitted\nrun rdmactl doctor as root"
	s := snapWith()
	s.MRPool = []apitype.PoolDevice{
		{Device: "rxe0", Registered: true, Canary: apitype.Canary{Failures: 1, LastError: canary + "\n"}},
		{Device: "mlx5_0", LastError: pool},
	}
	e := &Env{ProcRoot: proc, Snapshot: s, Resources: func() (apitype.Resources, error) { return apitype.Resources{}, errors.New(res) }}
	r := checkMemlock(e)
	for _, want := range []string{"rxe0: " + canary + "; mlx5_0: " + pool, "(who pins memory is unknown: " + res + ")"} {
		if !strings.Contains(r.Message, want) {
			t.Errorf("memlock message lacks %q:\n%s", want, r.Message)
		}
	}
	if strings.Contains(r.Message, "(and more)") {
		t.Errorf("memlock message is cut:\n%s", r.Message)
	}
}
