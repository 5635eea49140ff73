package daemon

import (
	"context"
	"errors"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestReadResources: on a fixture sysfs tree rdmad does not read this
// host's kernel; on the real one a kernel without RDMA is an answer with
// its Error set (the API's 200), not a failure of the request.
func TestReadResources(t *testing.T) {
	d := &Daemon{resources: newResources("testdata/some-fixture")}
	if _, err := d.readResources(context.Background()); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("fixture tree: %v, want ErrUnsupported", err)
	}

	d = &Daemon{resources: newResources("/")}
	res, err := d.readResources(context.Background())
	if err != nil {
		t.Fatalf("readResources: %v", err)
	}
	fd, serr := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_RDMA)
	if serr == nil {
		unix.Close(fd)
		if res.Error != "" {
			t.Errorf("this host has RDMA netlink, yet: %s", res.Error)
		}
		return
	}
	if !strings.Contains(res.Error, "ib_core is not loaded") || len(res.Processes) != 0 {
		t.Errorf("without RDMA: %+v, want empty lists and an error naming ib_core", res)
	}
	if s := d.scrapeResources(); s.Error == "" {
		t.Error("scrape without RDMA: no Error, so the metrics would export zeros")
	}
}
