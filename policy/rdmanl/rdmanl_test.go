package rdmanl

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/mdlayher/netlink"
	"github.com/mdlayher/netlink/nltest"

	"github.com/rdmad/rdmad/internal/testenv"
)

func TestConstantsMatchHeader(t *testing.T) {
	gcc := testenv.Tool(t, "gcc", "apt-get install gcc linux-libc-dev: the header check compiles against the kernel's headers")
	testenv.File(t, "/usr/include/rdma/rdma_netlink.h", "apt-get install linux-libc-dev")
	bin := filepath.Join(t.TempDir(), "consts")
	if out, err := exec.Command(gcc, "-Wall", "-Werror", "-o", bin, filepath.Join("testdata", "consts.c")).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	header := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		i := strings.LastIndexByte(line, ' ')
		n, err := strconv.Atoi(line[i+1:])
		if i < 0 || err != nil {
			t.Fatalf("bad line %q", line)
		}
		header[line[:i]] = n
	}
	for name, want := range map[string]int{
		"RDMA_NL_NLDEV":                                       clientNLDEV,
		"RDMA_NLDEV_CMD_GET":                                  cmdGet,
		"RDMA_NLDEV_CMD_SET":                                  cmdSet,
		"RDMA_NLDEV_ATTR_DEV_INDEX":                           attrDevIndex,
		"RDMA_NLDEV_ATTR_DEV_NAME":                            attrDevName,
		"RDMA_NLDEV_ATTR_DEV_DIM":                             attrDevDIM,
		"RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_SET)": int(msgType(cmdSet)),
		"RDMA_NLDEV_CMD_SYS_GET":                              cmdSysGet,
		"RDMA_NLDEV_CMD_SYS_SET":                              cmdSysSet,
		"RDMA_NLDEV_SYS_ATTR_NETNS_MODE":                      attrSysNetnsMode,
		"RDMA_NLDEV_CMD_STAT_SET":                             cmdStatSet,
		"RDMA_NLDEV_CMD_STAT_GET":                             cmdStatGet,
		"RDMA_NLDEV_CMD_STAT_GET_STATUS":                      cmdStatGetStatus,
		"RDMA_NLDEV_ATTR_PORT_INDEX":                          attrPortIndex,
		"RDMA_NLDEV_ATTR_RES_QP":                              attrResQP,
		"RDMA_NLDEV_ATTR_STAT_MODE":                           attrStatMode,
		"RDMA_NLDEV_ATTR_STAT_RES":                            attrStatRes,
		"RDMA_NLDEV_ATTR_STAT_AUTO_MODE_MASK":                 attrStatAutoModeMask,
		"RDMA_NLDEV_ATTR_STAT_HWCOUNTERS":                     attrStatHWCounters,
		"RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY":                attrStatHWCounterEntry,
		"RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_NAME":           attrStatHWCounterName,
		"RDMA_NLDEV_ATTR_STAT_HWCOUNTER_INDEX":                attrStatHWCounterIndex,
		"RDMA_NLDEV_ATTR_STAT_HWCOUNTER_DYNAMIC":              attrStatHWCounterDyn,
		"RDMA_COUNTER_MODE_NONE":                              counterModeNone,
		"RDMA_COUNTER_MODE_AUTO":                              counterModeAuto,
		"RDMA_COUNTER_MODE_MANUAL":                            counterModeManual,
		"RDMA_COUNTER_MASK_QP_TYPE":                           counterMaskQPType,
		"RDMA_COUNTER_MASK_PID":                               counterMaskPID,
		"NLA_F_NESTED":                                        int(netlink.Nested),
	} {
		if got, ok := header[name]; !ok || got != want {
			t.Errorf("%s: header says %d (%v), Go has %d", name, got, ok, want)
		}
	}
}

