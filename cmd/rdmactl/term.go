package main

import (
	"io"
	"os"
	"strconv"

	"golang.org/x/term"
)

// isTerminal reports whether w is a terminal: a file whose descriptor
// answers TCGETS (no cgo, as isatty does it). Tables shorten long texts only
// for a terminal; a pipe, a file or a journal gets every byte.
func isTerminal(w io.Writer) bool {
	f, ok := w.(interface{ Fd() uintptr })
	return ok && term.IsTerminal(int(f.Fd()))
}

// defaultWidth is the width of a terminal that does not say its size (a
// serial console, some pseudo-terminals): the width everyone has.
const defaultWidth = 80

// terminalWidth returns the columns of the terminal w is: its window size,
// else $COLUMNS (what the shell knows of it), else defaultWidth. Tables are
// cut to it so that no line wraps.
func terminalWidth(w io.Writer) int {
	if f, ok := w.(interface{ Fd() uintptr }); ok {
		if cols, _, err := term.GetSize(int(f.Fd())); err == nil && cols > 0 {
			return cols
		}
	}
	if n, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && n > 0 {
		return n
	}
	return defaultWidth
}
