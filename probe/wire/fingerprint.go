package wire

import (
	"encoding/binary"
	"fmt"
	"unicode"
	"unicode/utf8"
)

// Extension types this version defines. Neither is critical: a version-2
// node that predates them skips both and goes on answering.
const (
	// ExtFingerprint carries the sender's node fingerprint (Fingerprint).
	ExtFingerprint = 0x0001
	// ExtPadding is zeros a querier adds after its fingerprint so that a
	// query is as large as the largest answer it asks for: the control
	// endpoint then never sends more than it received (plus a tag).
	ExtPadding = 0x0002
)

// Bounds of a fingerprint.
const (
	// MaxFingerprint bounds the value of an ExtFingerprint extension.
	// Ports that do not fit are left out and counted (Omitted).
	MaxFingerprint = 800
	// MaxFingerprintPorts bounds the ports one fingerprint describes.
	MaxFingerprintPorts = 8
	// MaxFingerprintString bounds every string of a fingerprint, in bytes.
	MaxFingerprintString = 64
	// QueryExtArea is the extension area of a query that carries a
	// fingerprint: the fingerprint and its padding together.
	QueryExtArea = 4 + MaxFingerprint + 4
)

// A Fingerprint describes the sending node as far as its peers need to
// compare settings that must agree along a path: per probe port its MTUs,
// link layer, firmware, driver, RoCE and QoS settings, and node-wide its
// kernel and rdmad versions. Empty strings and zero numbers are unknown.
type Fingerprint struct {
	Version string // rdmad's version
	Kernel  string // kernel release (uname -r)
	// Omitted counts the sender's probe ports that did not fit.
	Omitted int
	Ports   []FingerprintPort
}

// A FingerprintPort is one probe port of the sender.
type FingerprintPort struct {
	// Index is the port's index among the sender's probe ports: the one a
	// control answer names in its Index field.
	Index     uint8
	Key       string // "mlx5_0/1"
	Netdev    string
	NetdevMTU uint32 // bytes
	ActiveMTU uint16 // bytes (256..4096), the port attribute
	LinkLayer string // "InfiniBand", "Ethernet"
	FWVer     string
	Driver    string
	// ToS and RoCEMode are the RoCE settings of rdma_cm in force (ToS is
	// valid when HasToS); Trust and PFC the QoS of the netdev ("dscp",
	// "3,4" or "none"), as rdmad's policy targets observed them.
	HasToS   bool
	ToS      uint8
	RoCEMode string
	Trust    string
	PFC      string
	// RateMbps is the port's link rate in Mb/s (100 Gb/s: 100000), 0
	// when unknown (a node that predates the field sends none).
	RateMbps uint32
}

// Sub-field tags of the fingerprint value: tag (1 byte), length (1 byte),
// value. Node fields may come anywhere; port fields belong to the port
// that the last tagPort started. A receiver skips tags it does not know.
const (
	tagVersion   = 0x01
	tagKernel    = 0x02
	tagOmitted   = 0x03
	tagPort      = 0x10 // index (1 byte) then the key
	tagNetdev    = 0x11
	tagNetdevMTU = 0x12 // 4 bytes
	tagActiveMTU = 0x13 // 2 bytes
	tagLinkLayer = 0x14
	tagFWVer     = 0x15
	tagDriver    = 0x16
	tagToS       = 0x17 // 1 byte
	tagRoCEMode  = 0x18
	tagTrust     = 0x19
	tagPFC       = 0x1a
	tagRate      = 0x1b // 4 bytes, Mb/s
)

// printable reports whether r may appear in a string the wire carries:
// what a terminal, a journal line or a D-Bus string shows as text. It
// refuses C0 and C1 controls, DEL, format characters (bidi overrides and
// isolates, zero-width characters), line and paragraph separators, spaces
// other than U+0020, unassigned code points and U+FFFD (which also stands
// for invalid UTF-8 here).
func printable(r rune) bool {
	return r == ' ' || (r != utf8.RuneError && unicode.IsPrint(r))
}

// Printable reports whether s is valid UTF-8 of printable characters only
// (see printable): what every string a decoder of this package accepts is.
func Printable(s string) bool {
	for _, r := range s {
		if !printable(r) {
			return false
		}
	}
	return true
}

func printableBytes(b []byte) bool {
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if !printable(r) {
			return false
		}
		b = b[n:]
	}
	return true
}

