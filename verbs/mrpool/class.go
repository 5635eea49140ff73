package mrpool

import (
	"sync/atomic"

	"github.com/rdmad/rdmad/internal/size"
	"github.com/rdmad/rdmad/verbs"
)

// A class is the buffers of one size on one device: one region, one MR,
// and a lock-free stack of free buffer indices.
type class struct {
	d      *DevicePool
	size   size.Size
	stride int64
	count  int
	region *verbs.Buffer
	mem    []byte
	mr     *verbs.MR

	// head is the top of the free stack: the low 32 bits are index+1 (0 is
	// empty), the high 32 bits a tag bumped on every change, so a pop that
	// read a stale next index fails its compare-and-swap (ABA).
	head  atomic.Uint64
	next  []atomic.Uint32 // next[i] is index+1 below i on the stack
	state []atomic.Uint32 // 1 while buffer i is held: catches double Put

	inUse atomic.Int64
	high  atomic.Int64
	gets  atomic.Uint64
	empty atomic.Uint64 // Gets that found this class exhausted
}

func newClass(d *DevicePool, c Class, pd *verbs.PD, access verbs.Access) (*class, error) {
	cl, err := allocClass(d, c)
	if err != nil {
		return nil, err
	}
	mr, err := pd.RegMR(cl.region, access)
	if err != nil {
		cl.region.Close()
		return nil, err
	}
	cl.mr = mr
	return cl, nil
}

// allocClass maps a class's region and fills its free stack; the caller
// registers it.
func allocClass(d *DevicePool, c Class) (*class, error) {
	cl := &class{d: d, size: c.Size, stride: stride(c.Size), count: c.Count}
	buf, err := verbs.AllocBuffer(int(regionBytes(c)))
	if err != nil {
		return nil, err
	}
	cl.region, cl.mem = buf, buf.Bytes()
	cl.next = make([]atomic.Uint32, c.Count)
	cl.state = make([]atomic.Uint32, c.Count)
	for i := c.Count - 1; i >= 0; i-- {
		cl.push(uint32(i))
	}
	return cl, nil
}

func (c *class) pop() (uint32, bool) {
	for {
		h := c.head.Load()
		top := uint32(h)
		if top == 0 {
			return 0, false
		}
		nh := (h>>32+1)<<32 | uint64(c.next[top-1].Load())
		if c.head.CompareAndSwap(h, nh) {
			return top - 1, true
		}
	}
}

func (c *class) push(i uint32) {
	for {
		h := c.head.Load()
		c.next[i].Store(uint32(h))
		nh := (h>>32+1)<<32 | uint64(i+1)
		if c.head.CompareAndSwap(h, nh) {
			return
		}
	}
}

func (c *class) taken(i uint32) {
	c.state[i].Store(1)
	c.gets.Add(1)
	n := c.inUse.Add(1)
	for {
		h := c.high.Load()
		if n <= h || c.high.CompareAndSwap(h, n) {
			return
		}
	}
}

func (c *class) free(i uint32) {
	if !c.state[i].CompareAndSwap(1, 0) {
		panic("mrpool: buffer Put twice")
	}
	c.inUse.Add(-1)
	c.push(i)
}

// A Buf is a registered buffer taken from a DevicePool. It is a small value;
// copying it does not copy the memory.
type Buf struct {
	c *class
	i uint32
}

// Bytes returns the buffer's memory: the class size, not the size asked for.
func (b Buf) Bytes() []byte {
	off := int64(b.i) * b.c.stride
	return b.c.mem[off : off+int64(b.c.size) : off+int64(b.c.size)]
}

// Addr returns the buffer's address for work requests.
func (b Buf) Addr() uint64 { return b.c.mr.Addr() + uint64(int64(b.i)*b.c.stride) }

// Size returns the buffer's size (its class size).
func (b Buf) Size() int { return int(b.c.size) }

// LKey returns the local key of the buffer's memory region.
func (b Buf) LKey() uint32 { return b.c.mr.LKey() }

// RKey returns the remote key of the buffer's memory region.
func (b Buf) RKey() uint32 { return b.c.mr.RKey() }

// SGE returns a scatter/gather element covering the first n bytes.
func (b Buf) SGE(n int) verbs.SGE {
	return verbs.SGE{Addr: b.Addr(), Length: uint32(min(n, int(b.c.size))), LKey: b.c.mr.LKey()}
}
