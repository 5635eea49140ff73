package rdmares

import (
	cmpv "cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/mdlayher/netlink"
	"github.com/mdlayher/netlink/nltest"
	"golang.org/x/sys/unix"
)

// A kernel is a scripted RDMA netlink kernel behind an nltest connection.
// answer gives the messages of one dump (nil for an empty one: the bare
// NLMSG_DONE), or an errno the kernel answers with NLMSG_ERROR; the reply
// messages take the request's sequence number and port id, and a dump of
// several is sent as the kernel sends it, NLM_F_MULTI and an NLMSG_DONE,
// over several datagrams (nltest hands half of what is left to each
// receive). more, when not nil, gives the datagrams after those, one per
// receive once they are out (a dump the kernel is still filling).
type kernel struct {
	t      *testing.T
	answer func(cmd uint16, devIndex *uint32) ([]netlink.Message, syscall.Errno)
	more   func(n int) []netlink.Message

	mu        sync.Mutex
	requests  []string
	deadlines []time.Time
	req       netlink.Message
	extra     int
}

func (k *kernel) dial() (*netlink.Conn, error) {
	return nltest.Dial(k.serve), nil
}

// setDeadline records the deadlines the reader sets.
func (k *kernel) setDeadline(_ *netlink.Conn, t time.Time) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.deadlines = append(k.deadlines, t)
	return nil
}

func (k *kernel) serve(reqs []netlink.Message) ([]netlink.Message, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(reqs) == 0 {
		// A receive after every datagram of the answer went out.
		if k.more == nil {
			return nil, errors.New("test kernel: a receive after the end of the dump")
		}
		k.extra++
		return k.reply(k.more(k.extra)), nil
	}
	if len(reqs) != 1 {
		k.t.Fatalf("%d messages in one request", len(reqs))
	}
	req := reqs[0]
	k.req, k.extra = req, 0
	if req.Header.Flags != netlink.Request|netlink.Dump || req.Header.Type>>10 != clientNLDEV {
		k.t.Errorf("request header %+v: want an RDMA_NL_NLDEV dump request (NLM_F_REQUEST|NLM_F_DUMP)", req.Header)
	}
	cmd := uint16(req.Header.Type) & (1<<10 - 1)
	var devIndex *uint32
	if len(req.Data) > 0 {
		attrs, err := parseAttrs(req.Data)
		if err != nil || len(attrs) != 1 || attrs[0].typ != attrDevIndex {
			k.t.Fatalf("request attributes %x: want RDMA_NLDEV_ATTR_DEV_INDEX alone (%v)", req.Data, err)
		}
		idx, err := u32(attrs[0])
		if err != nil {
			k.t.Fatal(err)
		}
		devIndex = &idx
	}
	if devIndex == nil {
		k.requests = append(k.requests, fmt.Sprintf("%d", cmd))
	} else {
		k.requests = append(k.requests, fmt.Sprintf("%d/%d", cmd, *devIndex))
	}
	msgs, errno := k.answer(cmd, devIndex)
	if errno != 0 {
		// As netlink_ack builds it: the errno, then the request. (Not
		// nltest.Error, which keeps the request's flags, and a dump's
		// NLM_F_MATCH is the bit NLM_F_ACK_TLVS has in an error.)
		b, err := req.MarshalBinary()
		if err != nil {
			k.t.Fatal(err)
		}
		return []netlink.Message{{
			Header: netlink.Header{Type: netlink.Error, Sequence: req.Header.Sequence, PID: req.Header.PID},
			Data:   append(binary.NativeEndian.AppendUint32(nil, uint32(-int32(errno))), b...),
		}}, nil
	}
	if msgs == nil {
		msgs = []netlink.Message{done(0)}
	}
	return k.reply(msgs), nil
}

// reply gives msgs the request's sequence number and port id.
func (k *kernel) reply(msgs []netlink.Message) []netlink.Message {
	out := make([]netlink.Message, len(msgs))
	for i, m := range msgs {
		m.Header.Sequence, m.Header.PID = k.req.Header.Sequence, k.req.Header.PID
		out[i] = m
	}
	return out
}

// done is the multipart NLMSG_DONE that ends a dump, with its code.
func done(code int32) netlink.Message {
	return netlink.Message{
		Header: netlink.Header{Type: netlink.Done, Flags: netlink.Multi},
		Data:   binary.NativeEndian.AppendUint32(nil, uint32(code)),
	}
}

// fixture returns the messages of a testdata dump, NLMSG_DONE included.
func fixture(t *testing.T, name string) []netlink.Message {
	t.Helper()
	msgs, err := splitMessages(readHex(t, name))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return msgs
}

