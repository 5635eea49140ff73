package rdmares

import (
	"encoding/binary"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// A dump collects the replies of one dump request: the devices of
// RDMA_NLDEV_CMD_RES_GET or the objects of one kind's dump.
type dump struct {
	// summary: the dump is RDMA_NLDEV_CMD_RES_GET; otherwise kind's.
	summary bool
	kind    Kind
	// seq is the request's sequence number, which every reply carries.
	seq uint32

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

// feed decodes one datagram of the kernel's answer: netlink messages, each
// a reply, or the NLMSG_DONE that ends the dump (done), or an NLMSG_ERROR.
// A kernel error is returned as its syscall.Errno, wrapped.
func (d *dump) feed(b []byte) (done bool, err error) {
	want := msgType(clientNLDEV, int(d.cmd()))
	for len(b) > 0 {
		if len(b) < unix.SizeofNlMsghdr {
			return false, malformed("%d stray bytes after the last message", len(b))
		}
		n := int(binary.NativeEndian.Uint32(b[0:4]))
		typ := binary.NativeEndian.Uint16(b[4:6])
		seq := binary.NativeEndian.Uint32(b[8:12])
		if n < unix.SizeofNlMsghdr || n > len(b) {
			return false, malformed("message claims %d bytes, %d left", n, len(b))
		}
		payload := b[unix.SizeofNlMsghdr:n]
		adv := nlmsgAlign(n)
		if adv > len(b) {
			adv = len(b)
		}
		b = b[adv:]
		if seq != d.seq {
			return false, malformed("a reply to request %d while waiting for %d", seq, d.seq)
		}
		switch typ {
		case unix.NLMSG_NOOP:
			continue
		case unix.NLMSG_DONE:
			return true, doneError(payload)
		case unix.NLMSG_ERROR:
			if err := doneError(payload); err != nil {
				return true, err
			}
			return true, nil // an acknowledgement ends it too
		case want:
			if err := d.reply(payload); err != nil {
				return false, err
			}
		default:
			return false, malformed("message type %#x, want %#x (RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, %d))", typ, want, d.cmd())
		}
	}
	return false, nil
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

func nlmsgAlign(n int) int { return (n + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1) }

// doneError returns the error code at the start of an NLMSG_DONE or
// NLMSG_ERROR payload (a negative errno; 0 is none). An NLMSG_DONE without
// one (older kernels) means success.
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
