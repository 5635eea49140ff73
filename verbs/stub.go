//go:build linux && !cgo && !verbsfake

package verbs

import (
	"context"
	"time"
)

// This file is the build without cgo: libibverbs cannot be called, so every
// entry point reports ErrUnavailable and no resource can ever be created.
// The types and methods mirror cverbs*.go so callers compile unchanged;
// api_test.go checks that the three builds (with the fake NIC's) keep the
// same method sets.

var errNoCgo = &UnavailableError{Reason: "rdmad was built without cgo, so it cannot call libibverbs; rebuild with CGO_ENABLED=1 and libibverbs-dev installed"}

// Devices reports ErrUnavailable: this build has no verbs.
func Devices() ([]DeviceInfo, error) { return nil, errNoCgo }

// Open reports ErrUnavailable: this build has no verbs.
func Open(name string) (*Context, error) { return nil, errNoCgo }

// A Context is an open RDMA device; this build cannot open one.
type Context struct{}

// Name returns "".
func (c *Context) Name() string { return "" }

// Alive reports false.
func (c *Context) Alive() bool { return false }

// Close does nothing.
func (c *Context) Close() error { return nil }

// QueryDevice reports ErrUnavailable.
func (c *Context) QueryDevice() (DeviceAttr, error) { return DeviceAttr{}, errNoCgo }

// QueryPort reports ErrUnavailable.
func (c *Context) QueryPort(port int) (PortAttr, error) { return PortAttr{}, errNoCgo }

// GIDTable reports ErrUnavailable.
func (c *Context) GIDTable(port int) ([]GIDEntry, error) { return nil, errNoCgo }

// WatchAsyncEvents reports ErrUnavailable.
func (c *Context) WatchAsyncEvents(ctx context.Context, fn func(AsyncEvent)) error { return errNoCgo }

// AllocPD reports ErrUnavailable.
func (c *Context) AllocPD() (*PD, error) { return nil, errNoCgo }

// NewCompChannel reports ErrUnavailable.
func (c *Context) NewCompChannel() (*CompChannel, error) { return nil, errNoCgo }

// NewCQ reports ErrUnavailable.
func (c *Context) NewCQ(cqe int, ch *CompChannel) (*CQ, error) { return nil, errNoCgo }

// A PD is a protection domain; this build cannot create one.
type PD struct{}

// Close does nothing.
func (p *PD) Close() error { return nil }

// RegMR reports ErrUnavailable.
func (p *PD) RegMR(b *Buffer, access Access) (*MR, error) { return nil, errNoCgo }

// NewQP reports ErrUnavailable.
func (p *PD) NewQP(cfg QPConfig) (*QP, error) { return nil, errNoCgo }

// NewAH reports ErrUnavailable.
func (p *PD) NewAH(path Path) (*AH, error) { return nil, errNoCgo }

// An MR is a memory region; this build cannot register one.
type MR struct{}

// Addr returns 0.
func (m *MR) Addr() uint64 { return 0 }

// Len returns 0.
func (m *MR) Len() int { return 0 }

// LKey returns 0.
func (m *MR) LKey() uint32 { return 0 }

// RKey returns 0.
func (m *MR) RKey() uint32 { return 0 }

// Close does nothing.
func (m *MR) Close() error { return nil }

// A CompChannel is a completion channel; this build cannot create one.
type CompChannel struct{}

// Wait reports ErrUnavailable.
func (ch *CompChannel) Wait(ctx context.Context) (*CQ, error) { return nil, errNoCgo }

// Close does nothing.
func (ch *CompChannel) Close() error { return nil }

// A CQ is a completion queue; this build cannot create one.
type CQ struct{}

// Close does nothing.
func (q *CQ) Close() error { return nil }

// Poll reports ErrUnavailable.
func (q *CQ) Poll(out []WorkCompletion) (int, error) { return 0, errNoCgo }

// ReqNotify reports ErrUnavailable.
func (q *CQ) ReqNotify() error { return errNoCgo }

// PollWait reports ErrUnavailable.
func (q *CQ) PollWait(ctx context.Context, out []WorkCompletion, spin time.Duration) (int, error) {
	return 0, errNoCgo
}

// A QP is a queue pair; this build cannot create one.
type QP struct{}

// Num returns 0.
func (q *QP) Num() uint32 { return 0 }

// Close does nothing.
func (q *QP) Close() error { return nil }

// Init reports ErrUnavailable.
func (q *QP) Init(port int, access Access, qkey uint32) error { return errNoCgo }

// ReadyToReceive reports ErrUnavailable.
func (q *QP) ReadyToReceive(path Path, rem Remote) error { return errNoCgo }

// ReadyToSend reports ErrUnavailable.
func (q *QP) ReadyToSend(psn uint32, timeout, retry uint8) error { return errNoCgo }

// PostPoll reports ErrUnavailable.
func (q *QP) PostPoll(wr SendWR, cq *CQ, out []WorkCompletion, want int, spin time.Duration) (int, int64, time.Duration, error) {
	return 0, 0, 0, errNoCgo
}

// MonoNow returns 0: this build posts nothing to time.
func MonoNow() int64 { return 0 }

// ReadyToSendReads reports ErrUnavailable.
func (q *QP) ReadyToSendReads(psn uint32, timeout, retry, rdAtomic uint8) error { return errNoCgo }

// SetState reports ErrUnavailable.
func (q *QP) SetState(state QPState) error { return errNoCgo }

// State reports ErrUnavailable.
func (q *QP) State() (QPState, error) { return 0, errNoCgo }

// PostSend reports ErrUnavailable.
func (q *QP) PostSend(wr SendWR) error { return errNoCgo }

// MaxSendList is the most work requests one provider call posts.
const MaxSendList = 32

// PostSendList reports ErrUnavailable.
func (q *QP) PostSendList(wrs []SendWR) (int, error) { return 0, errNoCgo }

// PostRecv reports ErrUnavailable.
func (q *QP) PostRecv(id uint64, sge SGE) error { return errNoCgo }

// An AH is an address handle; this build cannot create one.
type AH struct{}

// Close does nothing.
func (a *AH) Close() error { return nil }
