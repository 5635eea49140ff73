package mrpool

import (
	"io"
	"log/slog"
	"sync"
	"testing"
)

// publishTest puts a device pool built by newTestDevicePool into p, as
// AddDevice does with a registered one.
func publishTest(p *Pool, d *DevicePool) {
	p.mu.Lock()
	p.wanted[d.name] = true
	p.publish(d.name, d)
	p.mu.Unlock()
}

// TestGoneReleasesAndReports: a removal the pool noticed itself
// (DEVICE_FATAL, its uverbs node gone) closes the device pool at once,
// keeps the device wanted so that it is registered again when it returns,
// and tells OnDeviceGone, once; a removal the daemon asked for
// (RemoveDevice) is not reported back; a report about an instance that was
// already replaced leaves the new one alone.
func TestGoneReleasesAndReports(t *testing.T) {
	var mu sync.Mutex
	var reports []string
	p, err := New(Config{Classes: []Class{{Size: 4096, Count: 4}},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnDeviceGone: func(dev, reason string) {
			mu.Lock()
			reports = append(reports, dev+": "+reason)
			mu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	d := newTestDevicePool(t, Class{Size: 4096, Count: 4})
	publishTest(p, d)
	held, ok := d.Get(1)
	if !ok {
		t.Fatal("Get failed on a fresh device pool")
	}

	p.gone(d, "the device reported DEVICE_FATAL")
	if p.Device("test0") != nil {
		t.Error("device pool still published after gone")
	}
	if !d.closed.Load() {
		t.Error("device pool not closed after gone")
	}
	if _, ok := d.Get(1); ok {
		t.Error("Get succeeded on a released device pool")
	}
	held.Bytes()[0] = 1 // a held buffer stays mapped until Put
	d.Put(held)
	if !d.unmapped.Load() {
		t.Error("memory not unmapped after the last Put of a released device pool")
	}
	st := p.Stats()
	if len(st) != 1 || st[0].Device != "test0" || st[0].Registered {
		t.Errorf("stats after gone: %+v; want test0 wanted but not registered", st)
	}
	p.gone(d, "again") // already released: no second report
	mu.Lock()
	if len(reports) != 1 || reports[0] != "test0: the device reported DEVICE_FATAL" {
		t.Errorf("reports %q; want one for test0", reports)
	}
	mu.Unlock()

	// The device returned: a late report about the old instance must not
	// take the new one away.
	d2 := newTestDevicePool(t, Class{Size: 4096, Count: 4})
	publishTest(p, d2)
	p.gone(d, "late report")
	if p.Device("test0") != d2 || d2.closed.Load() {
		t.Error("a report about the old instance released the new one")
	}
	if err := p.RemoveDevice("test0"); err != nil {
		t.Fatal(err)
	}
	if !d2.closed.Load() || p.Device("test0") != nil {
		t.Error("RemoveDevice did not release the device pool")
	}
	mu.Lock()
	if len(reports) != 1 {
		t.Errorf("reports %q; RemoveDevice must not report back", reports)
	}
	mu.Unlock()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}
