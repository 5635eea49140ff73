package daemon

import (
	"strings"
	"testing"

	"github.com/rdmad/rdmad/daemon/access"
)

// TestDoctorRunsForAdmins is issue #24's doctor lock-out: two runs in a
// loop by one socket-group member kept root's rdmactl doctor refused (5 of
// 5). Now a non-admin uid holds one run at a time, non-admins together
// leave reservedDoctorRuns free, and an admin gets a run whatever they do.
func TestDoctorRunsForAdmins(t *testing.T) {
	var s doctorSlots
	reader, other, third := access.Caller{UID: 1000, Known: true}, access.Caller{UID: 1001, Known: true}, access.Caller{UID: 1002, Known: true}
	release, err := s.take(reader, false)
	if err != nil {
		t.Fatalf("the reader's first run: %v", err)
	}
	if _, err := s.take(reader, false); err == nil || !strings.Contains(err.Error(), "uid 1000 already has a doctor run") {
		t.Errorf("the reader's second run at once: %v, want refused (one per uid)", err)
	}
	releaseOther, err := s.take(other, false)
	if err != nil {
		t.Fatalf("another reader's run: %v", err)
	}
	if _, err := s.take(third, false); err == nil {
		t.Error("a third non-admin run was let in: the admins' reserved run is gone")
	}
	// Root asks five times while the readers hold theirs: every one runs.
	for i := range 5 {
		rel, err := s.take(access.Caller{UID: 0, Known: true}, true)
		if err != nil {
			t.Fatalf("root's run %d while readers hold %d: %v", i+1, s.limited, err)
		}
		rel()
	}
	release()
	releaseOther()
	if s.runs != 0 || s.limited != 0 || len(s.perUID) != 0 {
		t.Errorf("after every release: %d runs, %d limited, %v per uid; want none", s.runs, s.limited, s.perUID)
	}
	if rel, err := s.take(reader, false); err != nil {
		t.Errorf("the reader's run after its first ended: %v", err)
	} else {
		rel()
	}
}
