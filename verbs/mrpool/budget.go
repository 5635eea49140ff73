package mrpool

import (
	"fmt"
	"os"
	"strings"

	"github.com/rdmad/rdmad/internal/size"
)

// A Class is one size class of pre-registered buffers.
type Class struct {
	Size  size.Size
	Count int
}

// stride is the distance between two buffers of class size: buffers start
// on a cache line, and classes of a page or more on a page, so adapters DMA
// whole lines and a buffer never shares a page it does not need to.
func stride(sz size.Size) int64 {
	s := int64(sz)
	page := int64(os.Getpagesize())
	if s >= page {
		return (s + page - 1) / page * page
	}
	return (s + 63) / 64 * 64
}

// regionBytes is the memory a class pins: count buffers rounded up to pages.
func regionBytes(c Class) int64 {
	page := int64(os.Getpagesize())
	n := stride(c.Size) * int64(c.Count)
	return (n + page - 1) / page * page
}

// A Fit says how many buffers of a class fit in a memlock budget.
type Fit struct {
	Class Class
	Fits  int   // buffers that fit, at most Class.Count
	Bytes int64 // memory those buffers pin
}

// A BudgetError is returned when the configured classes need more locked
// memory than RLIMIT_MEMLOCK leaves, or more memory than the memory cgroup
// (MemoryMax=) leaves (Cgroup set). It lists what would fit.
type BudgetError struct {
	Device string
	Need   int64
	Avail  int64
	Limit  int64
	Fits   []Fit
	// Cgroup names the memory cgroup whose limit (Limit) is short, with
	// CgroupUsed charged to it already; empty for RLIMIT_MEMLOCK.
	Cgroup     string
	CgroupUsed int64
}

func (e *BudgetError) Error() string {
	var b strings.Builder
	if e.Cgroup != "" {
		fmt.Fprintf(&b, "mrpool: register buffers on %s: classes need %s but the memory cgroup %s (MemoryMax=) of %s, %s in use, leaves only %s after %s for rdmad itself",
			e.Device, size.Size(e.Need).String(), e.Cgroup, size.Size(e.Limit).String(), size.Size(e.CgroupUsed).String(), size.Size(e.Avail).String(), size.Size(cgroupReserve).String())
		e.writeFits(&b)
		fmt.Fprintf(&b, "; raise MemoryMax= of rdmad.service by at least %s in a drop-in (systemctl edit rdmad), or lower [mrpool] classes counts",
			size.Size(e.Need-e.Avail).String())
		return b.String()
	}
	fmt.Fprintf(&b, "mrpool: register buffers on %s: classes need %s of locked memory but only %s of RLIMIT_MEMLOCK %s is left",
		e.Device, size.Size(e.Need).String(), size.Size(e.Avail).String(), size.Size(e.Limit).String())
	e.writeFits(&b)
	fmt.Fprintf(&b, "; raise LimitMEMLOCK= in rdmad.service to at least %s more, or lower [mrpool] classes counts",
		size.Size(e.Need-e.Avail).String())
	return b.String()
}

func (e *BudgetError) writeFits(b *strings.Builder) {
	b.WriteString("; would fit:")
	for i, f := range e.Fits {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(b, " %s x %d of %d", f.Class.Size, f.Fits, f.Class.Count)
	}
}

// PlanBudget checks classes against avail bytes of lockable memory. Classes
// are filled in the order given (the config's order is the operator's
// priority). It returns the per-class fits and, when not everything fits,
// a *BudgetError describing them.
func PlanBudget(classes []Class, avail int64) ([]Fit, int64, error) {
	var need int64
	for _, c := range classes {
		need += regionBytes(c)
	}
	fits := make([]Fit, len(classes))
	left := avail
	for i, c := range classes {
		n := c.Count
		if per := stride(c.Size); int64(n)*per > left {
			n = int(max(left, 0) / per)
		}
		// Rounding the region up to a page can still overshoot by one.
		for n > 0 && regionBytes(Class{c.Size, n}) > left {
			n--
		}
		fits[i] = Fit{Class: c, Fits: n, Bytes: regionBytes(Class{c.Size, n})}
		left -= fits[i].Bytes
	}
	if need > avail {
		return fits, need, &BudgetError{Need: need, Avail: avail, Fits: fits}
	}
	return fits, need, nil
}

// validate rejects configs that cannot work regardless of the budget.
func validate(classes []Class) error {
	seen := map[size.Size]bool{}
	for i, c := range classes {
		if c.Size <= 0 {
			return fmt.Errorf("mrpool: classes[%d]: size must be positive", i)
		}
		if c.Count <= 0 {
			return fmt.Errorf("mrpool: classes[%d] (%s): count must be positive", i, c.Size)
		}
		if c.Count > 1<<24 {
			return fmt.Errorf("mrpool: classes[%d] (%s): count %d exceeds 16777216", i, c.Size, c.Count)
		}
		if seen[c.Size] {
			return fmt.Errorf("mrpool: classes[%d]: size %s appears twice; merge the counts", i, c.Size)
		}
		seen[c.Size] = true
	}
	return nil
}
