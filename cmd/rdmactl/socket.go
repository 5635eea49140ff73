package main

import (
	"fmt"
	"io/fs"
	"os"

	"github.com/rdmad/rdmad/client/apitype"
)

// A notSocketError says that rdmactl was pointed at something that exists
// but is not a socket: dialling it would only say "connection refused", as
// if rdmad were not running.
type notSocketError struct {
	path string
	what string // "a regular file", "a directory", ...
	from string // "--socket", "RDMAD_SOCKET" or "" (the default)
}

func (e *notSocketError) Error() string {
	where := fmt.Sprintf("[daemon] socket in /etc/rdmad/rdmad.toml, %s by default", apitype.DefaultSocket)
	switch e.from {
	case "--socket":
		return fmt.Sprintf("%s (--socket) is %s, not a socket: point --socket at rdmad's socket (%s)", e.path, e.what, where)
	case "RDMAD_SOCKET":
		return fmt.Sprintf("%s (RDMAD_SOCKET) is %s, not a socket: set RDMAD_SOCKET or --socket to rdmad's socket (%s)", e.path, e.what, where)
	}
	return fmt.Sprintf("%s is %s, not a socket: restart rdmad (systemctl restart rdmad) to create its socket again, or give --socket if %s moved it",
		e.path, e.what, "[daemon] socket in /etc/rdmad/rdmad.toml")
}

// checkSocket returns a *notSocketError when path exists and is not a
// socket. Anything else (missing, not readable) is left to the dial, whose
// errors say that rdmad is not running or that access is denied.
func checkSocket(path, from string) error {
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Type() == fs.ModeSocket {
		return nil
	}
	return &notSocketError{path: path, what: fileKind(fi.Mode()), from: from}
}

func fileKind(m fs.FileMode) string {
	switch m.Type() {
	case 0:
		return "a regular file"
	case fs.ModeDir:
		return "a directory"
	case fs.ModeNamedPipe:
		return "a named pipe"
	case fs.ModeDevice | fs.ModeCharDevice:
		return "a character device"
	case fs.ModeDevice:
		return "a block device"
	}
	return "a file of mode " + m.String()
}
