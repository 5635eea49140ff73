package health

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"time"
)

// The flap record is what a restart of rdmad keeps of the flap tracker
// (docs/HEALTH.md "Port flapping"): every port's downs by both witnesses,
// its transition count, its flapping state and the times its quiet window
// runs from, with the boot it was written in and the thresholds that
// counted it. The daemon writes it to its state directory; Restore reads
// it back and trusts none of it: a record that does not parse or holds
// more than a tracker could is refused whole.

// flapRecordFormat is the record's layout version; another one is refused.
const flapRecordFormat = 1

// MaxFlapRecordPorts is the most ports a record may hold (a node has a few
// dozen; the tracker keeps only the ports present).
const MaxFlapRecordPorts = 1024

type flapRecord struct {
	Format int                    `json:"format"`
	BootID string                 `json:"boot_id"`
	Saved  time.Time              `json:"saved"`
	Config flapRecordConfig       `json:"config"`
	Ports  map[string]flapRecPort `json:"ports"`
}

type flapRecordConfig struct {
	Downs      int           `json:"downs"`
	Window     time.Duration `json:"window_ns"`
	Quiet      time.Duration `json:"quiet_ns"`
	LongDowns  int           `json:"long_downs"`
	LongWindow time.Duration `json:"long_window_ns"`
}

type flapRecPort struct {
	Up          bool        `json:"up"`
	Flapping    bool        `json:"flapping,omitempty"`
	Downs       []time.Time `json:"downs,omitempty"`
	KernelDowns []time.Time `json:"kernel_downs,omitempty"`
	KernelLast  time.Time   `json:"kernel_last"`
	Transitions uint64      `json:"transitions"`
	LastChange  time.Time   `json:"last_change"`
	Fresh       bool        `json:"fresh,omitempty"`
	KernelWait  bool        `json:"kernel_wait,omitempty"`
	KernelFrom  time.Time   `json:"kernel_from"`
}

// recordKey is a port key as portKey makes it ("mlx5_0/1").
var recordKey = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}/[0-9]{1,3}$`)

// bootIDSyntax is /proc/sys/kernel/random/boot_id's: a UUID.
var bootIDSyntax = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// Dirty reports whether the tracker changed in a way a restart must keep
// since the last Saved (or since it was made).
func (f *Flaps) Dirty() bool { return f.dirty }

// Saved marks the tracker's state as taken for writing (Encode's bytes);
// Unsaved marks it changed again, when writing them failed.
func (f *Flaps) Saved()   { f.dirty = false }
func (f *Flaps) Unsaved() { f.dirty = true }

// Encode returns the record of the tracker's state, written in boot (the
// kernel's boot ID) at now, for Restore.
func (f *Flaps) Encode(boot string, now time.Time) ([]byte, error) {
	r := flapRecord{Format: flapRecordFormat, BootID: boot, Saved: now.Round(0).UTC(),
		Config: flapRecordConfig{Downs: f.cfg.Downs, Window: f.cfg.Window, Quiet: f.cfg.Quiet,
			LongDowns: f.cfg.LongDowns, LongWindow: f.cfg.LongWindow},
		Ports: make(map[string]flapRecPort, len(f.ports))}
	for k, p := range f.ports {
		r.Ports[k] = flapRecPort{Up: p.up, Flapping: p.flapping, Downs: p.downs, KernelDowns: p.kdowns, KernelLast: p.klast,
			Transitions: p.transitions, LastChange: p.last, Fresh: p.fresh, KernelWait: p.kwait, KernelFrom: p.kfrom}
	}
	return json.Marshal(r)
}

// A RestoreInfo says what Restore took from a record.
type RestoreInfo struct {
	Ports int
	// SameBoot is false when the record was written before a reboot.
	SameBoot bool
	Saved    time.Time
}

// Restore replaces the tracker's state by the record b (Encode's) as it
// stands at now in boot. Written in the same boot, the ports are as if
// rdmad had run all along: a port's next observation compares with the
// state it was last seen in. Written before a reboot, the downs, the
// transition counts and the flapping states carry over (they are evidence
// about the cable), but each port's next observation is its baseline (the
// reboot's own down and up are no flap) and the kernel's link downs until
// the port is first seen ACTIVE are its bring-up, not counted. Downs dated
// after now (the clock was set back) are dropped. The record's thresholds
// become the tracker's, so that a SetConfig with other ones counts anew,
// as at a reload. A record that is damaged, of another format or holds
// more than a tracker could is refused whole with an error saying why,
// and the tracker is left as it was.
func (f *Flaps) Restore(b []byte, boot string, now time.Time) (RestoreInfo, error) {
	var r flapRecord
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return RestoreInfo{}, fmt.Errorf("damaged: %w", err)
	}
	if dec.More() {
		return RestoreInfo{}, fmt.Errorf("damaged: data after the record")
	}
	if r.Format != flapRecordFormat {
		return RestoreInfo{}, fmt.Errorf("format %d; this rdmad reads format %d", r.Format, flapRecordFormat)
	}
	if !bootIDSyntax.MatchString(r.BootID) {
		return RestoreInfo{}, fmt.Errorf("boot ID %.40q is not a boot ID", r.BootID)
	}
	c := r.Config
	if c.Downs < 1 || c.Downs > 1000 || c.LongDowns < 0 || c.LongDowns > 1000 || c.Window <= 0 || c.Quiet <= 0 ||
		(c.LongDowns > 0) != (c.LongWindow > 0) || c.LongWindow < 0 {
		return RestoreInfo{}, fmt.Errorf("thresholds %+v out of range", c)
	}
	cfg := FlapConfig{Downs: c.Downs, Window: c.Window, Quiet: c.Quiet, LongDowns: c.LongDowns, LongWindow: c.LongWindow}
	if len(r.Ports) > MaxFlapRecordPorts {
		return RestoreInfo{}, fmt.Errorf("%d ports, more than the %d a record may hold", len(r.Ports), MaxFlapRecordPorts)
	}
	same := r.BootID == boot
	ports := make(map[string]*flapPort, len(r.Ports))
	for k, rp := range r.Ports {
		if !recordKey.MatchString(k) {
			return RestoreInfo{}, fmt.Errorf("%.80q is not a port", k)
		}
		for _, ts := range [][]time.Time{rp.Downs, rp.KernelDowns} {
			if len(ts) > cfg.keep() || !slices.IsSortedFunc(ts, time.Time.Compare) {
				return RestoreInfo{}, fmt.Errorf("port %s: %d downs out of order or more than the %d kept", k, len(ts), cfg.keep())
			}
		}
		p := &flapPort{up: rp.Up, flapping: rp.Flapping, downs: past(rp.Downs, now), kdowns: past(rp.KernelDowns, now),
			klast: rp.KernelLast, transitions: rp.Transitions, last: rp.LastChange, fresh: rp.Fresh, kwait: rp.KernelWait,
			kfrom: rp.KernelFrom, unseen: true}
		for _, t := range []*time.Time{&p.last, &p.klast, &p.kfrom} {
			if t.After(now) {
				*t = now
			}
		}
		if !same {
			p.fresh, p.kwait, p.kfrom = true, true, time.Time{}
		}
		ports[k] = p
	}
	f.cfg, f.ports, f.dirty = cfg, ports, !same
	return RestoreInfo{Ports: len(ports), SameBoot: same, Saved: r.Saved}, nil
}

// past returns the times of ts not after now, in a new slice.
func past(ts []time.Time, now time.Time) []time.Time {
	var out []time.Time
	for _, t := range ts {
		if !t.After(now) {
			out = append(out, t)
		}
	}
	return out
}
