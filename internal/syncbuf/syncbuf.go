// Package syncbuf provides a Buffer that several goroutines may write while
// another reads it: the log sink a test shares with the daemon's goroutines
// or a child process's output copier.
package syncbuf

import (
	"bytes"
	"sync"
)

// A Buffer is a bytes.Buffer guarded by a mutex. The zero value is ready.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p; it implements io.Writer.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
