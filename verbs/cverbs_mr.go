//go:build linux && cgo && !verbsfake

package verbs

/*
#include <infiniband/verbs.h>

// The functions below wrap libibverbs entry points that are static inline
// functions or macros (not callable from cgo) and build work requests on
// the C stack, so no Go pointer is ever kept by C.

static struct ibv_mr *rdmad_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access) {
	return ibv_reg_mr(pd, addr, len, access);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"syscall"
	"unsafe"

	"github.com/rdmad/rdmad/internal/size"
)

// A PD is a protection domain.
type PD struct {
	c  *Context
	pd *C.struct_ibv_pd
	id uint64
}

// AllocPD allocates a protection domain.
func (c *Context) AllocPD() (*PD, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	pd, err := C.ibv_alloc_pd(c.ctx)
	if pd == nil {
		return nil, &Error{Verb: "ibv_alloc_pd", Object: c.name, Err: errnoOf(0, err)}
	}
	p := &PD{c: c, pd: pd}
	id, err := c.add(p.destroy)
	if err != nil {
		C.ibv_dealloc_pd(pd)
		return nil, err
	}
	p.id = id
	return p, nil
}

func (p *PD) destroy() error {
	if p.pd == nil {
		return nil
	}
	r, err := C.ibv_dealloc_pd(p.pd)
	p.pd = nil
	if r != 0 {
		return &Error{Verb: "ibv_dealloc_pd", Object: p.c.name, Err: errnoOf(int(r), err), Hint: "close its QPs, MRs and AHs first"}
	}
	return nil
}

// Close deallocates the protection domain.
func (p *PD) Close() error {
	p.c.remove(p.id)
	return p.destroy()
}

// An MR is a registered memory region.
type MR struct {
	c    *Context
	mr   *C.struct_ibv_mr
	id   uint64
	addr uint64
	len  int
	lkey uint32
	rkey uint32
}

// RegMR registers all of b with the given access. b must stay mapped until
// the MR is closed.
func (p *PD) RegMR(b *Buffer, access Access) (*MR, error) {
	mem := b.Bytes()
	obj := fmt.Sprintf("%s on %s", size.Size(len(mem)).String(), p.c.name)
	if len(mem) == 0 {
		return nil, &Error{Verb: "ibv_reg_mr", Object: obj, Err: syscall.EINVAL, Hint: "buffer is empty or closed"}
	}
	if err := p.c.usable(); err != nil {
		return nil, err
	}
	// mem is mmap'd memory, not Go heap memory, so C may keep its address.
	mr, err := C.rdmad_reg_mr(p.pd, unsafe.Pointer(&mem[0]), C.size_t(len(mem)), C.int(access))
	if mr == nil {
		err = errnoOf(0, err)
		e := &Error{Verb: "ibv_reg_mr", Object: obj, Err: err}
		switch {
		case errors.Is(err, syscall.ENOMEM):
			st, _ := ReadMemlock()
			e.Hint = memlockHint(st, int64(len(mem)))
		case errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EACCES):
			e.Hint = "the access flags are not allowed here, or /dev/infiniband is not accessible to this user"
		case errors.Is(err, syscall.EINVAL):
			e.Hint = "the device rejected the access flags or size; check max_mr_size"
		}
		return nil, e
	}
	m := &MR{c: p.c, mr: mr, addr: uint64(uintptr(mr.addr)), len: int(mr.length), lkey: uint32(mr.lkey), rkey: uint32(mr.rkey)}
	id, err := p.c.add(m.destroy)
	if err != nil {
		C.ibv_dereg_mr(mr)
		return nil, err
	}
	m.id = id
	return m, nil
}

// Addr returns the region's start address.
func (m *MR) Addr() uint64 { return m.addr }

// Len returns the region's length.
func (m *MR) Len() int { return m.len }

// LKey returns the local key.
func (m *MR) LKey() uint32 { return m.lkey }

// RKey returns the remote key.
func (m *MR) RKey() uint32 { return m.rkey }

func (m *MR) destroy() error {
	if m.mr == nil {
		return nil
	}
	r, err := C.ibv_dereg_mr(m.mr)
	m.mr = nil
	if r != 0 {
		return &Error{Verb: "ibv_dereg_mr", Object: fmt.Sprintf("%s on %s", size.Size(m.len).String(), m.c.name), Err: errnoOf(int(r), err)}
	}
	return nil
}

// Close deregisters the memory region.
func (m *MR) Close() error {
	m.c.remove(m.id)
	return m.destroy()
}
