package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"syscall"

	"github.com/rdmad/rdmad/client/apitype"
)

// maxEventLine bounds one line of the watch stream.
const maxEventLine = 1 << 20

// A Stream is an open GET /v1/watch. Close it when done.
type Stream struct {
	body io.ReadCloser
	sc   *bufio.Scanner
	// Hello is the stream's first line.
	Hello apitype.Event
}

// Watch opens GET /v1/watch and reads its hello line. The stream ends when
// ctx is cancelled, Close is called, or the daemon ends it (Next returns a
// "dropped" or "bye" event, then io.EOF). A daemon over its limits answers
// 503 (an *APIError whose message names the limit).
func (c *Client) Watch(ctx context.Context) (*Stream, error) {
	resp, err := c.open(ctx, "/v1/watch")
	if err != nil {
		return nil, err
	}
	st := &Stream{body: resp.Body, sc: bufio.NewScanner(resp.Body)}
	st.sc.Buffer(make([]byte, 0, 4096), maxEventLine)
	hello, err := st.Next()
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("rdmad at %s: watch: read the hello line: %w", c.Socket, err)
	}
	if hello.Type != apitype.EventHello {
		st.Close()
		return nil, fmt.Errorf("rdmad at %s: watch: first line is %q, want %q", c.Socket, hello.Type, apitype.EventHello)
	}
	st.Hello = hello
	return st, nil
}

// Next returns the next event, or io.EOF after the stream's end. Heartbeat
// lines are skipped: they say only that the stream is alive.
func (s *Stream) Next() (apitype.Event, error) {
	for {
		line, err := s.line()
		if err != nil {
			return apitype.Event{}, err
		}
		var ev apitype.Event
		if err := json.Unmarshal(line, &ev); err != nil {
			return apitype.Event{}, fmt.Errorf("watch: decode %q: %w", line, err)
		}
		if ev.Type != apitype.EventHeartbeat {
			return ev, nil
		}
	}
}

// NextRaw returns the next line as the daemon sent it, or io.EOF.
// Heartbeat lines are skipped, as in Next.
func (s *Stream) NextRaw() ([]byte, error) {
	for {
		line, err := s.line()
		if err != nil {
			return nil, err
		}
		var head struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(line, &head) == nil && head.Type == apitype.EventHeartbeat {
			continue
		}
		return append([]byte(nil), line...), nil
	}
}

// line reads the next line of the stream; it is valid until the next read.
func (s *Stream) line() ([]byte, error) {
	if !s.sc.Scan() {
		if err := s.sc.Err(); err != nil {
			return nil, fmt.Errorf("watch: read: %w", err)
		}
		return nil, io.EOF
	}
	return s.sc.Bytes(), nil
}

// Close closes the stream.
func (s *Stream) Close() error { return s.body.Close() }

// Metrics returns GET /metrics in Prometheus' text format.
func (c *Client) Metrics(ctx context.Context) ([]byte, error) {
	resp, err := c.open(ctx, "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxMetricsBytes+1))
	if err != nil {
		return nil, fmt.Errorf("rdmad at %s: read /metrics: %w", c.Socket, err)
	}
	if len(b) > MaxMetricsBytes {
		return nil, &AnswerTooLargeError{Socket: c.Socket, Path: "/metrics", What: fmt.Sprintf("%d MiB", MaxMetricsBytes>>20)}
	}
	return b, nil
}

// open sends GET path and returns the response of a 2xx answer; errors are
// typed as in Client.do. The caller closes the body.
func (c *Client) open(ctx context.Context, path string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://rdmad"+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		switch {
		case errors.Is(err, syscall.ENOENT), errors.Is(err, syscall.ECONNREFUSED):
			return nil, &NotRunningError{Socket: c.Socket, Err: unwrapSyscall(err)}
		case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
			return nil, &AccessDeniedError{Message: fmt.Sprintf("cannot connect to %s: permission denied; join the socket's group ([daemon] socket_group) or use sudo", c.Socket)}
		}
		return nil, fmt.Errorf("rdmad at %s: %w", c.Socket, err)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	var eb apitype.ErrorBody
	if json.Unmarshal(body, &eb) != nil || eb.Error == "" {
		eb.Error = string(body)
	}
	if resp.StatusCode == http.StatusForbidden {
		return nil, &AccessDeniedError{Message: eb.Error}
	}
	return nil, &APIError{Status: resp.StatusCode, Message: eb.Error}
}