// fixtureKernel answers with the fixtures: rxe0 (index 1) with its QPs,
// CQs, MRs and PDs, mlx5_0 (index 2) with nvme_rdma's MR.
func fixtureKernel(t *testing.T) *kernel {
	dumps := map[string][]netlink.Message{
		"9":    fixture(t, "res-get.hex"),
		"10/1": fixture(t, "res-qp.hex"),
		"12/1": fixture(t, "res-cq.hex"),
		"13/1": fixture(t, "res-mr.hex"),
		"14/1": fixture(t, "res-pd.hex"),
		"13/2": fixture(t, "res-mr-pad.hex"),
	}
	return &kernel{t: t, answer: func(cmd uint16, devIndex *uint32) ([]netlink.Message, syscall.Errno) {
		key := fmt.Sprint(cmd)
		if devIndex != nil {
			key += fmt.Sprintf("/%d", *devIndex)
		}
		return dumps[key], 0
	}}
}

// sortedObjects returns objs in the order of Read's dumps: by device, then
// kind, then as the kernel sent them.
func sortedObjects(objs []Object) []Object {
	out := slices.Clone(objs)
	slices.SortStableFunc(out, func(a, b Object) int {
		return cmpv.Or(cmpv.Compare(a.DevIndex, b.DevIndex), cmpv.Compare(a.Kind, b.Kind))
	})
	return out
}

// TestReadDumps: Read's dumps through a netlink connection: the device
// dump, then each kind's per device, each request with its device index,
// the answers multipart over several datagrams; the context's deadline is
// the socket's.
func TestReadDumps(t *testing.T) {
	k := fixtureKernel(t)
	dl := time.Now().Add(time.Hour)
	ctx, cancel := context.WithDeadline(context.Background(), dl)
	defer cancel()
	devs, objs, err := readObjects(ctx, k.dial, k.setDeadline)
	if err != nil {
		t.Fatal(err)
	}
	wantDevs, wantObjs := fixtureObjects(t)
	if diff := cmp.Diff(wantDevs, devs); diff != "" {
		t.Errorf("devices (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(sortedObjects(wantObjs), objs); diff != "" {
		t.Errorf("objects (-want +got):\n%s", diff)
	}
	wantReqs := []string{"9", "10/1", "12/1", "13/1", "14/1", "10/2", "12/2", "13/2", "14/2"}
	if diff := cmp.Diff(wantReqs, k.requests); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
	if len(k.deadlines) != 1 || !k.deadlines[0].Equal(dl) {
		t.Errorf("deadlines set %v, want the context's %v alone", k.deadlines, dl)
	}
}

// TestReadKernelErrors: a device whose dump answers EINVAL went away since
// the device dump and is left out, whether the kernel says so with
// NLMSG_ERROR (the dump's start) or in its NLMSG_DONE; any other error
// fails the Read, naming the dump, with the errno.
func TestReadKernelErrors(t *testing.T) {
	for _, tt := range []struct {
		name   string
		answer func(k *kernel) func(cmd uint16, devIndex *uint32) ([]netlink.Message, syscall.Errno)
		want   syscall.Errno
	}{
		{"NLMSG_ERROR", func(k *kernel) func(uint16, *uint32) ([]netlink.Message, syscall.Errno) {
			return func(cmd uint16, devIndex *uint32) ([]netlink.Message, syscall.Errno) {
				if devIndex != nil && *devIndex == 2 {
					return nil, unix.EINVAL
				}
				return fixtureKernel(k.t).answer(cmd, devIndex)
			}
		}, 0},
		{"NLMSG_DONE", func(k *kernel) func(uint16, *uint32) ([]netlink.Message, syscall.Errno) {
			return func(cmd uint16, devIndex *uint32) ([]netlink.Message, syscall.Errno) {
				if devIndex != nil && *devIndex == 2 {
					return []netlink.Message{done(-int32(unix.EINVAL))}, 0
				}
				return fixtureKernel(k.t).answer(cmd, devIndex)
			}
		}, 0},
		{"EPERM", func(k *kernel) func(uint16, *uint32) ([]netlink.Message, syscall.Errno) {
			return func(cmd uint16, devIndex *uint32) ([]netlink.Message, syscall.Errno) {
				if devIndex != nil && *devIndex == 2 {
					return nil, unix.EPERM
				}
				return fixtureKernel(k.t).answer(cmd, devIndex)
			}
		}, unix.EPERM},
	} {
		t.Run(tt.name, func(t *testing.T) {
			k := &kernel{t: t}
			k.answer = tt.answer(k)
			devs, objs, err := readObjects(context.Background(), k.dial, k.setDeadline)
			if tt.want != 0 {
				if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), "dump the qps of mlx5_0") {
					t.Fatalf("err = %v, want %v naming the QP dump of mlx5_0", err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(devs) != 1 || devs[0].Name != "rxe0" {
				t.Errorf("devices %+v, want rxe0 alone", devs)
			}
			for _, o := range objs {
				if o.DevIndex != 1 {
					t.Errorf("object %+v of the device that went away", o)
				}
			}
			if len(objs) != 9 {
				t.Errorf("%d objects, want rxe0's 9", len(objs))
			}
		})
	}
}

// TestReadWrongSequence: a reply that carries another request's sequence
// number, or another socket's port id, is refused.
func TestReadWrongSequence(t *testing.T) {
	for _, tt := range []struct {
		name   string
		change func(*netlink.Header)
	}{
		{"sequence", func(h *netlink.Header) { h.Sequence++ }},
		{"port id", func(h *netlink.Header) { h.PID = nltest.PID + 1 }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			k := fixtureKernel(t)
			nl := nltest.Dial(func(reqs []netlink.Message) ([]netlink.Message, error) {
				msgs, err := k.serve(reqs)
				if len(msgs) > 0 {
					tt.change(&msgs[0].Header)
				}
				return msgs, err
			})
			dial := func() (*netlink.Conn, error) { return nl, nil }
			_, _, err := readObjects(context.Background(), dial, k.setDeadline)
			if !errors.Is(err, errMalformed) || !strings.Contains(err.Error(), "a reply to request") || !strings.Contains(err.Error(), "dump the devices") {
				t.Fatalf("err = %v, want a malformed reply to another request, in the device dump", err)
			}
		})
	}
}

// TestReadCancelledMidDump: a context cancelled while the kernel is still
// sending the device dump ends the Read with its error: the messages after
// the cancellation are not decoded, no other dump is asked for, and the
// socket's deadline is moved to the past to wake a receive in progress.
func TestReadCancelledMidDump(t *testing.T) {
	devs := fixture(t, "res-get.hex")[:2] // rxe0 and mlx5_0, NLM_F_MULTI, no NLMSG_DONE yet
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	k := &kernel{t: t}
	k.answer = func(cmd uint16, devIndex *uint32) ([]netlink.Message, syscall.Errno) {
		if cmd != cmdResGet {
			t.Errorf("a dump of %d/%v after the cancellation", cmd, devIndex)
		}
		return devs, 0
	}
	k.more = func(n int) []netlink.Message {
		if n == 1 {
			// The caller gives up while the kernel fills the next
			// datagram: a third device.
			cancel()
			return []netlink.Message{devs[0]}
		}
		// What the reader drains: the end of the dump.
		return []netlink.Message{done(0)}
	}
	start := time.Now()
	_, _, err := readObjects(ctx, k.dial, k.setDeadline)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("Read returned after %s", el)
	}
	if diff := cmp.Diff([]string{"9"}, k.requests); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.deadlines) != 1 || !k.deadlines[0].Before(start) {
		t.Errorf("deadlines set %v, want one in the past on cancellation", k.deadlines)
	}
}

