package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rdmad/rdmad/internal/safefile"
)

// The flap record keeps the flap tracker across restarts of rdmad
// (health.Flaps.Encode, Restore; docs/HEALTH.md "Port flapping"): the
// file flapRecordName in the state directory, written atomically and
// root-only at every change, never through a symlink. rdmad runs as root,
// so the file is read as untrusted input: not through a symlink, a
// regular file of at most maxFlapRecord bytes owned by root (or rdmad's
// user) and writable by nobody else; anything else, and a record that
// does not parse, is ignored with one warning and replaced at the next
// change.
const (
	flapRecordName = "flaps.json"
	maxFlapRecord  = 4 << 20
	// bootIDPath is the kernel's boot ID, a UUID new at every boot.
	bootIDPath = "/proc/sys/kernel/random/boot_id"
)

// bootIDEnv carries the boot ID where /proc/sys is hidden: rdmad.service
// runs with ProcSubset=pid, so the unit passes systemd's %b (the same ID,
// 32 hex digits) in it.
const bootIDEnv = "RDMAD_BOOT_ID"

// readBootID returns the boot ID at path, or from $RDMAD_BOOT_ID where
// path cannot be read, as a UUID; "" and an error when neither has one.
func readBootID(path string) (string, error) {
	b, err := safefile.ReadRegular(path, 64)
	if err == nil {
		id := strings.TrimSpace(string(b))
		if len(id) != 36 || strings.Count(id, "-") != 4 {
			return "", fmt.Errorf("%s: %q is not a boot ID", path, id)
		}
		return id, nil
	}
	env, ok := os.LookupEnv(bootIDEnv)
	if !ok {
		return "", fmt.Errorf("%w; and $%s is not set (rdmad.service sets it to %%b)", err, bootIDEnv)
	}
	hex := strings.ToLower(strings.ReplaceAll(env, "-", ""))
	if len(hex) != 32 || strings.Trim(hex, "0123456789abcdef") != "" {
		return "", fmt.Errorf("$%s=%.40q is not a boot ID (32 hex digits, as systemd's %%b)", bootIDEnv, env)
	}
	return hex[:8] + "-" + hex[8:12] + "-" + hex[12:16] + "-" + hex[16:20] + "-" + hex[20:], nil
}

// keepFlaps makes the tracker outlive restarts through the record in dir
// (the state directory; "": none, nothing is kept) and restores the
// record found there. boot is the kernel's boot ID. Call before the first
// configure: a configuration whose thresholds differ from the record's
// counts anew, as a reload does.
func (h *healthPart) keepFlaps(dir, boot string, now time.Time) {
	if h == nil || dir == "" {
		return
	}
	if boot == "" {
		h.log.Warn("the kernel's boot ID cannot be read, so port flaps are not kept across restarts; under systemd, set Environment=RDMAD_BOOT_ID=%b in the unit (rdmad.service does)", "boot_id", bootIDPath)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recPath, h.boot = filepath.Join(dir, flapRecordName), boot
	b, _, err := safefile.Read(h.recPath, safefile.Options{Max: maxFlapRecord, NoFollow: true, Trusted: true})
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return
	case err != nil:
		h.log.Warn("port flap record refused; flaps count from now and the record is replaced at the next change",
			"record", h.recPath, "err", err.Error())
		return
	}
	info, err := h.flaps.Restore(b, boot, now)
	if err != nil {
		h.log.Warn("port flap record ignored; flaps count from now and the record is replaced at the next change",
			"record", h.recPath, "err", h.recPath+": "+err.Error())
		return
	}
	if info.SameBoot {
		h.log.Info("port flaps restored", "record", h.recPath, "ports", info.Ports, "saved", info.Saved)
	} else {
		h.log.Info("port flaps restored from before a reboot: their downs count, the reboot's own link downs do not",
			"record", h.recPath, "ports", info.Ports, "saved", info.Saved)
	}
}

// takeRecord returns the flap record to write if the tracker changed
// since the last one taken (nil: nothing to write, or no record kept).
// Under mu; the write (writeRecord) is not, so that a publication's
// verdict never waits for a disk.
func (h *healthPart) takeRecord(now time.Time) []byte {
	if h.recPath == "" || !h.flaps.Dirty() {
		return nil
	}
	h.flaps.Saved()
	b, err := h.flaps.Encode(h.boot, now)
	if err == nil && len(b) > maxFlapRecord {
		err = fmt.Errorf("the record takes %d bytes, more than the %d rdmad reads back; lower [health] flap_downs or flap_long_downs", len(b), maxFlapRecord)
	}
	if err != nil {
		h.log.Warn("port flap record not saved; a restart would forget the port flaps", "record", h.recPath, "err", err.Error())
		return nil
	}
	return b
}

// writeRecord writes b (takeRecord's; nil: nothing). A failure is logged
// once (until a write succeeds again), not fatal: the tracker in memory
// is not affected, and the next change writes again. Main loop, not
// under mu.
func (h *healthPart) writeRecord(b []byte) {
	if b == nil {
		return
	}
	if err := safefile.WriteAtomic(h.recPath, b, 0o600); err != nil {
		if !h.recFailed {
			h.log.Warn("port flap record not saved; a restart would forget the port flaps", "record", h.recPath, "err", err.Error())
		}
		h.recFailed = true
		h.mu.Lock()
		h.flaps.Unsaved()
		h.mu.Unlock()
		return
	}
	h.recFailed = false
}
