package rdmares

import (
	"encoding/binary"
	"fmt"
	"syscall"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// A dump collects the replies of one dump request: the devices of
// RDMA_NLDEV_CMD_RES_GET or the objects of one kind's dump.
type dump struct {
	// summary: the dump is RDMA_NLDEV_CMD_RES_GET; otherwise kind's.
	summary bool
	kind    Kind

	devices []Device
	objects []Object
}

// cmd returns the RDMA netlink operation of d.
func (d *dump) cmd() uint16 {
	if d.summary {
		return cmdResGet
	}
	return tables[d.kind].cmd
}

// message decodes one message of the kernel's answer: a reply, or the
// NLMSG_DONE or acknowledgement that ends the dump (done). netlink.Conn has
// checked its framing, its sequence number and port id, and turned a
// kernel error (NLMSG_ERROR's or NLMSG_DONE's code) into an error.
func (d *dump) message(m netlink.Message) (done bool, err error) {
	want := msgType(clientNLDEV, int(d.cmd()))
	switch typ := uint16(m.Header.Type); typ {
	case unix.NLMSG_NOOP:
		return false, nil
	case unix.NLMSG_DONE:
		// Without NLM_F_MULTI (netlink.Conn ends the dump at a
		// multipart one, checking its code): the end too.
		return true, doneError(m.Data)
	case unix.NLMSG_ERROR:
		// An acknowledgement (netlink.Conn returns the others as
		// errors): the end too.
		return true, nil
	case want:
		return false, d.reply(m.Data)
	default:
		return false, malformed("message type %#x, want %#x (RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, %d))", typ, want, d.cmd())
	}
}

func (d *dump) reply(payload []byte) error {
	if !d.summary {
		var err error
		d.objects, err = decodeObjects(d.kind, payload, d.objects)
		return err
	}
	dev, err := decodeDevice(payload)
	if err != nil {
		return err
	}
	if len(d.devices) >= MaxDevices {
		return fmt.Errorf("rdmares: more than %d RDMA devices; not reading further", MaxDevices)
	}
	d.devices = append(d.devices, dev)
	return nil
}

// doneError returns the error code at the start of an NLMSG_DONE payload
// (a negative errno; 0 is none). An NLMSG_DONE without one (older kernels)
// means success.
func doneError(payload []byte) error {
	if len(payload) < 4 {
		return nil
	}
	code := int32(binary.NativeEndian.Uint32(payload[0:4]))
	if code >= 0 {
		return nil
	}
	return syscall.Errno(-code)
}
