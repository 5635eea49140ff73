package doctor

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Offsets and bits of PCI configuration space, as the kernel's
// include/uapi/linux/pci_regs.h names them.
const (
	pciStatus        = 0x06 // PCI_STATUS
	pciStatusCapList = 0x10 // PCI_STATUS_CAP_LIST
	pciCapList       = 0x34 // PCI_CAPABILITY_LIST
	pciCapIDExp      = 0x10 // PCI_CAP_ID_EXP
	pciExpDevCtl     = 8    // PCI_EXP_DEVCTL
	pciExpReadRQ     = 0x7000
	pciCfgSpaceSize  = 256  // PCI_CFG_SPACE_SIZE: extended capabilities start here
	pciCfgSpaceExp   = 4096 // PCI_CFG_SPACE_EXP_SIZE
	pciExtCapIDACS   = 0x0d // PCI_EXT_CAP_ID_ACS
	pciACSCtrl       = 0x06 // PCI_ACS_CTRL
	pciACSSV         = 0x01 // PCI_ACS_SV: Source Validation
	pciACSTB         = 0x02 // PCI_ACS_TB: Translation Blocking
	pciACSRR         = 0x04 // PCI_ACS_RR: P2P Request Redirect
	pciACSCR         = 0x08 // PCI_ACS_CR: P2P Completion Redirect
	pciACSUF         = 0x10 // PCI_ACS_UF: Upstream Forwarding
	pciACSEC         = 0x20 // PCI_ACS_EC: P2P Egress Control
	pciACSDT         = 0x40 // PCI_ACS_DT: Direct Translated P2P
)

// errShortConfig says that sysfs gave less of a function's configuration
// space than the register needs: the kernel gives the first 64 bytes (the
// standard header) to anyone, the rest only to CAP_SYS_ADMIN.
var errShortConfig = errors.New("configuration space truncated")

// A pciConfig is a PCI function's configuration space as
// /sys/bus/pci/devices/<addr>/config gives it: 4096 bytes of a PCIe
// function to root (256 of a function without extended space), 64 to
// anyone else (the kernel's pci_read_config).
type pciConfig struct {
	addr string
	b    []byte
}

// readConfig reads the configuration space of the PCI function at dir (a
// sysfs device directory).
func readConfig(dir string) (pciConfig, error) {
	b, err := os.ReadFile(filepath.Join(dir, "config"))
	if err != nil {
		return pciConfig{}, err
	}
	return pciConfig{addr: filepath.Base(dir), b: b}, nil
}

func (c pciConfig) u16(off int) (uint16, error) {
	if off < 0 || off+2 > len(c.b) {
		return 0, c.short(off + 2)
	}
	return binary.LittleEndian.Uint16(c.b[off:]), nil
}

func (c pciConfig) u32(off int) (uint32, error) {
	if off < 0 || off+4 > len(c.b) {
		return 0, c.short(off + 4)
	}
	return binary.LittleEndian.Uint32(c.b[off:]), nil
}

func (c pciConfig) short(need int) error {
	return fmt.Errorf("%s: %w: sysfs gave %d bytes, the register needs %d (reading past the first 64 bytes needs root)",
		c.addr, errShortConfig, len(c.b), need)
}

// capability returns the offset of capability id in the standard list,
// 0 when the function has none.
func (c pciConfig) capability(id byte) (int, error) {
	st, err := c.u16(pciStatus)
	if err != nil {
		return 0, err
	}
	if st&pciStatusCapList == 0 {
		return 0, nil
	}
	if len(c.b) <= pciCapList {
		return 0, c.short(pciCapList + 1)
	}
	off := int(c.b[pciCapList]) &^ 3
	// 48 capabilities fill the 192 bytes after the header: a longer
	// chain is a loop (the kernel's PCI_FIND_CAP_TTL).
	for ttl := 48; off >= 0x40 && ttl > 0; ttl-- {
		if off+2 > len(c.b) {
			return 0, c.short(off + 2)
		}
		switch c.b[off] {
		case id:
			return off, nil
		case 0xff:
			return 0, nil
		}
		off = int(c.b[off+1]) &^ 3
	}
	return 0, nil
}

// extCapability returns the offset of extended capability id (at 256 and
// above), 0 when the function has none.
func (c pciConfig) extCapability(id uint16) (int, error) {
	// Root reads the whole space, whose size the kernel chose: 256 bytes
	// for a function without extended space (conventional PCI, a
	// virtio device), 4096 for PCIe. Anyone else reads 64.
	if len(c.b) == pciCfgSpaceSize {
		return 0, nil
	}
	off := pciCfgSpaceSize
	for ttl := (pciCfgSpaceExp - pciCfgSpaceSize) / 8; ttl > 0; ttl-- {
		h, err := c.u32(off)
		if err != nil {
			return 0, err
		}
		// A function without extended capabilities reads 0 (or all
		// ones where there is no extended space, conventional PCI).
		if h == 0 || h == 0xffffffff {
			return 0, nil
		}
		if uint16(h) == id {
			return off, nil
		}
		off = int(h>>20) &^ 3
		if off < pciCfgSpaceSize {
			return 0, nil
		}
	}
	return 0, nil
}

// maxReadReq returns the function's Max_Read_Request_Size in bytes
// (Device Control bits 14:12, 128 << n), 0 when the function has no PCIe
// capability; the encodings 6 and 7 are reserved and returned as they
// decode.
func (c pciConfig) maxReadReq() (int, error) {
	off, err := c.capability(pciCapIDExp)
	if err != nil || off == 0 {
		return 0, err
	}
	ctl, err := c.u16(off + pciExpDevCtl)
	if err != nil {
		return 0, err
	}
	return 128 << ((ctl & pciExpReadRQ) >> 12), nil
}

// acsControl returns the ACS Control register, and whether the function
// has the ACS capability.
func (c pciConfig) acsControl() (uint16, bool, error) {
	off, err := c.extCapability(pciExtCapIDACS)
	if err != nil || off == 0 {
		return 0, false, err
	}
	ctl, err := c.u16(off + pciACSCtrl)
	return ctl, err == nil, err
}

// acsString says an ACS Control register as lspci -vvv's ACSCtl does:
// "SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-".
func acsString(ctl uint16) string {
	var out []string
	for _, b := range []struct {
		bit  uint16
		name string
	}{{pciACSSV, "SrcValid"}, {pciACSTB, "TransBlk"}, {pciACSRR, "ReqRedir"}, {pciACSCR, "CmpltRedir"},
		{pciACSUF, "UpstreamFwd"}, {pciACSEC, "EgressCtrl"}, {pciACSDT, "DirectTrans"}} {
		s := "-"
		if ctl&b.bit != 0 {
			s = "+"
		}
		out = append(out, b.name+s)
	}
	return strings.Join(out, " ")
}