func nla(typ uint16, data []byte) []byte {
	b := binary.NativeEndian.AppendUint16(nil, uint16(4+len(data)))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, data...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func u32(v uint32) []byte { return binary.NativeEndian.AppendUint32(nil, v) }

// fakeNLDEV answers RDMA_NLDEV_CMD_GET dumps with its devices (mlx5_0
// with DIM off, old0 from a kernel without DEV_DIM) and applies SETs.
type fakeNLDEV struct {
	dim    bool
	sets   [][]byte
	shared bool
	busy   bool // SYS_SET answers EBUSY: another netns exists
}

func (f *fakeNLDEV) handle(reqs []netlink.Message) ([]netlink.Message, error) {
	req := reqs[0]
	switch req.Header.Type {
	case 5<<10 + 1:
		if req.Header.Flags&netlink.Dump == 0 {
			return nltest.Error(int(syscall.EINVAL), reqs)
		}
		dim := byte(0)
		if f.dim {
			dim = 1
		}
		return nltest.Multipart([]netlink.Message{
			{Header: req.Header, Data: bytes.Join([][]byte{nla(1, u32(3)), nla(2, []byte("mlx5_0\x00")), nla(84, []byte{dim})}, nil)},
			{Header: req.Header, Data: bytes.Join([][]byte{nla(1, u32(7)), nla(2, []byte("old0\x00"))}, nil)},
			{Header: req.Header, Data: make([]byte, 4)}, // becomes NLMSG_DONE, error 0
		})
	case 5<<10 + 6: // RDMA_NLDEV_CMD_SYS_GET
		v := byte(0)
		if f.shared {
			v = 1
		}
		return []netlink.Message{{Header: req.Header, Data: bytes.Join([][]byte{nla(66, []byte{v}), nla(67, []byte{0})}, nil)}}, nil
	case 5<<10 + 7: // RDMA_NLDEV_CMD_SYS_SET
		if f.busy {
			return nltest.Error(int(syscall.EBUSY), reqs)
		}
		f.sets = append(f.sets, req.Data)
		f.shared = bytes.Equal(req.Data, nla(66, []byte{1}))
		return []netlink.Message{{Header: netlink.Header{Type: netlink.Error, Sequence: req.Header.Sequence, PID: req.Header.PID}, Data: make([]byte, 4)}}, nil
	case 5<<10 + 2:
		if req.Header.Flags&netlink.Acknowledge == 0 {
			return nltest.Error(int(syscall.EINVAL), reqs)
		}
		f.sets = append(f.sets, req.Data)
		f.dim = bytes.Contains(req.Data, nla(84, []byte{1}))
		return []netlink.Message{{Header: netlink.Header{Type: netlink.Error, Sequence: req.Header.Sequence, PID: req.Header.PID}, Data: make([]byte, 4)}}, nil
	}
	return nltest.Error(int(syscall.EOPNOTSUPP), reqs)
}

func TestDevicesAndSetDIM(t *testing.T) {
	f := &fakeNLDEV{}
	c := NewConn(nltest.Dial(f.handle))
	defer c.Close()
	devs, err := c.Devices()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Device{"mlx5_0": {Index: 3, Name: "mlx5_0", HasDIM: true}, "old0": {Index: 7, Name: "old0"}}
	if diff := cmp.Diff(want, devs); diff != "" {
		t.Fatalf("Devices (-want +got):\n%s", diff)
	}
	if err := c.SetDIM(devs["mlx5_0"], true); err != nil {
		t.Fatal(err)
	}
	// RDMA_NLDEV_ATTR_DEV_INDEX (1) u32 3, RDMA_NLDEV_ATTR_DEV_DIM (84) u8 1.
	wantReq := []byte{8, 0, 1, 0, 3, 0, 0, 0, 5, 0, 84, 0, 1, 0, 0, 0}
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		t.Skip("the literal bytes are little-endian")
	}
	if len(f.sets) != 1 || !bytes.Equal(f.sets[0], wantReq) {
		t.Errorf("SET attributes = %x, want %x", f.sets, wantReq)
	}
	if devs, _ := c.Devices(); !devs["mlx5_0"].DIM {
		t.Error("DIM not on after SetDIM")
	}
	if err := c.SetDIM(devs["old0"], true); !IsUnsupported(err) {
		t.Errorf("SetDIM on a kernel without DEV_DIM = %v, want unsupported", err)
	}
}

func TestDialWithoutRDMA(t *testing.T) {
	if _, err := os.Stat("/sys/class/infiniband"); err == nil {
		t.Skip("this kernel has RDMA")
	}
	c, err := Dial()
	if err == nil {
		c.Close()
		t.Skip("NETLINK_RDMA opened although no RDMA class exists")
	}
	if !IsUnsupported(err) {
		t.Errorf("Dial on a kernel without RDMA = %v, want unsupported", err)
	}
}

func TestNetnsMode(t *testing.T) {
	f := &fakeNLDEV{shared: true}
	c := NewConn(nltest.Dial(f.handle))
	defer c.Close()
	if m, err := c.NetnsMode(); err != nil || m != NetnsShared {
		t.Fatalf("NetnsMode = %q, %v; want shared", m, err)
	}
	if err := c.SetNetnsMode(NetnsExclusive); err != nil {
		t.Fatal(err)
	}
	// RDMA_NLDEV_SYS_ATTR_NETNS_MODE (66) u8 0: 5 bytes padded to 8.
	if want := nla(66, []byte{0}); len(f.sets) != 1 || !bytes.Equal(f.sets[0], want) {
		t.Errorf("SYS_SET attributes = %x, want %x", f.sets, want)
	}
	if m, _ := c.NetnsMode(); m != NetnsExclusive {
		t.Errorf("after set: %q", m)
	}
	f.busy = true
	err := c.SetNetnsMode(NetnsShared)
	if !errors.Is(err, syscall.EBUSY) || !strings.Contains(err.Error(), "before containers start") {
		t.Errorf("SetNetnsMode with another netns = %v, want EBUSY with the hint", err)
	}
	if err := c.SetNetnsMode("private"); err == nil {
		t.Error("SetNetnsMode(private) = nil")
	}
}
