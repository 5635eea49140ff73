//go:build linux && cgo && !verbsfake

package verbs

/*
#include <infiniband/verbs.h>
#include <stdlib.h>
#include <string.h>

// The functions below wrap libibverbs entry points that are static inline
// functions or macros (not callable from cgo) and build work requests on
// the C stack, so no Go pointer is ever kept by C.

static struct ibv_ah *rdmad_create_ah(struct ibv_pd *pd, uint8_t port, int global, const uint8_t *dgid,
		uint8_t sgid_index, uint16_t dlid, uint8_t sl, uint8_t tclass, uint8_t hop_limit, uint32_t flow_label) {
	struct ibv_ah_attr a;
	memset(&a, 0, sizeof a);
	a.port_num = port;
	a.dlid = dlid;
	a.sl = sl;
	if (global) {
		a.is_global = 1;
		memcpy(a.grh.dgid.raw, dgid, 16);
		a.grh.sgid_index = sgid_index;
		a.grh.hop_limit = hop_limit;
		a.grh.traffic_class = tclass;
		a.grh.flow_label = flow_label & 0xfffff;
	}
	return ibv_create_ah(pd, &a);
}
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// An AH is an address handle for UD sends.
type AH struct {
	c  *Context
	ah *C.struct_ibv_ah
	id uint64
}

// NewAH creates an address handle for path.
func (p *PD) NewAH(path Path) (*AH, error) {
	if err := p.c.usable(); err != nil {
		return nil, err
	}
	global := 0
	if path.Global {
		global = 1
	}
	hop := path.HopLimit
	if hop == 0 {
		hop = 64
	}
	dgid := (*C.uint8_t)(C.CBytes(path.RemoteGID[:]))
	defer C.free(unsafe.Pointer(dgid))
	ah, err := C.rdmad_create_ah(p.pd, C.uint8_t(path.Port), C.int(global), dgid, C.uint8_t(path.GIDIndex),
		C.uint16_t(path.DLID), C.uint8_t(path.SL), C.uint8_t(path.TClass), C.uint8_t(hop), C.uint32_t(path.FlowLabel))
	if ah == nil {
		return nil, &Error{Verb: "ibv_create_ah", Object: fmt.Sprintf("to %s on %s port %d", path.RemoteGID, p.c.name, path.Port), Err: errnoOf(0, err)}
	}
	a := &AH{c: p.c, ah: ah}
	id, err := p.c.add(a.destroy)
	if err != nil {
		C.ibv_destroy_ah(ah)
		return nil, err
	}
	a.id = id
	return a, nil
}

func (a *AH) destroy() error {
	if a.ah == nil {
		return nil
	}
	r, err := C.ibv_destroy_ah(a.ah)
	a.ah = nil
	if r != 0 {
		return &Error{Verb: "ibv_destroy_ah", Object: a.c.name, Err: errnoOf(int(r), err)}
	}
	return nil
}

// Close destroys the address handle.
func (a *AH) Close() error {
	a.c.remove(a.id)
	return a.destroy()
}
