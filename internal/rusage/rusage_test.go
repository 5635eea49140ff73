package rusage

import (
	"testing"
	"time"
)

// TestMonotonic: CPU time grows with work, sleeps with sleeping.
func TestMonotonic(t *testing.T) {
	cpu0, sleeps0 := CPU(), Sleeps()
	for start := time.Now(); time.Since(start) < 50*time.Millisecond; {
	}
	for range 5 {
		time.Sleep(2 * time.Millisecond)
	}
	if cpu := CPU(); cpu-cpu0 < 10*time.Millisecond {
		t.Errorf("CPU grew by %v over 50 ms of spinning", cpu-cpu0)
	}
	if s := Sleeps(); s <= sleeps0 {
		t.Errorf("Sleeps %d after %d and five sleeps", s, sleeps0)
	}
}
