package doctor

import (
	"fmt"
	"strings"

	"github.com/rdmad/rdmad/client/apitype"
)

// maxHolders is how many processes the memlock checks name.
const maxHolders = 3

// pinHolders returns "; pinning the most: NAME (pid N) SIZE in K MRs, ..."
// naming the processes whose memory regions pin the most (from
// Env.Resources, read once per Env), or "" when that is unknown or nothing
// is pinned.
func (e *Env) pinHolders() string {
	e.pinOnce.Do(func() {
		if e.Resources == nil {
			return
		}
		res, err := e.Resources()
		if err == nil && res.Error != "" {
			err = fmt.Errorf("%s", res.Error)
		}
		if err != nil {
			e.pinned = fmt.Sprintf(" (who pins memory is unknown: %v)", strings.TrimRight(err.Error(), "\n"))
			return
		}
		e.pinned = formatHolders(res.Processes)
	})
	return e.pinned
}

// formatHolders names the first maxHolders processes that pin memory;
// ps come most pinned bytes first (apitype.Resources' order).
func formatHolders(ps []apitype.ProcessResources) string {
	var names []string
	var total uint64
	for _, p := range ps {
		if p.MRs == 0 {
			continue
		}
		total += p.PinnedBytes
		if len(names) < maxHolders {
			names = append(names, fmt.Sprintf("%s %s in %d MR%s", holderName(p), HumanBytes(p.PinnedBytes), p.MRs, plural(p.MRs)))
		}
	}
	if len(names) == 0 {
		return "; no process has memory registered"
	}
	return fmt.Sprintf("; %s pinned in all, the most by %s", HumanBytes(total), strings.Join(names, ", "))
}

func holderName(p apitype.ProcessResources) string {
	switch {
	case p.Kernel:
		return "the kernel's " + p.Comm
	case p.PID == 0:
		return "an exiting process"
	case p.Comm == "":
		return fmt.Sprintf("pid %d", p.PID)
	}
	return fmt.Sprintf("%s (pid %d)", p.Comm, p.PID)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// registrationFailing says where rdmad's memory registration fails now
// (the MR pool's registration, the canary's last one); "" when it does
// not, or when rdmad's state is unknown.
func (e *Env) registrationFailing() string {
	if e.Snapshot == nil {
		return ""
	}
	var fails []string
	for _, p := range e.Snapshot.MRPool {
		switch {
		case p.Canary.LastError != "":
			fails = append(fails, fmt.Sprintf("%s: %s", p.Device, strings.TrimRight(p.Canary.LastError, "\n")))
		case !p.Registered && p.LastError != "":
			fails = append(fails, fmt.Sprintf("%s: %s", p.Device, strings.TrimRight(p.LastError, "\n")))
		}
	}
	if len(fails) == 0 {
		return ""
	}
	return "memory registration fails on " + strings.Join(fails, "; ")
}

// HumanBytes formats n bytes for people, in binary units with one decimal
// from KiB on: 512 B, 4.0 KiB, 1.5 GiB.
func HumanBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
