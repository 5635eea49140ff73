package kmsg

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkFlood is the per-record cost of a flood of one matching
// message, without the read(2): parse, match, count, and the loop's tick.
func BenchmarkFlood(b *testing.B) {
	f := New(Options{})
	f.SetDevices(testDevices)
	f.mono = func() time.Duration { return time.Hour }
	rec := []byte(fmt.Sprintf("3,1,%d,-;mlx5_core 0000:03:00.0: mlx5_cmd_out_err:838:(pid 5): CREATE_QP(0x500) op_mod(0x0) failed, status bad parameter(0x3), syndrome (0x5ab1c2), err(-22)\n SUBSYSTEM=pci\n DEVICE=+pci:0000:03:00.0\n", time.Hour/time.Microsecond))
	b.ReportAllocs()
	for b.Loop() {
		f.handle(rec)
		f.tick()
	}
}
