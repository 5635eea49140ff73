package daemon

import (
	"context"
	"errors"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/inventory/rdmares"
)

// newResources returns the reader of the RDMA objects the kernel tracks,
// nil for a fixture sysfs tree, whose devices are not this host's.
func newResources(sysfsRoot string) *rdmares.Source {
	if sysfsRoot != "" && sysfsRoot != "/" {
		return nil
	}
	return rdmares.NewSource(rdmares.Options{})
}

// Resources reads the RDMA objects the kernel tracks per process and
// device (GET /v1/resources, D-Bus Resources), one dump at a time over
// every caller. A kernel that cannot be read (no RDMA core) is an answer,
// with its Error set; waiting too long for another read, or the caller
// going away, is an error.
func (b backend) Resources(ctx context.Context) (apitype.Resources, error) {
	return b.d.readResources(ctx)
}

func (d *Daemon) readResources(ctx context.Context) (apitype.Resources, error) {
	if d.resources == nil {
		return apitype.Resources{}, errors.ErrUnsupported
	}
	res, err := d.resources.Read(ctx)
	switch {
	case err == nil:
		return res, nil
	case errors.Is(err, rdmares.ErrBusy) || ctx.Err() != nil:
		return apitype.Resources{}, err
	}
	return apitype.Resources{ReadAt: time.Now(), Error: err.Error()}, nil
}

// scrapeTimeout bounds the read of the RDMA objects one scrape makes.
const scrapeTimeout = 5 * time.Second

// scrapeResources reads the RDMA objects for a metrics scrape; a read that
// failed or timed out has its Error set, and the metrics leave it out.
func (d *Daemon) scrapeResources() apitype.Resources {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	res, err := d.readResources(ctx)
	if err != nil {
		res.Error = err.Error()
	}
	return res
}
