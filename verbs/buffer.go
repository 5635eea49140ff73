//go:build linux

package verbs

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/rdmad/rdmad/internal/memlimit"
	"github.com/rdmad/rdmad/internal/size"
	"golang.org/x/sys/unix"
)

// A Buffer is page-aligned anonymous memory outside the Go heap, suitable
// for memory registration: its address never moves and the garbage
// collector never frees it. Close unmaps it; a Buffer must not be closed
// while a memory region still covers it.
type Buffer struct {
	mu  sync.Mutex
	mem []byte
}

// AllocBuffer maps n bytes (rounded up to whole pages) of zeroed,
// private anonymous memory.
func AllocBuffer(n int) (*Buffer, error) {
	if n <= 0 {
		return nil, fmt.Errorf("verbs: allocate buffer of %d bytes: size must be positive", n)
	}
	page := os.Getpagesize()
	mapped := (n + page - 1) / page * page
	mem, err := unix.Mmap(-1, 0, mapped, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("verbs: mmap %s buffer: %w", size.Size(mapped).String(), err)
	}
	return &Buffer{mem: mem[:n:mapped]}, nil
}

// Bytes returns the buffer's memory; nil after Close.
func (b *Buffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.mem
}

// Len returns the buffer's usable size.
func (b *Buffer) Len() int { return len(b.Bytes()) }

// Close unmaps the buffer. It is safe to call more than once.
func (b *Buffer) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.mem == nil {
		return nil
	}
	err := unix.Munmap(b.mem[:cap(b.mem)])
	b.mem = nil
	if err != nil {
		return fmt.Errorf("verbs: munmap buffer: %w", err)
	}
	return nil
}

// MemlockStatus is what bounds memory registration for this process: the
// kernel refuses to pin more than Limit bytes (RLIMIT_MEMLOCK) unless the
// process has CAP_IPC_LOCK.
type MemlockStatus struct {
	Limit      uint64 // soft RLIMIT_MEMLOCK in bytes
	Unlimited  bool   // RLIM_INFINITY
	CapIPCLock bool   // effective CAP_IPC_LOCK: the limit is not enforced
	Pinned     uint64 // VmPin of this process: bytes already pinned (registered)
	Locked     uint64 // VmLck of this process: bytes locked with mlock
}

// Enforced reports whether the kernel will enforce Limit on registrations.
func (m MemlockStatus) Enforced() bool { return !m.Unlimited && !m.CapIPCLock }

// Available returns how many more bytes can be registered before the kernel
// refuses, and false when there is no enforced limit.
func (m MemlockStatus) Available() (uint64, bool) {
	if !m.Enforced() {
		return 0, false
	}
	used := m.Pinned
	if used >= m.Limit {
		return 0, true
	}
	return m.Limit - used, true
}

// ReadMemlock reports the memlock limit, capability and current usage of
// this process.
func ReadMemlock() (MemlockStatus, error) {
	var st MemlockStatus
	l, err := memlimit.Own()
	if err != nil {
		return st, fmt.Errorf("verbs: %w", err)
	}
	st.Limit = uint64(l.Soft)
	st.Unlimited = l.Soft == size.Unlimited
	st.CapIPCLock = hasEffectiveCap(unix.CAP_IPC_LOCK)
	if data, err := os.ReadFile("/proc/self/status"); err == nil {
		st.Pinned, st.Locked = parseVmPin(data)
	}
	return st, nil
}

// hasEffectiveCap reports whether the calling thread has capability c in
// its effective set. Capabilities are per thread on Linux; Go keeps them
// uniform across threads unless a caller changes one thread on purpose.
func hasEffectiveCap(c int) bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	return data[c/32].Effective&(1<<(uint(c)%32)) != 0
}

// parseVmPin extracts VmPin and VmLck (in bytes) from /proc/self/status.
func parseVmPin(status []byte) (pinned, locked uint64) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "VmPin" && k != "VmLck") {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		n, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			continue
		}
		if k == "VmPin" {
			pinned = n * 1024
		} else {
			locked = n * 1024
		}
	}
	return pinned, locked
}

// memlockHint explains an ENOMEM from memory registration in terms of the
// memlock limit, or returns "" when the limit cannot be the cause.
func memlockHint(st MemlockStatus, want int64) string {
	if !st.Enforced() {
		return "RLIMIT_MEMLOCK is not enforced (unlimited or CAP_IPC_LOCK); the host is short of memory or the device's MR limit is reached"
	}
	return fmt.Sprintf("RLIMIT_MEMLOCK is %s with %s already pinned, %s more does not fit; raise LimitMEMLOCK= in rdmad.service (or ulimit -l) or shrink [mrpool] classes",
		size.Size(st.Limit).String(), size.Size(st.Pinned).String(), size.Size(want).String())
}
