package verbs

import (
	"context"
	"time"
)

// These interfaces list the API that both builds (cverbs.go with cgo,
// stub.go without) must provide; `CGO_ENABLED=0 go vet ./verbs` compiles
// this file against the stub, so a method added to one build only fails.
var (
	_ interface {
		Name() string
		Alive() bool
		Close() error
		QueryDevice() (DeviceAttr, error)
		QueryPort(int) (PortAttr, error)
		GIDTable(int) ([]GIDEntry, error)
		WatchAsyncEvents(context.Context, func(AsyncEvent)) error
		AllocPD() (*PD, error)
		NewCompChannel() (*CompChannel, error)
		NewCQ(int, *CompChannel) (*CQ, error)
	} = (*Context)(nil)
	_ interface {
		Close() error
		RegMR(*Buffer, Access) (*MR, error)
		NewQP(QPConfig) (*QP, error)
		NewAH(Path) (*AH, error)
	} = (*PD)(nil)
	_ interface {
		Addr() uint64
		Len() int
		LKey() uint32
		RKey() uint32
		Close() error
	} = (*MR)(nil)
	_ interface {
		Wait(context.Context) (*CQ, error)
		Close() error
	} = (*CompChannel)(nil)
	_ interface {
		Close() error
		Poll([]WorkCompletion) (int, error)
		ReqNotify() error
		PollWait(context.Context, []WorkCompletion, time.Duration) (int, error)
	} = (*CQ)(nil)
	_ interface {
		Num() uint32
		Close() error
		Init(int, Access, uint32) error
		ReadyToReceive(Path, Remote) error
		ReadyToSend(uint32, uint8, uint8) error
		SetState(QPState) error
		State() (QPState, error)
		PostSend(SendWR) error
		PostRecv(uint64, SGE) error
	} = (*QP)(nil)
	_ interface{ Close() error } = (*AH)(nil)
)
