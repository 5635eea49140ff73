package main

import (
	"io"

	"golang.org/x/sys/unix"
)

// isTerminal reports whether w is a terminal: a file whose descriptor
// answers TCGETS (no cgo, as isatty does it). Tables shorten long texts only
// for a terminal; a pipe, a file or a journal gets every byte.
func isTerminal(w io.Writer) bool {
	f, ok := w.(interface{ Fd() uintptr })
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
