package client

import (
	"fmt"
	"io"
)

// Bounds of an answer. rdmactl trusts whatever answers on the socket only
// this far: a fake server's 63 MiB reply once drove rdmactl peers to
// 17.7 GB of memory for six minutes (each "{}," of a peer list decodes to
// a few hundred bytes). A real rdmad's status at 10,000 peers is 7.6 MB and
// 450,000 JSON values (objects, arrays and the elements after a comma);
// the bounds leave four times that.
const (
	// MaxAnswerBytes bounds one JSON answer.
	MaxAnswerBytes = 32 << 20
	// MaxAnswerValues bounds the objects, arrays and list elements of one
	// JSON answer, which bound what decoding it allocates.
	MaxAnswerValues = 2_000_000
	// MaxMetricsBytes bounds GET /metrics (text, not decoded).
	MaxMetricsBytes = 64 << 20
	// maxErrorBody bounds an error answer's body.
	maxErrorBody = 64 << 10
)

// An AnswerTooLargeError means the answer went past a bound: whatever
// answers on the socket is not behaving like rdmad.
type AnswerTooLargeError struct {
	Socket, Path string
	// What is past its bound: "32 MiB" or "2000000 JSON values".
	What string
}

func (e *AnswerTooLargeError) Error() string {
	return fmt.Sprintf("rdmad at %s: the answer to %s has more than %s, more than a real rdmad sends (its status at 10,000 peers is under 8 MB); stopped reading. Is that rdmad's socket? Check with `systemctl status rdmad` and `ss -xlp | grep %s`",
		e.Socket, e.Path, e.What, e.Socket)
}

// A boundedReader passes a JSON answer on to the decoder and fails once it
// is past maxBytes, or holds more than maxValues values: it counts '{',
// '[' and ',' outside strings as the bytes go by, so that the decoder
// never holds more than the bound.
type boundedReader struct {
	r                   io.Reader
	maxBytes, maxValues int64
	bytes, values       int64
	inString, escaped   bool
	tooLarge            func(what string) error
	err                 error
}

func (b *boundedReader) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if room := b.maxBytes + 1 - b.bytes; int64(len(p)) > room {
		p = p[:room]
	}
	n, err := b.r.Read(p)
	for _, c := range p[:n] {
		switch {
		case b.inString:
			switch {
			case b.escaped:
				b.escaped = false
			case c == '\\':
				b.escaped = true
			case c == '"':
				b.inString = false
			}
		case c == '"':
			b.inString = true
		case c == '{' || c == '[' || c == ',':
			b.values++
		}
	}
	b.bytes += int64(n)
	switch {
	case b.bytes > b.maxBytes:
		b.err = b.tooLarge(fmt.Sprintf("%d MiB", b.maxBytes>>20))
	case b.values > b.maxValues:
		b.err = b.tooLarge(fmt.Sprintf("%d JSON values", b.maxValues))
	}
	if b.err != nil {
		return 0, b.err
	}
	return n, err
}
