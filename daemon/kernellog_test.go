package daemon

import (
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
)

// TestKmsgOptions: lines written to /dev/kmsg from userspace count only
// with RDMAD_TEST_KMSG_USERSPACE=1, and then the kernel-log component
// carries a note that names the switch and what it lets through.
func TestKmsgOptions(t *testing.T) {
	for _, v := range []string{"", "0", "true", "yes"} {
		opts, note := kmsgOptions(time.Minute, func(k string) string {
			if k == envKmsgUserspace {
				return v
			}
			return ""
		})
		if opts.TrustUserspace || note != nil || opts.Window != time.Minute {
			t.Errorf("%s=%q: options %+v, note %v; want the kernel's lines only, no note", envKmsgUserspace, v, opts, note)
		}
	}
	opts, note := kmsgOptions(time.Minute, func(k string) string {
		if k == envKmsgUserspace {
			return "1"
		}
		return ""
	})
	if !opts.TrustUserspace || note == nil || !strings.Contains(note.Error(), envKmsgUserspace+"=1") ||
		!strings.Contains(note.Error(), "userspace") {
		t.Errorf("%s=1: options %+v, note %v; want userspace trusted and a note naming the switch", envKmsgUserspace, opts, note)
	}
}

// TestInventoryRead: the follower is told the snapshot's devices only
// once an inventory read succeeded, not the empty list before the first
// read (which would leave the faults of the kernel's buffer unattributed
// after a restart), nor after a read that failed.
func TestInventoryRead(t *testing.T) {
	s := &apitype.Snapshot{}
	if inventoryRead(s) {
		t.Error("no inventory read yet: reported read")
	}
	s.Components = map[string]apitype.Component{apitype.ComponentInventory: {State: apitype.Error, Error: "sysfs: EIO"}}
	if inventoryRead(s) {
		t.Error("a failed read: reported read")
	}
	for _, st := range []string{apitype.OK, apitype.Unavailable} {
		s.Components[apitype.ComponentInventory] = apitype.Component{State: st}
		if !inventoryRead(s) {
			t.Errorf("inventory %s: not reported read", st)
		}
	}
}
