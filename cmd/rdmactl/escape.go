package main

import (
	"fmt"
	"io"
	"unicode/utf8"
)

// A safeWriter escapes what a terminal would act on in everything rdmactl
// prints: C0 controls other than newline and tab (ESC starts a terminal
// sequence), DEL, C1 controls, bidirectional controls (which reorder what
// follows, so a name can look like another), line and paragraph
// separators, and bytes that are not UTF-8. Most of what rdmactl prints
// is rdmad's data, and rdmactl trusts whatever answers on the socket only
// this far (defence in depth: rdmad checks names and labels itself). The
// escapes (\x1b, \u202e) are Go's, and inside a JSON string a \u escape
// means the same character, so --json output stays valid.
type safeWriter struct {
	w io.Writer
	// pending holds the start of a UTF-8 sequence that the next Write
	// completes (a writer may split a rune across writes).
	pending []byte
}

// A safeFile is a safeWriter over a file: isTerminal still sees its
// descriptor.
type safeFile struct {
	*safeWriter
	fd func() uintptr
}

func (f safeFile) Fd() uintptr { return f.fd() }

// newSafeWriter returns w behind a safeWriter and the function that writes
// out what it still holds (call it before exiting).
func newSafeWriter(w io.Writer) (io.Writer, func()) {
	s := &safeWriter{w: w}
	if f, ok := w.(interface{ Fd() uintptr }); ok {
		return safeFile{safeWriter: s, fd: f.Fd}, s.flush
	}
	return s, s.flush
}

func (s *safeWriter) Write(p []byte) (int, error) {
	buf := p
	if len(s.pending) > 0 {
		buf = append(s.pending, p...)
		s.pending = nil
	}
	out := make([]byte, 0, len(buf)+16)
	for i := 0; i < len(buf); {
		c := buf[i]
		if c < utf8.RuneSelf {
			if c == '\n' || c == '\t' || (c >= 0x20 && c != 0x7f) {
				out = append(out, c)
			} else {
				out = fmt.Appendf(out, `\x%02x`, c)
			}
			i++
			continue
		}
		if !utf8.FullRune(buf[i:]) {
			// The rest of the rune may come with the next write.
			s.pending = append([]byte(nil), buf[i:]...)
			break
		}
		r, size := utf8.DecodeRune(buf[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			out = fmt.Appendf(out, `\x%02x`, c)
		case unsafeRune(r):
			out = fmt.Appendf(out, `\u%04x`, r)
		default:
			out = append(out, buf[i:i+size]...)
		}
		i += size
	}
	if _, err := s.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// flush writes an incomplete UTF-8 sequence still held, escaped.
func (s *safeWriter) flush() {
	if len(s.pending) == 0 {
		return
	}
	out := make([]byte, 0, 4*len(s.pending))
	for _, c := range s.pending {
		out = fmt.Appendf(out, `\x%02x`, c)
	}
	s.pending = nil
	s.w.Write(out)
}

// unsafeRune reports whether r, valid UTF-8 above ASCII, is a C1 control,
// a bidirectional control or a line or paragraph separator.
func unsafeRune(r rune) bool {
	switch {
	case r >= 0x80 && r <= 0x9f: // C1
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f: // ALM, LRM, RLM
		return true
	case r >= 0x202a && r <= 0x202e: // LRE, RLE, PDF, LRO, RLO
		return true
	case r >= 0x2066 && r <= 0x2069: // LRI, RLI, FSI, PDI
		return true
	case r == 0x2028, r == 0x2029: // line and paragraph separators
		return true
	}
	return false
}

// rawWriter returns the writer under w's safeWriter: for the control
// characters rdmactl writes itself (a progress line's carriage return),
// never for text that comes from rdmad.
func rawWriter(w io.Writer) io.Writer {
	switch v := w.(type) {
	case safeFile:
		return v.safeWriter.w
	case *safeWriter:
		return v.w
	}
	return w
}
