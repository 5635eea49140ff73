//go:build linux && verbsfake

package verbs

import (
	"fmt"
	"syscall"
	"unsafe"

	"github.com/rdmad/rdmad/internal/size"
)

// A PD is a protection domain of the fake NIC. Its MRs, QPs and AHs hold
// references: deallocating it with any left fails with EBUSY, as the kernel
// does.
type PD struct {
	c    *Context
	id   uint64
	refs int // guarded by fab.mu
	dead bool
}

// AllocPD allocates a protection domain.
func (c *Context) AllocPD() (*PD, error) {
	fab.mu.Lock()
	defer fab.mu.Unlock()
	if err := c.usable("ibv_alloc_pd"); err != nil {
		return nil, err
	}
	p := &PD{c: c}
	id, err := c.add(p.destroy)
	if err != nil {
		return nil, err
	}
	p.id = id
	fab.live["pd"]++
	return p, nil
}

func (p *PD) destroy() error {
	fab.mu.Lock()
	defer fab.mu.Unlock()
	if p.dead {
		return nil
	}
	if p.refs > 0 {
		// Still allocated: the context's Close frees it after its
		// children (it keeps its place in the order of creation).
		if !p.c.closed {
			p.c.children[p.id] = p.destroy
		}
		return &Error{Verb: "ibv_dealloc_pd", Object: p.c.name, Err: syscall.EBUSY, Hint: "close its QPs, MRs and AHs first"}
	}
	p.dead = true
	fab.live["pd"]--
	return nil
}

// Close deallocates the protection domain.
func (p *PD) Close() error {
	fab.mu.Lock()
	p.c.remove(p.id)
	fab.mu.Unlock()
	return p.destroy()
}

// An MR is a registered memory region of the fake NIC: the caller's buffer
// itself, which work requests read and write when their keys, bounds and
// access allow it.
type MR struct {
	c      *Context
	pd     *PD
	id     uint64
	mem    []byte // the registered bytes (the Buffer's memory)
	addr   uint64
	key    uint32
	access Access
	dead   bool // guarded by fab.mu
}

// RegMR registers all of b with the given access. b must stay mapped until
// the MR is closed.
func (p *PD) RegMR(b *Buffer, access Access) (*MR, error) {
	mem := b.Bytes()
	obj := fmt.Sprintf("%s on %s", size.Size(len(mem)).String(), p.c.name)
	if len(mem) == 0 {
		return nil, &Error{Verb: "ibv_reg_mr", Object: obj, Err: syscall.EINVAL, Hint: "buffer is empty or closed"}
	}
	fab.mu.Lock()
	defer fab.mu.Unlock()
	if err := p.c.usable("ibv_reg_mr"); err != nil {
		return nil, err
	}
	if p.dead {
		return nil, &Error{Verb: "ibv_reg_mr", Object: obj, Err: syscall.EINVAL, Hint: "the PD was deallocated"}
	}
	if access&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && access&AccessLocalWrite == 0 {
		// As libibverbs: remote write needs local write.
		return nil, &Error{Verb: "ibv_reg_mr", Object: obj, Err: syscall.EINVAL, Hint: "the device rejected the access flags or size; check max_mr_size"}
	}
	d := p.c.dev
	d.nextKey++
	// Keys are not guessable from each other in real adapters; here they
	// only need to differ per device and never be 0.
	key := d.nextKey*0x101 + 0x1000
	m := &MR{c: p.c, pd: p, mem: mem, addr: uint64(uintptr(unsafe.Pointer(&mem[0]))), key: key, access: access}
	id, err := p.c.add(m.destroy)
	if err != nil {
		return nil, err
	}
	m.id = id
	d.mrs[key] = m
	p.refs++
	fab.live["mr"]++
	return m, nil
}

// Addr returns the region's start address.
func (m *MR) Addr() uint64 { return m.addr }

// Len returns the region's length.
func (m *MR) Len() int { return len(m.mem) }

// LKey returns the local key.
func (m *MR) LKey() uint32 { return m.key }

// RKey returns the remote key.
func (m *MR) RKey() uint32 { return m.key }

func (m *MR) destroy() error {
	fab.mu.Lock()
	defer fab.mu.Unlock()
	if m.dead {
		return nil
	}
	m.dead = true
	delete(m.c.dev.mrs, m.key)
	m.pd.refs--
	fab.live["mr"]--
	return nil
}

// Close deregisters the memory region.
func (m *MR) Close() error {
	fab.mu.Lock()
	m.c.remove(m.id)
	fab.mu.Unlock()
	return m.destroy()
}

// span returns n bytes of m at addr, or false when they are not all in m.
func (m *MR) span(addr uint64, n uint32) ([]byte, bool) {
	if addr < m.addr || addr-m.addr > uint64(len(m.mem)) || uint64(n) > uint64(len(m.mem))-(addr-m.addr) {
		return nil, false
	}
	off := addr - m.addr
	return m.mem[off : off+uint64(n)], true
}

// An AH is an address handle of the fake NIC: where a UD send goes.
type AH struct {
	c    *Context
	pd   *PD
	id   uint64
	path Path
	sgid GIDEntry
	dead bool // guarded by fab.mu
}

// NewAH creates an address handle for path.
func (p *PD) NewAH(path Path) (*AH, error) {
	fab.mu.Lock()
	defer fab.mu.Unlock()
	obj := fmt.Sprintf("to %s on %s port %d", path.RemoteGID, p.c.name, path.Port)
	if err := p.c.usable("ibv_create_ah"); err != nil {
		return nil, err
	}
	pt := p.c.dev.port(path.Port)
	if pt == nil {
		return nil, &Error{Verb: "ibv_create_ah", Object: obj, Err: syscall.EINVAL}
	}
	var sgid GIDEntry
	if path.Global {
		var ok bool
		if sgid, ok = p.c.dev.gidAt(path.Port, path.GIDIndex); !ok {
			return nil, &Error{Verb: "ibv_create_ah", Object: obj, Err: syscall.EINVAL}
		}
	} else if pt.attr.LinkLayer == LinkLayerEthernet {
		// RoCE has no LIDs: every address needs a GRH.
		return nil, &Error{Verb: "ibv_create_ah", Object: obj, Err: syscall.EINVAL}
	}
	if path.HopLimit == 0 {
		path.HopLimit = 64
	}
	a := &AH{c: p.c, pd: p, path: path, sgid: sgid}
	id, err := p.c.add(a.destroy)
	if err != nil {
		return nil, err
	}
	a.id = id
	p.refs++
	fab.live["ah"]++
	return a, nil
}

func (a *AH) destroy() error {
	fab.mu.Lock()
	defer fab.mu.Unlock()
	if a.dead {
		return nil
	}
	a.dead = true
	a.pd.refs--
	fab.live["ah"]--
	return nil
}

// Close destroys the address handle.
func (a *AH) Close() error {
	fab.mu.Lock()
	a.c.remove(a.id)
	fab.mu.Unlock()
	return a.destroy()
}