// TestDumpWakesOnCancel: a receive blocked on a real netlink socket (an
// rtnetlink NLMSG_NOOP, to which the kernel sends nothing) returns as soon
// as the context is cancelled, and at its deadline with an error that says
// the kernel did not answer.
func TestDumpWakesOnCancel(t *testing.T) {
	for _, tt := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
		text string
	}{
		{"cancel", func() (context.Context, context.CancelFunc) {
			// The deadline only ends the test when nothing else does.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			time.AfterFunc(100*time.Millisecond, cancel)
			return ctx, cancel
		}, context.Canceled, "canceled"},
		{"deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 100*time.Millisecond)
		}, context.DeadlineExceeded, "did not answer in time"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			nl, err := netlink.Dial(unix.NETLINK_ROUTE, nil)
			if err != nil {
				t.Skipf("no rtnetlink socket: %v", err)
			}
			ctx, cancel := tt.ctx()
			defer cancel()
			c, err := newConn(ctx, nl, nl.SetDeadline)
			if err != nil {
				t.Fatal(err)
			}
			defer c.close()
			start := time.Now()
			err = c.dump(ctx, netlink.Message{Header: netlink.Header{Type: netlink.Noop, Flags: netlink.Request}},
				func(m netlink.Message) (bool, error) {
					t.Errorf("the kernel answered NLMSG_NOOP: %+v", m)
					return true, nil
				})
			el := time.Since(start)
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.text) {
				t.Errorf("err = %v, want %v saying %q", err, tt.want, tt.text)
			}
			if el < 90*time.Millisecond || el > 2*time.Second {
				t.Errorf("returned after %s, want about 100ms", el)
			}
		})
	}
}