// clean makes s fit a fingerprint: at most MaxFingerprintString bytes cut
// at a rune boundary, every character that is not printable replaced, so
// that what a peer shows in a terminal is text.
func clean(s string) string {
	if len(s) <= MaxFingerprintString && Printable(s) {
		// Already fit (a node's own, nearly always): no copy. Marshal
		// runs every few seconds (probe's fingerprintEvery), and made
		// a dozen strings each time.
		return s
	}
	out := make([]byte, 0, min(len(s), MaxFingerprintString))
	for _, r := range s {
		if !printable(r) {
			r = '?'
		}
		if len(out)+utf8.RuneLen(r) > MaxFingerprintString {
			break
		}
		out = utf8.AppendRune(out, r)
	}
	return string(out)
}

func appendStr(b []byte, tag byte, s string) []byte {
	if s == "" {
		return b
	}
	s = clean(s)
	b = append(b, tag, byte(len(s)))
	return append(b, s...)
}

func (p *FingerprintPort) append(b []byte) []byte {
	key := clean(p.Key)
	b = append(b, tagPort, byte(1+len(key)), p.Index)
	b = append(b, key...)
	b = appendStr(b, tagNetdev, p.Netdev)
	if p.NetdevMTU != 0 {
		b = append(b, tagNetdevMTU, 4)
		b = binary.BigEndian.AppendUint32(b, p.NetdevMTU)
	}
	if p.ActiveMTU != 0 {
		b = append(b, tagActiveMTU, 2)
		b = binary.BigEndian.AppendUint16(b, p.ActiveMTU)
	}
	b = appendStr(b, tagLinkLayer, p.LinkLayer)
	b = appendStr(b, tagFWVer, p.FWVer)
	b = appendStr(b, tagDriver, p.Driver)
	if p.HasToS {
		b = append(b, tagToS, 1, p.ToS)
	}
	b = appendStr(b, tagRoCEMode, p.RoCEMode)
	b = appendStr(b, tagTrust, p.Trust)
	b = appendStr(b, tagPFC, p.PFC)
	if p.RateMbps != 0 {
		b = append(b, tagRate, 4)
		b = binary.BigEndian.AppendUint32(b, p.RateMbps)
	}
	return b
}

// Marshal returns f's wire form, at most MaxFingerprint bytes: the node
// fields, then as many ports (at most MaxFingerprintPorts) as fit, in
// order; the ports left out are counted in the omitted field. Strings are
// cut to MaxFingerprintString bytes and control characters replaced.
func (f *Fingerprint) Marshal() []byte {
	b := make([]byte, 0, MaxFingerprint)
	b = appendStr(b, tagVersion, f.Version)
	b = appendStr(b, tagKernel, f.Kernel)
	const omittedLen = 3
	omitted := f.Omitted
	for i := range f.Ports {
		if i >= MaxFingerprintPorts {
			omitted += len(f.Ports) - i
			break
		}
		next := f.Ports[i].append(b)
		if len(next) > MaxFingerprint-omittedLen {
			omitted += len(f.Ports) - i
			break
		}
		b = next
	}
	if omitted > 0 {
		b = append(b, tagOmitted, 1, byte(min(omitted, 255)))
	}
	return b
}

// DecodeFingerprint parses an ExtFingerprint value. It fails (wrapping
// ErrMalformed) for a value that overruns, exceeds the bounds, carries a
// port field before any port, a number of the wrong size, or a string
// that is not valid UTF-8 of printable characters (Printable); unknown
// tags are skipped.
func DecodeFingerprint(b []byte) (Fingerprint, error) {
	var f Fingerprint
	err := parseFingerprint(b, &f)
	return f, err
}

// CheckFingerprint reports whether b is an ExtFingerprint value that
// DecodeFingerprint takes, without allocating: Decode checks every
// fingerprint a message carries with it, so that a message with a bad one
// is malformed as a whole.
func CheckFingerprint(b []byte) error { return parseFingerprint(b, nil) }

