package kmsg

import (
	"fmt"
	"testing"
	"time"
)

// classCase is a record and what it must be: the device, pattern, class
// and netdev of its hit ("" device: no hit at all).
type classCase struct {
	name                        string
	in                          string
	device, patt, class, netdev string
}

// TestMatchClasses: each catalogue entry has its class, tried on the
// driver's own line, and a near miss of each (another status, another
// severity, a line without DEVICE) is not it. Removing the classes (or
// making link-down, the cable unplug or the temperature warning fatal, or
// ACCESS_REG's failure a fault) fails it.
func TestMatchClasses(t *testing.T) {
	const pci0 = "\n SUBSYSTEM=pci\n DEVICE=+pci:0000:03:00.0\n"
	const pci1 = "\n SUBSYSTEM=pci\n DEVICE=+pci:0000:03:00.1\n"
	for _, tt := range []classCase{
		// Noise: mlx5_cmd_out_err's ACCESS_REG failure, at err, is no
		// fault (not even "err"); another command's failure is, and an
		// ACCESS_REG that timed out is a command timeout.
		{"ACCESS_REG failed", "3,1,1,-;mlx5_core 0000:03:00.0: mlx5_cmd_out_err:838:(pid 1441871): ACCESS_REG(0x805) op_mod(0x1) failed, status bad resource(0x5), syndrome (0x305684), err(-22)" + pci0, "mlx5_0", "mlx5-access-reg", ClassNoise, ""},
		{"near miss: another command failed", "3,1,1,-;mlx5_core 0000:03:00.0: mlx5_cmd_out_err:838:(pid 5): QUERY_VPORT_COUNTER(0x770) op_mod(0x0) failed, status bad parameter(0x3), syndrome (0x1f3a2b), err(-22)" + pci0, "mlx5_0", "mlx5-cmd-failed", ClassFatal, ""},
		{"near miss: ACCESS_REG timed out", "4,1,1,-;mlx5_core 0000:03:00.0: wait_func_handle_exec_timeout:1159:(pid 72061): cmd[0]: ACCESS_REG(0x805) No done completion" + pci0, "mlx5_0", "mlx5-cmd-timeout", ClassFatal, ""},
		// mlx5e's queue timeouts (en_main.c, en/reporter_tx.c,
		// en/reporter_rx.c through mlx5e_health_report), err.
		{"TX timeout detected", "3,1,1,-;mlx5_core 0000:03:00.0 ens1f0np0: TX timeout detected" + pci0, "mlx5_0", "mlx5-queue-timeout", ClassFatal, ""},
		{"TX timeout on queue", "3,1,1,-;mlx5_core 0000:03:00.0 ens1f0np0: TX timeout on queue: 3, SQ: 0x1a2, CQ: 0x3f1, SQ Cons: 0x0 SQ Prod: 0x5, usecs since last trans: 16948000" + pci0, "mlx5_0", "mlx5-queue-timeout", ClassFatal, ""},
		{"RX timeout on channel", "3,1,1,-;mlx5_core 0000:03:00.1 ens1f1np1: RX timeout on channel: 2, ICOSQ: 0x10a, RQ: 0x10b, CQ: 0x40c" + pci1, "mlx5_1", "mlx5-queue-timeout", ClassFatal, ""},
		{"near miss: TX timeout at warning", "4,1,1,-;mlx5_core 0000:03:00.0 ens1f0np0: TX timeout on queue: 3, SQ: 0x1a2, CQ: 0x3f1" + pci0, "", "", "", ""},
		// The stack's watchdog, netdev_crit since 6.8.
		{"NETDEV WATCHDOG", "2,1,1,-;mlx5_core 0000:03:00.0 ens1f0np0: NETDEV WATCHDOG: CPU: 5: transmit queue 0 timed out 5032 ms" + pci0, "mlx5_0", "netdev-watchdog", ClassFatal, ""},
		{"NETDEV WATCHDOG of rxe's netdev", "2,1,1,-;e1000e 0000:00:19.0 eth1: NETDEV WATCHDOG: CPU: 1: transmit queue 0 timed out 5120 ms\n DEVICE=+pci:0000:00:19.0\n", "rxe0", "netdev-watchdog", ClassFatal, ""},
		{"near miss: the old WARN form, no DEVICE", "6,1,1,-;NETDEV WATCHDOG: ens1f0np0 (mlx5_core): transmit queue 0 timed out\n", "", "", "", ""},
		{"near miss: the old WARN form at warning", "4,1,1,-;NETDEV WATCHDOG: eth1 (e1000e): transmit queue 0 timed out 5120 ms\n", "", "", "", ""},
		// Slot power (events.c, mlx5_pcie_event), warning.
		{"insufficient slot power", "4,1,1,-;mlx5_core 0000:03:00.0: mlx5_pcie_event:299:(pid 268269): Detected insufficient power on the PCIe slot (27W)." + pci0, "mlx5_0", "mlx5-slot-power", ClassFatal, ""},
		{"near miss: sufficient slot power", "6,1,1,-;mlx5_core 0000:03:00.0: PCIe slot advertised sufficient power (75W)." + pci0, "", "", "", ""},
		// Module events (events.c, port_module): an error at err (6.x)
		// or info (older), an unplug at info.
		{"module high temperature", "3,1,1,-;mlx5_core 0000:03:00.0: port_module:1146:(pid 0): Port module event[error]: module 0, Cable error, High Temperature" + pci0, "mlx5_0", "mlx5-module-error", ClassFatal, ""},
		{"module error at info", "6,1,1,-;mlx5_core 0000:03:00.1: Port module event[error]: module 1, Cable error, Power budget exceeded" + pci1, "mlx5_1", "mlx5-module-error", ClassFatal, ""},
		{"cable unplugged", "6,1,1,-;mlx5_core 0000:03:00.0: Port module event: module 0, Cable unplugged" + pci0, "mlx5_0", "mlx5-module-unplugged", ClassNonFatal, ""},
		{"near miss: cable plugged", "6,1,1,-;mlx5_core 0000:03:00.0: Port module event: module 0, Cable plugged" + pci0, "", "", "", ""},
		{"near miss: unplugged without DEVICE at info", "6,1,1,-;mlx5_core 0000:03:00.0: Port module event: module 0, Cable unplugged\n", "", "", "", ""},
		// The ASIC's temperature warning (events.c, temp_warn).
		{"ASIC temperature warning", "4,1,1,-;mlx5_core 0000:03:00.0: temp_warn:165:(pid 0): High temperature on sensors with bit set 0x0 0x1." + pci0, "mlx5_0", "mlx5-temp-warn", ClassNonFatal, ""},
		{"near miss: a sensor's name", "4,1,1,-;mlx5_core 0000:03:00.0: print_sensor_names_in_bit_set:95:(pid 0): Sensor name[0]: asic" + pci0, "", "", "", ""},
		// Link down: non-fatal, per netdev.
		{"mlx5e link down", "6,1,1,-;mlx5_core 0000:03:00.0 ens1f0np0: Link down" + pci0, "mlx5_0", "link-down", ClassNonFatal, "ens1f0np0"},
		{"link down by ifindex", "6,1,1,-;mlx5_core 0000:03:00.1 ens1f1np1: Link down\n SUBSYSTEM=net\n DEVICE=n5\n", "mlx5_1", "link-down", ClassNonFatal, "ens1f1np1"},
		{"NIC Link is Down of rxe's netdev", "6,1,1,-;e1000e 0000:00:19.0 eth1: NIC Link is Down\n DEVICE=+pci:0000:00:19.0\n", "rxe0", "link-down", ClassNonFatal, "eth1"},
		{"near miss: link up", "6,1,1,-;mlx5_core 0000:03:00.0 ens1f0np0: Link up" + pci0, "", "", "", ""},
		// What was fatal stays fatal.
		{"err of no pattern", "3,1,1,-;mlx5_core 0000:03:00.0: mlx5_cmd_init: something failed" + pci0, "mlx5_0", PatternErr, ClassFatal, ""},
		{"health buffer", "3,1,1,-;mlx5_core 0000:03:00.0: poll_health:852:(pid 0): device's health compromised - reached miss count" + pci0, "mlx5_0", "mlx5-health", ClassFatal, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, err := ParseRecord([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			h, ok := newIndex(testDevices).match(&r, false)
			if !ok {
				h = hit{}
			}
			if h.device != tt.device || h.pattern != tt.patt || h.class != tt.class || h.netdev != tt.netdev {
				t.Errorf("%q: %+v, want device %q pattern %q class %q netdev %q", tt.in, h, tt.device, tt.patt, tt.class, tt.netdev)
			}
			if ok && ClassOf(h.pattern) != h.class {
				t.Errorf("ClassOf(%q) = %q, the hit's class %q", h.pattern, ClassOf(h.pattern), h.class)
			}
		})
	}
}

// newFollower is a Follower of testDevices whose kernel clock is an hour
// past boot, fed by handle (no Run).
func newFollower(opts Options) *Follower {
	f := New(opts)
	f.SetDevices(testDevices)
	f.mono = func() time.Duration { return time.Hour }
	return f
}

// lrec formats a record of priority pri logged age ago by the Follower's
// kernel clock (an hour past boot).
func lrec(pri int, age time.Duration, text string) []byte {
	return []byte(fmt.Sprintf("%d,1,%d,-;%s", pri, (time.Hour-age)/time.Microsecond, text))
}

// TestFollowerNoise: mlx5's failed ACCESS_REG is counted as noise and is
// no fault, while another command's failure is.
func TestFollowerNoise(t *testing.T) {
	f := newFollower(Options{})
	for range 3 {
		f.handle(lrec(3, time.Second, "mlx5_core 0000:03:00.0: mlx5_cmd_out_err:838:(pid 1441871): ACCESS_REG(0x805) op_mod(0x1) failed, status bad resource(0x5), syndrome (0x305684), err(-22)\n DEVICE=+pci:0000:03:00.0\n"))
	}
	if l := f.Faults(); len(l) != 0 {
		t.Errorf("ACCESS_REG noise became faults: %+v", l)
	}
	if s := f.Stats(); s.Noise != 3 || s.Matched != 0 {
		t.Errorf("stats %+v, want 3 noise, 0 matched", s)
	}
	f.handle(lrec(3, time.Second, "mlx5_core 0000:03:00.0: mlx5_cmd_out_err:838:(pid 5): CREATE_QP(0x500) op_mod(0x0) failed, status bad parameter(0x3), syndrome (0x5ab1c2), err(-22)\n DEVICE=+pci:0000:03:00.0\n"))
	if l := f.Faults(); len(l) != 1 || l[0].Pattern != "mlx5-cmd-failed" || l[0].Class != ClassFatal {
		t.Errorf("faults %+v, want the CREATE_QP failure, fatal", l)
	}
}

// TestFollowerLinkDownRecent: link-down records are one non-fatal fault
// per netdev that keeps their times, oldest first and at most MaxRecent.
func TestFollowerLinkDownRecent(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	f := newFollower(Options{Now: func() time.Time { return now }})
	for i := range MaxRecent + 4 {
		age := time.Duration(MaxRecent+4-i) * time.Second
		f.handle(lrec(6, age, "mlx5_core 0000:03:00.0 ens1f0np0: Link down\n SUBSYSTEM=net\n DEVICE=+pci:0000:03:00.0\n"))
	}
	f.handle(lrec(6, time.Second, "mlx5_core 0000:03:00.1 ens1f1np1: Link down\n DEVICE=+pci:0000:03:00.1\n"))
	l := f.Faults()
	if len(l) != 2 {
		t.Fatalf("faults %+v, want one per netdev", l)
	}
	a := l[0]
	if a.Device != "mlx5_0" || a.Netdev != "ens1f0np0" || a.Class != ClassNonFatal || a.Count != MaxRecent+4 || len(a.Recent) != MaxRecent {
		t.Fatalf("mlx5_0's fault %+v, want non-fatal on ens1f0np0, %d messages, the last %d times", a, MaxRecent+4, MaxRecent)
	}
	for i, at := range a.Recent {
		if want := now.Add(-time.Duration(MaxRecent-i) * time.Second); !at.Equal(want) {
			t.Errorf("Recent[%d] = %v, want %v (oldest first, the oldest four dropped)", i, at, want)
		}
	}
	if b := l[1]; b.Device != "mlx5_1" || b.Netdev != "ens1f1np1" || len(b.Recent) != 1 {
		t.Errorf("mlx5_1's fault %+v, want one link down on ens1f1np1", b)
	}
}

// A soft lockup report as x86 prints it, the stuck CPU in mlx5e's poll.
var lockupReport = []string{
	"watchdog: BUG: soft lockup - CPU#12 stuck for 22s! [ksoftirqd/12:88]",
	"Modules linked in: mlx5_ib ib_uverbs ib_core mlx5_core mlxfw psample tls pci_hyperv_intf",
	"CPU: 12 PID: 88 Comm: ksoftirqd/12 Tainted: G             L     6.8.0-45-generic #45-Ubuntu",
	"Hardware name: Supermicro SYS-421GE-TNRT/X13DEG-OAD, BIOS 2.1 03/05/2024",
	"RIP: 0010:mlx5e_poll_tx_cq+0x1a4/0x5b0 [mlx5_core]",
	"Call Trace:",
	" <IRQ>",
	" ? show_regs+0x6d/0x80",
	" mlx5e_napi_poll+0x5f/0x700 [mlx5_core]",
	" __napi_poll+0x33/0x200",
}

// TestFollowerSoftLockup: a soft lockup report whose stack is in mlx5e's
// NAPI poll is a fatal fault of every mlx5_core device (not of rxe0),
// with the header's line; one in another driver, a guessed frame ("? "),
// a frame too far after the header or without one, and a report written
// from userspace are not.
func TestFollowerSoftLockup(t *testing.T) {
	feed := func(f *Follower, pri int, lines []string) {
		for i, l := range lines {
			p := 4
			if i == 0 {
				p = pri
			}
			f.handle(lrec(p, time.Second, l+"\n"))
		}
	}
	f := newFollower(Options{})
	feed(f, 0, lockupReport)
	l := f.Faults()
	if len(l) != 2 {
		t.Fatalf("faults %+v, want mlx5_0's and mlx5_1's", l)
	}
	for i, dev := range []string{"mlx5_0", "mlx5_1"} {
		if e := l[i]; e.Device != dev || e.Pattern != PatternSoftLockup || e.Class != ClassFatal || e.Priority != 0 || e.Line != lockupReport[0] {
			t.Errorf("fault %d: %+v, want %s %s, fatal, at emerg, with the header's line", i, e, dev, PatternSoftLockup)
		}
	}

	noFault := func(name string, lines []string, opts Options) {
		t.Helper()
		f := newFollower(opts)
		feed(f, 0, lines)
		if l := f.Faults(); len(l) != 0 {
			t.Errorf("%s: faults %+v, want none", name, l)
		}
	}
	other := append([]string(nil), lockupReport...)
	other[4] = "RIP: 0010:ixgbe_poll+0x1a4/0x5b0 [ixgbe]"
	other[8] = " ixgbe_poll+0x5f/0x700 [ixgbe]"
	noFault("another driver's poll", other, Options{})
	guessed := append([]string(nil), other...)
	guessed[8] = " ? mlx5e_napi_poll+0x5f/0x700 [mlx5_core]"
	noFault("a guessed frame", guessed, Options{})
	noFault("frames without a header", lockupReport[1:], Options{})
	far := []string{lockupReport[0]}
	for i := range lockupLookahead {
		far = append(far, fmt.Sprintf(" some_function+0x%x/0x100", i))
	}
	noFault("a frame too far after the header", append(far, lockupReport[8]), Options{})
	forged := []string{lockupReport[0], "tmpfs: Unknown parameter ' mlx5e_napi_poll+0x5f/0x700 [mlx5_core]'"}
	noFault("the frame in a user's text", forged, Options{})

	// Written to /dev/kmsg (facility user): only with TrustUserspace.
	user := newFollower(Options{})
	for _, line := range lockupReport {
		user.handle([]byte(fmt.Sprintf("8,1,%d,-;%s\n", (time.Hour-time.Second)/time.Microsecond, line)))
	}
	if l := user.Faults(); len(l) != 0 {
		t.Errorf("a report from userspace became faults: %+v", l)
	}
	// And the records of the kernel's buffer read before the first
	// SetDevices count: the frames are kept for it.
	early := New(Options{})
	early.mono = func() time.Duration { return time.Hour }
	feed(early, 0, lockupReport)
	if l := early.Faults(); len(l) != 0 {
		t.Fatalf("faults before the devices are known: %+v", l)
	}
	early.SetDevices(testDevices)
	early.matchPending()
	if l := early.Faults(); len(l) != 2 {
		t.Errorf("after SetDevices: faults %+v, want mlx5_0's and mlx5_1's soft lockup", l)
	}
}

// TestTableAddDownNoAlloc: a flood of link downs keeps its times without
// allocating.
func TestTableAddDownNoAlloc(t *testing.T) {
	tab := newTable(64)
	h := hit{device: "mlx5_0", netdev: "ens1f0np0", pattern: "link-down", class: ClassNonFatal, down: true}
	line := []byte("mlx5_core 0000:03:00.0 ens1f0np0: Link down")
	now := time.Now()
	tab.add(h, 6, line, now)
	if n := testing.AllocsPerRun(1000, func() { tab.add(h, 6, line, now) }); n != 0 {
		t.Errorf("add of a known link down allocates %v times, want 0", n)
	}
}

// TestSoftLockupNoAlloc: following records through a soft lockup report
// costs no allocation once the header's line has its buffer.
func TestSoftLockupNoAlloc(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's sync.Pool makes regexp matching allocate")
	}
	f := newFollower(Options{})
	ix := f.ix.Load()
	var recs []Record
	for i, l := range lockupReport[:8] {
		pri := 4
		if i == 0 {
			pri = 0
		}
		r, err := ParseRecord(lrec(pri, time.Second, l+"\n"))
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	f.softLockup(ix, &recs[0], time.Now())
	if n := testing.AllocsPerRun(100, func() {
		for i := range recs {
			f.softLockup(ix, &recs[i], time.Time{})
		}
	}); n != 0 {
		t.Errorf("softLockup allocates %v times, want 0", n)
	}
}
