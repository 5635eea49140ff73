package ethtool

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A Stat is one of the driver's statistics, as `ethtool -S` prints it.
type Stat struct {
	Name  string
	Value uint64
}

// maxStats bounds the statistics read from one netdev: the kernel refuses
// more than S32_MAX/8; mlx5 with hundreds of channels has some thousands.
const maxStats = 1 << 20

// readAttempts bounds the reads when the number of statistics changes
// between the ioctls (a driver whose channel count changed meanwhile).
const readAttempts = 3

// DriverStats reads all of netdev's driver statistics in the driver's
// order (SIOCETHTOOL: ETHTOOL_GSSET_INFO for the number of ETH_SS_STATS
// strings, ETHTOOL_GSTRINGS for their names, ETHTOOL_GSTATS for the
// values), as `ethtool -S` does. A driver without them gives an *Error
// that matches errors.ErrUnsupported.
func (r *Reader) DriverStats(netdev string) ([]Stat, error) {
	if err := checkName(netdev); err != nil {
		return nil, err
	}
	stats, err := r.driverStats(netdev)
	if err != nil {
		return nil, &Error{Netdev: netdev, Op: opDriver, Err: err}
	}
	return stats, nil
}

func (r *Reader) driverStats(netdev string) ([]Stat, error) {
	for range readAttempts {
		n, err := r.statsCount(netdev)
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return []Stat{}, nil
		}
		names, err := r.statNames(netdev, n)
		if errors.Is(err, errChanged) {
			continue
		}
		if err != nil {
			return nil, err
		}
		values, err := r.statValues(netdev, n)
		if errors.Is(err, errChanged) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out := make([]Stat, n)
		for i := range out {
			out[i] = Stat{Name: names[i], Value: values[i]}
		}
		return out, nil
	}
	return nil, fmt.Errorf("the number of statistics changed while they were read, %d times in a row: read again later", readAttempts)
}

// errChanged says that the driver's number of statistics changed between
// two ioctls.
var errChanged = errors.New("the number of statistics changed")

// statsCount returns the number of ETH_SS_STATS strings.
func (r *Reader) statsCount(netdev string) (int, error) {
	// struct ethtool_sset_info with one bit in sset_mask: the kernel
	// writes one u32 of data for it, or clears the bit when the driver
	// has no such set.
	g, err := newGuarded(ssetInfoDataOff + 4)
	if err != nil {
		return 0, err
	}
	defer g.free()
	b := g.buf
	binary.NativeEndian.PutUint32(b, cmdGSSetInfo)
	binary.NativeEndian.PutUint64(b[ssetInfoMaskOff:], 1<<ssStats)
	if err := r.ioctl(netdev, b); err != nil {
		if errors.Is(err, unix.EOPNOTSUPP) {
			return 0, fmt.Errorf("no string sets (ETHTOOL_GSSET_INFO): %w", err)
		}
		return 0, fmt.Errorf("ETHTOOL_GSSET_INFO: %w", err)
	}
	if binary.NativeEndian.Uint64(b[ssetInfoMaskOff:])&(1<<ssStats) == 0 {
		return 0, fmt.Errorf("the driver has no ETH_SS_STATS string set: %w", errors.ErrUnsupported)
	}
	n := int(binary.NativeEndian.Uint32(b[ssetInfoDataOff:]))
	if n > maxStats {
		return 0, fmt.Errorf("the driver claims %d statistics, more than %d", n, maxStats)
	}
	return n, nil
}

// statNames reads the n names of ETH_SS_STATS.
func (r *Reader) statNames(netdev string, n int) ([]string, error) {
	g, err := newGuarded(gstringsDataOff + n*gstringLen)
	if err != nil {
		return nil, err
	}
	defer g.free()
	b := g.buf
	binary.NativeEndian.PutUint32(b, cmdGStrings)
	binary.NativeEndian.PutUint32(b[4:], ssStats)
	binary.NativeEndian.PutUint32(b[gstringsLenOff:], uint32(n))
	if err := r.ioctl(netdev, b); err != nil {
		return nil, fmt.Errorf("ETHTOOL_GSTRINGS: %w", err)
	}
	if got := int(binary.NativeEndian.Uint32(b[gstringsLenOff:])); got != n {
		return nil, errChanged
	}
	names := make([]string, n)
	for i := range names {
		s := b[gstringsDataOff+i*gstringLen : gstringsDataOff+(i+1)*gstringLen]
		if j := bytes.IndexByte(s, 0); j >= 0 {
			s = s[:j]
		}
		names[i] = string(s)
	}
	return names, nil
}

// statValues reads the n values of ETH_SS_STATS.
func (r *Reader) statValues(netdev string, n int) ([]uint64, error) {
	g, err := newGuarded(statsDataOff + n*8)
	if err != nil {
		return nil, err
	}
	defer g.free()
	b := g.buf
	binary.NativeEndian.PutUint32(b, cmdGStats)
	binary.NativeEndian.PutUint32(b[statsNOff:], uint32(n))
	if err := r.ioctl(netdev, b); err != nil {
		return nil, fmt.Errorf("ETHTOOL_GSTATS: %w", err)
	}
	if got := int(binary.NativeEndian.Uint32(b[statsNOff:])); got != n {
		return nil, errChanged
	}
	values := make([]uint64, n)
	for i := range values {
		values[i] = binary.NativeEndian.Uint64(b[statsDataOff+i*8:])
	}
	return values, nil
}

// ioctl runs SIOCETHTOOL on netdev with ifr_data pointing at data, which
// must be memory outside the Go heap (a guarded buffer). A write of the
// kernel past data ends in EFAULT, which is taken as errChanged.
func (r *Reader) ioctl(netdev string, data []byte) error {
	var ifr [ifreqSize]byte
	copy(ifr[:ifNameSize-1], netdev)
	ptr := uintptr(unsafe.Pointer(&data[0]))
	if unsafe.Sizeof(ptr) == 8 {
		binary.NativeEndian.PutUint64(ifr[ifreqDataOff:], uint64(ptr))
	} else {
		binary.NativeEndian.PutUint32(ifr[ifreqDataOff:], uint32(ptr))
	}
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(r.fd), siocEthtool, uintptr(unsafe.Pointer(&ifr[0])))
	switch errno {
	case 0:
		return nil
	case unix.EFAULT:
		return errChanged
	}
	return errno
}

// A guarded buffer lies outside the Go heap, and its last byte is followed
// by an inaccessible page. Kernels without the fix of December 2025
// (net/ethtool/ioctl.c) write as many names or values as the driver has at
// the time of the ioctl, whatever the caller asked for (ethtool(8) has the
// same race; fixed kernels write none then): should the driver have grown
// its statistics since ETHTOOL_GSSET_INFO, the write faults (EFAULT)
// instead of overrunning memory, and the read is done again.
type guarded struct {
	mem []byte // the mapping, guard page included
	buf []byte // the usable bytes, ending at the guard page
}

func newGuarded(n int) (*guarded, error) {
	page := os.Getpagesize()
	size := (n + page - 1) / page * page
	mem, err := unix.Mmap(-1, 0, size+page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("map %d bytes for the ethtool ioctl: %w", size+page, err)
	}
	if err := unix.Mprotect(mem[size:], unix.PROT_NONE); err != nil {
		unix.Munmap(mem)
		return nil, fmt.Errorf("protect the guard page of the ethtool ioctl buffer: %w", err)
	}
	return &guarded{mem: mem, buf: mem[size-n : size : size]}, nil
}

func (g *guarded) free() { unix.Munmap(g.mem) }