// parseFingerprint parses b into f, or only checks it when f is nil.
func parseFingerprint(b []byte, f *Fingerprint) error {
	if len(b) > MaxFingerprint {
		return fmt.Errorf("%w: fingerprint of %d bytes, at most %d", ErrMalformed, len(b), MaxFingerprint)
	}
	var (
		p       *FingerprintPort
		scratch FingerprintPort // the port fields' target when only checking
		indices [MaxFingerprintPorts]uint8
		ports   int
		check   Fingerprint // the node fields' target when only checking
	)
	node := f
	if node == nil {
		node = &check
	}
	for len(b) > 0 {
		if len(b) < 2 {
			return fmt.Errorf("%w: stray byte after the fingerprint's fields", ErrMalformed)
		}
		tag, n := b[0], int(b[1])
		if 2+n > len(b) {
			return fmt.Errorf("%w: fingerprint field %#x overruns", ErrMalformed, tag)
		}
		v := b[2 : 2+n]
		b = b[2+n:]
		str := func(dst *string) error {
			if len(v) > MaxFingerprintString || !printableBytes(v) {
				return fmt.Errorf("%w: fingerprint field %#x is not a short printable string", ErrMalformed, tag)
			}
			if f != nil {
				*dst = string(v)
			}
			return nil
		}
		if tag >= tagPort && tag < 0x20 && tag != tagPort && p == nil {
			return fmt.Errorf("%w: fingerprint field %#x before any port", ErrMalformed, tag)
		}
		var err error
		switch tag {
		case tagVersion:
			err = str(&node.Version)
		case tagKernel:
			err = str(&node.Kernel)
		case tagOmitted:
			if n != 1 {
				return fmt.Errorf("%w: fingerprint omitted-ports field of %d bytes", ErrMalformed, n)
			}
			node.Omitted = int(v[0])
		case tagPort:
			if n < 1 {
				return fmt.Errorf("%w: fingerprint port without an index", ErrMalformed)
			}
			if ports >= MaxFingerprintPorts {
				return fmt.Errorf("%w: fingerprint of more than %d ports", ErrMalformed, MaxFingerprintPorts)
			}
			for _, q := range indices[:ports] {
				if q == v[0] {
					return fmt.Errorf("%w: fingerprint port %d twice", ErrMalformed, v[0])
				}
			}
			indices[ports] = v[0]
			ports++
			if f != nil {
				f.Ports = append(f.Ports, FingerprintPort{Index: v[0]})
				p = &f.Ports[len(f.Ports)-1]
			} else {
				scratch = FingerprintPort{Index: v[0]}
				p = &scratch
			}
			v = v[1:]
			err = str(&p.Key)
		case tagNetdev:
			err = str(&p.Netdev)
		case tagNetdevMTU:
			if n != 4 {
				return fmt.Errorf("%w: fingerprint MTU of %d bytes", ErrMalformed, n)
			}
			p.NetdevMTU = binary.BigEndian.Uint32(v)
		case tagActiveMTU:
			if n != 2 {
				return fmt.Errorf("%w: fingerprint active MTU of %d bytes", ErrMalformed, n)
			}
			p.ActiveMTU = binary.BigEndian.Uint16(v)
		case tagLinkLayer:
			err = str(&p.LinkLayer)
		case tagFWVer:
			err = str(&p.FWVer)
		case tagDriver:
			err = str(&p.Driver)
		case tagToS:
			if n != 1 {
				return fmt.Errorf("%w: fingerprint ToS of %d bytes", ErrMalformed, n)
			}
			p.HasToS, p.ToS = true, v[0]
		case tagRoCEMode:
			err = str(&p.RoCEMode)
		case tagTrust:
			err = str(&p.Trust)
		case tagPFC:
			err = str(&p.PFC)
		case tagRate:
			if n != 4 {
				return fmt.Errorf("%w: fingerprint link rate of %d bytes", ErrMalformed, n)
			}
			p.RateMbps = binary.BigEndian.Uint32(v)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Fingerprint returns the fingerprint m carries: ok is false when it
// carries none (a version-1 message, or a node that predates them), err
// set when the one it carries is malformed.
func (m *Message) Fingerprint() (f Fingerprint, ok bool, err error) {
	for _, e := range m.Ext {
		if e.Type == ExtFingerprint {
			f, err = DecodeFingerprint(e.Value)
			return f, err == nil, err
		}
	}
	return f, false, nil
}

// WithFingerprint returns the extensions of a query carrying the encoded
// fingerprint fp (Marshal's output), padded to QueryExtArea bytes so that
// an answer with a fingerprint is never larger than the query plus a tag.
func WithFingerprint(fp []byte) []Ext {
	if len(fp) > MaxFingerprint {
		fp = fp[:0]
	}
	return []Ext{{Type: ExtFingerprint, Value: fp}, {Type: ExtPadding, Value: make([]byte, MaxFingerprint-len(fp))}}
}
