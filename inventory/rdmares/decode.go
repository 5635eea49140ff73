package rdmares

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// A Kind is a type of RDMA object the kernel tracks.
type Kind int

// The kinds this package reads, each with its dump.
const (
	QP Kind = iota
	CQ
	MR
	PD
)

// Kinds lists every Kind, in the order Read dumps them.
var Kinds = []Kind{QP, CQ, MR, PD}

// String names k as rdma(8) does: qp, cq, mr, pd.
func (k Kind) String() string {
	switch k {
	case QP:
		return "qp"
	case CQ:
		return "cq"
	case MR:
		return "mr"
	case PD:
		return "pd"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// table is the dump of one kind: its command and the attributes of its
// table and entries.
type table struct {
	cmd, attr, entry uint16
}

var tables = map[Kind]table{
	QP: {cmdResQPGet, attrResQP, attrResQPEntry},
	CQ: {cmdResCQGet, attrResCQ, attrResCQEntry},
	MR: {cmdResMRGet, attrResMR, attrResMREntry},
	PD: {cmdResPDGet, attrResPD, attrResPDEntry},
}

// An Object is one RDMA object the kernel tracks.
type Object struct {
	Kind Kind
	// DevIndex and Device name the RDMA device it is on.
	DevIndex uint32
	Device   string
	// PID is the process that created it; 0 for a kernel object and for
	// a process that is exiting (the kernel then sends no pid).
	PID uint32
	// KernName is the kernel owner (a module name such as "ib_core") of a
	// kernel object, "" for a process's.
	KernName string
	// Length is a memory region's length in bytes, 0 for other kinds.
	Length uint64
}

// A Device is one RDMA device as RDMA_NLDEV_CMD_RES_GET reports it.
type Device struct {
	Index uint32
	Name  string
	// Tracked is the kernel's count of each object type it tracks on the
	// device ("qp", "mr", "cm_id", ...).
	Tracked map[string]uint64
}

// Limits on what one read accepts from the kernel, so that a node with an
// absurd number of objects (or a bug) cannot make the reader grow without
// bound.
const (
	// MaxObjects bounds the objects of one Read, all kinds and devices.
	MaxObjects = 1 << 20
	// MaxDevices bounds the devices of one Read.
	MaxDevices = 1024
)

// errMalformed is the root of every decoding error: the bytes are not what
// the kernel sends.
var errMalformed = errors.New("malformed RDMA netlink message")

func malformed(format string, a ...any) error {
	return fmt.Errorf("%w: %s", errMalformed, fmt.Sprintf(format, a...))
}

// An attr is one netlink attribute.
type attr struct {
	typ  uint16 // without the NLA_F_NESTED and byte-order flags
	data []byte
}

// parseAttrs splits b into attributes. Every attribute must fit whole;
// padding after the last one is allowed.
func parseAttrs(b []byte) ([]attr, error) {
	var out []attr
	for len(b) > 0 {
		if len(b) < unix.SizeofNlAttr {
			return nil, malformed("%d stray bytes after the last attribute", len(b))
		}
		n := int(binary.NativeEndian.Uint16(b[0:2]))
		typ := binary.NativeEndian.Uint16(b[2:4]) &^ (unix.NLA_F_NESTED | unix.NLA_F_NET_BYTEORDER)
		if n < unix.SizeofNlAttr || n > len(b) {
			return nil, malformed("attribute %d claims %d bytes, %d left", typ, n, len(b))
		}
		out = append(out, attr{typ: typ, data: b[unix.SizeofNlAttr:n]})
		adv := nlaAlign(n)
		if adv > len(b) {
			adv = len(b)
		}
		b = b[adv:]
	}
	return out, nil
}

func nlaAlign(n int) int { return (n + unix.NLA_ALIGNTO - 1) &^ (unix.NLA_ALIGNTO - 1) }

func u32(a attr) (uint32, error) {
	if len(a.data) != 4 {
		return 0, malformed("attribute %d: %d bytes, want a u32", a.typ, len(a.data))
	}
	return binary.NativeEndian.Uint32(a.data), nil
}

func u64(a attr) (uint64, error) {
	if len(a.data) != 8 {
		return 0, malformed("attribute %d: %d bytes, want a u64", a.typ, len(a.data))
	}
	return binary.NativeEndian.Uint64(a.data), nil
}

// maxString bounds the strings this package keeps: device names
// (IB_DEVICE_NAME_MAX 64), kernel owners and summary names are shorter.
const maxString = 64

// str decodes a NUL-terminated string attribute, made safe to print:
// characters that are not graphic become '?'.
func str(a attr) (string, error) {
	s := a.data
	i := 0
	for i < len(s) && s[i] != 0 {
		i++
	}
	if i == len(s) {
		return "", malformed("attribute %d: string without its NUL", a.typ)
	}
	if i > maxString {
		return "", malformed("attribute %d: a %d-byte string, longer than %d", a.typ, i, maxString)
	}
	return Printable(string(s[:i])), nil
}

// Printable returns s with every character that is not graphic (control
// characters, escapes, invalid UTF-8) replaced by '?', so that a name a
// process chose for itself cannot drive a terminal.
func Printable(s string) string {
	ok := true
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsGraphic(r) {
			ok = false
			break
		}
	}
	if ok {
		return s
	}
	return strings.Map(func(r rune) rune {
		if r == utf8.RuneError || !unicode.IsGraphic(r) {
			return '?'
		}
		return r
	}, s)
}

// handle is the device handle every reply carries (fill_nldev_handle).
type handle struct {
	index   uint32
	name    string
	hasIdx  bool
	hasName bool
}

func (h *handle) take(a attr) (bool, error) {
	var err error
	switch a.typ {
	case attrDevIndex:
		h.index, err = u32(a)
		h.hasIdx = true
	case attrDevName:
		h.name, err = str(a)
		h.hasName = true
	default:
		return false, nil
	}
	return true, err
}

func (h *handle) check() error {
	if !h.hasIdx || !h.hasName {
		return malformed("a reply without its device index and name")
	}
	return nil
}

// decodeDevice decodes the attributes of one RDMA_NLDEV_CMD_RES_GET reply.
func decodeDevice(payload []byte) (Device, error) {
	attrs, err := parseAttrs(payload)
	if err != nil {
		return Device{}, err
	}
	var h handle
	d := Device{Tracked: map[string]uint64{}}
	for _, a := range attrs {
		if ok, err := h.take(a); ok {
			if err != nil {
				return Device{}, err
			}
			continue
		}
		if a.typ == attrResSummary {
			if err := decodeSummary(a.data, d.Tracked); err != nil {
				return Device{}, err
			}
		}
	}
	if err := h.check(); err != nil {
		return Device{}, err
	}
	d.Index, d.Name = h.index, h.name
	return d, nil
}

// decodeSummary decodes RDMA_NLDEV_ATTR_RES_SUMMARY: entries of a name and
// a count.
func decodeSummary(b []byte, into map[string]uint64) error {
	entries, err := parseAttrs(b)
	if err != nil {
		return fmt.Errorf("resource summary: %w", err)
	}
	for _, e := range entries {
		if e.typ != attrResSummaryEntry {
			continue
		}
		attrs, err := parseAttrs(e.data)
		if err != nil {
			return fmt.Errorf("resource summary entry: %w", err)
		}
		var name string
		var curr uint64
		var hasName, hasCurr bool
		for _, a := range attrs {
			switch a.typ {
			case attrResSummaryName:
				name, err = str(a)
				hasName = true
			case attrResSummaryCurr:
				curr, err = u64(a)
				hasCurr = true
			}
			if err != nil {
				return fmt.Errorf("resource summary entry: %w", err)
			}
		}
		if !hasName || !hasCurr {
			return malformed("a resource summary entry without its name or count")
		}
		if len(into) >= 64 {
			return malformed("more than 64 resource summary entries")
		}
		into[name] = curr
	}
	return nil
}

// decodeObjects decodes one reply of kind's dump and appends its objects to
// out: the device handle, then the table of entries.
func decodeObjects(kind Kind, payload []byte, out []Object) ([]Object, error) {
	t, ok := tables[kind]
	if !ok {
		return out, fmt.Errorf("rdmares: no dump for %v", kind)
	}
	attrs, err := parseAttrs(payload)
	if err != nil {
		return out, err
	}
	var h handle
	var entries []attr
	for _, a := range attrs {
		if ok, err := h.take(a); ok {
			if err != nil {
				return out, err
			}
			continue
		}
		if a.typ == t.attr {
			if entries, err = parseAttrs(a.data); err != nil {
				return out, fmt.Errorf("%v table: %w", kind, err)
			}
		}
	}
	if err := h.check(); err != nil {
		return out, err
	}
	for _, e := range entries {
		if e.typ != t.entry {
			continue
		}
		o, err := decodeEntry(kind, e.data)
		if err != nil {
			return out, fmt.Errorf("%s %v entry: %w", h.name, kind, err)
		}
		o.DevIndex, o.Device = h.index, h.name
		if len(out) >= MaxObjects {
			return out, fmt.Errorf("rdmares: more than %d RDMA objects; not reading further", MaxObjects)
		}
		out = append(out, o)
	}
	return out, nil
}

// decodeEntry decodes one object: its owner (RES_PID or RES_KERN_NAME)
// and, for a memory region, its length.
func decodeEntry(kind Kind, b []byte) (Object, error) {
	attrs, err := parseAttrs(b)
	if err != nil {
		return Object{}, err
	}
	o := Object{Kind: kind}
	hasLen := false
	for _, a := range attrs {
		switch a.typ {
		case attrResPID:
			o.PID, err = u32(a)
		case attrResKernName:
			o.KernName, err = str(a)
			if err == nil && o.KernName == "" {
				err = malformed("an empty kernel owner name")
			}
		case attrResMRLen:
			if kind == MR {
				o.Length, err = u64(a)
				hasLen = true
			}
		}
		if err != nil {
			return Object{}, err
		}
	}
	if o.PID != 0 && o.KernName != "" {
		return Object{}, malformed("an object with both a pid (%d) and a kernel owner (%q)", o.PID, o.KernName)
	}
	if kind == MR && !hasLen {
		return Object{}, malformed("a memory region without its length")
	}
	return o, nil
}
