package bus

import (
	"context"
	"errors"
	"time"

	"github.com/rdmad/rdmad/daemon/service"
)

// bandwidth serves Bandwidth(s peer, s op, u size, u duration_ms) -> (d
// gbps, d msg_rate, t bytes, t messages, t elapsed_ns, s local): an RC
// bandwidth test to peer as POST /v1/bw runs it. An empty op, size 0 and
// duration 0 take the defaults (write, 65536 bytes, 5 s). A refusal by the
// peer, or a test that could not run, is org.rdmad.Agent1.Error.Failed
// with the reason.
func (h *handler) bandwidth(ctx context.Context, c call) ([]any, error) {
	peer, op := c.args[0].(string), c.args[1].(string)
	size, ms := c.args[2].(uint32), c.args[3].(uint32)
	if size > service.MaxBandwidthSize {
		return nil, dbusError(ErrInvalidArgs, "Bandwidth: size %d is out of range; use 1 to %d bytes (0: 65536)", size, service.MaxBandwidthSize)
	}
	req, err := service.ParseBandwidthRequest(peer, op, int(size), time.Duration(ms)*time.Millisecond)
	if err != nil {
		return nil, dbusError(ErrInvalidArgs, "Bandwidth: %v; e.g. Bandwidth ssuu 192.0.2.17 write 65536 5000", err)
	}
	h.logCall(ctx, "peer", peer, "op", op, "size", size, "duration_ms", ms)
	res, err := service.RunBandwidth(ctx, h.backend, req)
	switch {
	case errors.Is(err, errors.ErrUnsupported):
		return nil, dbusError(ErrNotSupported, "Bandwidth: this rdmad runs no bandwidth tests")
	case err != nil:
		return nil, dbusError(ErrFailed, "Bandwidth %q: %v", peer, err)
	}
	return []any{res.Gbps, res.MsgRate, res.Bytes, res.Messages, uint64(res.Elapsed), res.Local}, nil
}
