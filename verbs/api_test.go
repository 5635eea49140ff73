package verbs

import (
	"context"
	"reflect"
	"slices"
	"testing"
	"time"
)

// These interfaces are the API that each of the three builds provides:
// the cgo one (cverbs*.go), the stub without cgo (stub.go) and the fake NIC
// (-tags verbsfake, fake*.go). This file has no build constraint, so every
// build compiles the assertions below against its own types (`go vet
// ./verbs`, `CGO_ENABLED=0 go vet ./verbs`, `go vet -tags verbsfake
// ./verbs`): a method missing from one build fails to compile, and
// TestMethodSets fails on an exported method one build has and the others
// lack.
type (
	contextAPI interface {
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
	}
	pdAPI interface {
		Close() error
		RegMR(*Buffer, Access) (*MR, error)
		NewQP(QPConfig) (*QP, error)
		NewAH(Path) (*AH, error)
	}
	mrAPI interface {
		Addr() uint64
		Len() int
		LKey() uint32
		RKey() uint32
		Close() error
	}
	compChannelAPI interface {
		Wait(context.Context) (*CQ, error)
		Close() error
	}
	cqAPI interface {
		Close() error
		Poll([]WorkCompletion) (int, error)
		ReqNotify() error
		PollWait(context.Context, []WorkCompletion, time.Duration) (int, error)
	}
	qpAPI interface {
		Num() uint32
		Close() error
		Init(int, Access, uint32) error
		ReadyToReceive(Path, Remote) error
		ReadyToSend(uint32, uint8, uint8) error
		ReadyToSendReads(uint32, uint8, uint8, uint8) error
		SetState(QPState) error
		State() (QPState, error)
		PostSend(SendWR) error
		PostSendList([]SendWR) (int, error)
		PostPoll(SendWR, *CQ, []WorkCompletion, int, time.Duration) (int, int64, time.Duration, error)
		PostRecv(uint64, SGE) error
	}
	ahAPI interface{ Close() error }
)

var (
	_ contextAPI     = (*Context)(nil)
	_ pdAPI          = (*PD)(nil)
	_ mrAPI          = (*MR)(nil)
	_ compChannelAPI = (*CompChannel)(nil)
	_ cqAPI          = (*CQ)(nil)
	_ qpAPI          = (*QP)(nil)
	_ ahAPI          = (*AH)(nil)

	// The package's functions and constants of every build.
	_ func() ([]DeviceInfo, error)   = Devices
	_ func(string) (*Context, error) = Open
	_ func() int64                   = MonoNow
	_ [MaxSendList]struct{}
)

// TestMethodSets checks that each type's exported methods in this build are
// exactly its interface's: no build grows a method the others lack.
func TestMethodSets(t *testing.T) {
	for _, c := range []struct {
		typ reflect.Type
		api reflect.Type
	}{
		{reflect.TypeFor[*Context](), reflect.TypeFor[contextAPI]()},
		{reflect.TypeFor[*PD](), reflect.TypeFor[pdAPI]()},
		{reflect.TypeFor[*MR](), reflect.TypeFor[mrAPI]()},
		{reflect.TypeFor[*CompChannel](), reflect.TypeFor[compChannelAPI]()},
		{reflect.TypeFor[*CQ](), reflect.TypeFor[cqAPI]()},
		{reflect.TypeFor[*QP](), reflect.TypeFor[qpAPI]()},
		{reflect.TypeFor[*AH](), reflect.TypeFor[ahAPI]()},
	} {
		var got, want []string
		for i := range c.typ.NumMethod() {
			got = append(got, c.typ.Method(i).Name)
		}
		for i := range c.api.NumMethod() {
			want = append(want, c.api.Method(i).Name)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%v has methods %v, the API %v", c.typ, got, want)
		}
	}
}
