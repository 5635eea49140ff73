// Package client is the typed Go client of rdmad's local API. rdmactl is a
// thin formatter over it; other programs on the node can use it too.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"syscall"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
)

// A NotRunningError means nothing answers on the socket.
type NotRunningError struct {
	Socket string
	Err    error
}

func (e *NotRunningError) Error() string {
	return fmt.Sprintf("rdmad is not running (nothing answers on %s: %v); start it with `systemctl start rdmad`, or point --socket/RDMAD_SOCKET at the right socket", e.Socket, e.Err)
}

func (e *NotRunningError) Unwrap() error { return e.Err }

// An AccessDeniedError means the daemon refused the request for the caller's
// credentials (HTTP 403) or the socket's mode refused the connection.
type AccessDeniedError struct{ Message string }

func (e *AccessDeniedError) Error() string { return "access denied: " + e.Message }

// An APIError is any other non-2xx answer.
type APIError struct {
	Status  int
	Message string
}

func (e *APIError) Error() string { return fmt.Sprintf("rdmad answered %d: %s", e.Status, e.Message) }

// A Client talks to one rdmad socket.
type Client struct {
	Socket string
	hc     *http.Client
}

// DefaultSocket is RDMAD_SOCKET, or the configured default.
func DefaultSocket() string {
	if s := os.Getenv("RDMAD_SOCKET"); s != "" {
		return s
	}
	return apitype.DefaultSocket
}

// New returns a Client for the socket at path.
func New(path string) *Client {
	c := &Client{Socket: path}
	c.hc = &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
		MaxIdleConns: 1,
	}}
	return c
}

// Status returns GET /v1/status.
func (c *Client) Status(ctx context.Context) (*apitype.Snapshot, error) {
	var s apitype.Snapshot
	if err := c.do(ctx, http.MethodGet, "/v1/status", &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// StatusRaw returns GET /v1/status as the daemon sent it.
func (c *Client) StatusRaw(ctx context.Context) (json.RawMessage, error) {
	var m json.RawMessage
	err := c.do(ctx, http.MethodGet, "/v1/status", &m)
	return m, err
}

// Reload asks for POST /v1/reload. A configuration error is returned in the
// result (OK false), not as an error.
func (c *Client) Reload(ctx context.Context) (apitype.ReloadResult, error) {
	var r apitype.ReloadResult
	err := c.do(ctx, http.MethodPost, "/v1/reload", &r)
	var ae *APIError
	if errors.As(err, &ae) && ae.Status == http.StatusUnprocessableEntity {
		return r, nil
	}
	return r, err
}

// PolicyDiff returns GET /v1/policy/diff: what a policy pass would change.
func (c *Client) PolicyDiff(ctx context.Context) (apitype.DiffResult, error) {
	var r apitype.DiffResult
	err := c.do(ctx, http.MethodGet, "/v1/policy/diff", &r)
	return r, err
}

// PolicyApply asks for POST /v1/policy/apply: a full policy pass now.
func (c *Client) PolicyApply(ctx context.Context) (apitype.ApplyResult, error) {
	var r apitype.ApplyResult
	err := c.do(ctx, http.MethodPost, "/v1/policy/apply", &r)
	return r, err
}

func (c *Client) do(ctx context.Context, method, path string, out any) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://rdmad"+path, nil)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		switch {
		case errors.Is(err, syscall.ENOENT), errors.Is(err, syscall.ECONNREFUSED):
			return &NotRunningError{Socket: c.Socket, Err: unwrapSyscall(err)}
		case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
			return &AccessDeniedError{Message: fmt.Sprintf("cannot connect to %s: permission denied; join the socket's group ([daemon] socket_group) or use sudo", c.Socket)}
		}
		return fmt.Errorf("rdmad at %s: %w", c.Socket, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		body, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		if err != nil {
			return fmt.Errorf("rdmad at %s: read the %d answer to %s: %w", c.Socket, resp.StatusCode, path, err)
		}
		var eb apitype.ErrorBody
		if json.Unmarshal(body, &eb) != nil || eb.Error == "" {
			eb.Error = string(body)
		}
		if resp.StatusCode == http.StatusForbidden {
			return &AccessDeniedError{Message: eb.Error}
		}
		if resp.StatusCode == http.StatusUnprocessableEntity && out != nil {
			json.Unmarshal(body, out)
		}
		return &APIError{Status: resp.StatusCode, Message: eb.Error}
	}
	if out == nil {
		return nil
	}
	// Decoded as it is read, within the bounds of an answer (bound.go).
	in := &boundedReader{r: resp.Body, maxBytes: MaxAnswerBytes, maxValues: MaxAnswerValues,
		tooLarge: func(what string) error { return &AnswerTooLargeError{Socket: c.Socket, Path: path, What: what} }}
	if raw, ok := out.(*json.RawMessage); ok {
		// Kept as sent, to be printed as it is (--json): read within the
		// same bounds and checked to be one JSON value, not decoded (at
		// 1,000 peers a status decoded into a RawMessage took most of
		// rdmactl status --json's 90 ms).
		var buf bytes.Buffer
		if n := resp.ContentLength; n > 0 && n <= MaxAnswerBytes {
			buf.Grow(int(n) + bytes.MinRead)
		}
		if _, err := buf.ReadFrom(in); err != nil {
			if in.err != nil {
				return in.err
			}
			return fmt.Errorf("rdmad at %s: read %s: %w", c.Socket, path, err)
		}
		if !json.Valid(buf.Bytes()) {
			return fmt.Errorf("rdmad at %s: decode %s: the answer is not one JSON value", c.Socket, path)
		}
		*raw = buf.Bytes()
		return nil
	}
	if err := json.NewDecoder(in).Decode(out); err != nil {
		if in.err != nil {
			return in.err
		}
		return fmt.Errorf("rdmad at %s: decode %s: %w", c.Socket, path, err)
	}
	return nil
}

func unwrapSyscall(err error) error {
	var se syscall.Errno
	if errors.As(err, &se) {
		return se
	}
	return err
}

// Doctor asks for GET /v1/doctor: rdmad runs the troubleshooting table on
// its node, interval apart between the counter reads (0 skips the
// rising-counter checks).
func (c *Client) Doctor(ctx context.Context, interval time.Duration) (apitype.DoctorReport, error) {
	var r apitype.DoctorReport
	err := c.do(ctx, http.MethodGet, "/v1/doctor?interval="+url.QueryEscape(interval.String()), &r)
	return r, err
}

// Resources asks for GET /v1/resources: the RDMA objects the kernel tracks
// (QPs, CQs, MRs, PDs) per process and device, and the bytes the MRs pin.
func (c *Client) Resources(ctx context.Context) (apitype.Resources, error) {
	var r apitype.Resources
	err := c.do(ctx, http.MethodGet, "/v1/resources", &r)
	return r, err
}

// HealthRaw asks for GET /v1/health, the node's verdict (docs/HEALTH.md),
// and returns it decoded and as the daemon sent it.
func (c *Client) HealthRaw(ctx context.Context) (apitype.Health, json.RawMessage, error) {
	var m json.RawMessage
	if err := c.do(ctx, http.MethodGet, "/v1/health", &m); err != nil {
		return apitype.Health{}, nil, err
	}
	var h apitype.Health
	if err := json.Unmarshal(m, &h); err != nil {
		return apitype.Health{}, nil, fmt.Errorf("rdmad at %s: decode /v1/health: %w", c.Socket, err)
	}
	return h, m, nil
}
