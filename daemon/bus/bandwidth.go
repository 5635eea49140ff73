package bus

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/client/apitype"
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

// bandwidthOptions are the options BandwidthTest takes, with the D-Bus
// type of each.
var bandwidthOptions = map[string]string{"loopback": "b", "op": "s", "size": "u", "duration_ms": "u", "qps": "u"}

// bandwidthTestExample is the example call BandwidthTest's errors end with.
const bandwidthTestExample = "e.g. BandwidthTest sa{sv} rxe0:1 3 loopback b true qps u 4 duration_ms u 2000, " +
	"or BandwidthTest sa{sv} 192.0.2.17 1 size u 65536"

// bandwidthTest serves BandwidthTest(s target, a{sv} options) -> (a{sv}
// result): a bandwidth test with options, as POST /v1/bw takes them, and
// the result as a record with the JSON names of apitype.BandwidthResult.
// target is the peer, or with loopback true DEVICE[:PORT] ("" for the
// first ACTIVE port). An option left out takes the default; one given
// must be a value (size, duration_ms and qps 0 are refused, as ?size=0 is
// on the socket, rather than silently meaning the default). Unknown keys
// and wrong types are refused rather than ignored: a misspelt "qsp"
// would otherwise run a test other than the one asked for.
func (h *handler) bandwidthTest(ctx context.Context, c call) ([]any, error) {
	target, opts := c.args[0].(string), c.args[1].(map[string]dbus.Variant)
	req, err := bandwidthTestRequest(target, opts)
	if err != nil {
		return nil, dbusError(ErrInvalidArgs, "BandwidthTest: %v; %s", err, bandwidthTestExample)
	}
	h.logCall(ctx, "target", target, "loopback", req.Loopback, "op", req.Op, "size", req.Size,
		"duration_ms", req.Duration.Milliseconds(), "qps", req.QPs)
	what := fmt.Sprintf("%q", target)
	if req.Loopback {
		what = fmt.Sprintf("loopback %q", target)
	}
	res, err := service.RunBandwidth(ctx, h.backend, req)
	switch {
	case errors.Is(err, errors.ErrUnsupported):
		return nil, dbusError(ErrNotSupported, "BandwidthTest: this rdmad runs no bandwidth tests")
	case err != nil:
		return nil, dbusError(ErrFailed, "BandwidthTest %s: %v", what, err)
	}
	return []any{bandwidthRecord(res)}, nil
}

// bandwidthTestRequest checks BandwidthTest's target and options with the
// socket API's checks (service.ParseLoopbackRequest, ParseBandwidthRequest,
// CheckBandwidthQPs), after refusing what only D-Bus can get wrong: a key
// rdmad does not know, or a value of the wrong type.
func bandwidthTestRequest(target string, opts map[string]dbus.Variant) (service.BandwidthRequest, error) {
	for _, k := range slices.Sorted(maps.Keys(opts)) {
		want, ok := bandwidthOptions[k]
		if !ok {
			return service.BandwidthRequest{}, fmt.Errorf("unknown option %.32q; the options are duration_ms (u), loopback (b), op (s), qps (u) and size (u)", k)
		}
		if got := opts[k].Signature().String(); got != want {
			return service.BandwidthRequest{}, fmt.Errorf("option %s is of type %s; give it as %s", k, got, want)
		}
	}
	loopback, _ := opts["loopback"].Value().(bool)
	op, size, ms, qps := "write", uint32(0), uint32(0), uint32(0)
	if v, ok := opts["op"]; ok {
		if op = v.Value().(string); op == "" {
			return service.BandwidthRequest{}, errors.New(`op "": use write, read or send (leave op out for write)`)
		}
	}
	for _, o := range []struct {
		key, hint string
		dst       *uint32
	}{
		{"size", "1 to 1048576 bytes", &size},
		{"duration_ms", "100 to 30000", &ms},
		{"qps", "1 to 16 queue pairs", &qps},
	} {
		if v, ok := opts[o.key]; ok {
			if *o.dst = v.Value().(uint32); *o.dst == 0 {
				return service.BandwidthRequest{}, fmt.Errorf("option %s 0 is out of range; use %s, or leave it out for the default", o.key, o.hint)
			}
		}
	}
	// Checked before int(size), which a 32-bit int could make negative.
	if size > service.MaxBandwidthSize {
		return service.BandwidthRequest{}, fmt.Errorf("size %d is out of range; use 1 to %d bytes (1 MiB)", size, service.MaxBandwidthSize)
	}
	d := time.Duration(ms) * time.Millisecond
	if loopback {
		return service.ParseLoopbackRequest(target, op, int(size), d, int(qps))
	}
	req, err := service.ParseBandwidthRequest(target, op, int(size), d)
	if err == nil {
		req.QPs, err = int(qps), service.CheckBandwidthQPs(int(qps))
	}
	return req, err
}

// bandwidthRecord returns r as BandwidthTest's result, every field of
// apitype.BandwidthResult under its JSON name (time as microseconds since
// the Unix epoch, as the other records have times). min_gbps and low are
// 0 and false for a peer test, which nothing judges.
func bandwidthRecord(r apitype.BandwidthResult) record {
	return record{
		"peer":        dbus.MakeVariant(validText(r.Peer)),
		"address":     dbus.MakeVariant(validText(r.Address)),
		"loopback":    dbus.MakeVariant(r.Loopback),
		"qps":         dbus.MakeVariant(uint32(max(r.QPs, 0))),
		"op":          dbus.MakeVariant(validText(r.Op)),
		"size":        dbus.MakeVariant(uint32(max(r.Size, 0))),
		"duration_ns": dbus.MakeVariant(durationNs(r.Duration)),
		"elapsed_ns":  dbus.MakeVariant(durationNs(r.Elapsed)),
		"messages":    dbus.MakeVariant(r.Messages),
		"bytes":       dbus.MakeVariant(r.Bytes),
		"gbps":        dbus.MakeVariant(r.Gbps),
		"msg_rate":    dbus.MakeVariant(r.MsgRate),
		"local":       dbus.MakeVariant(validText(r.Local)),
		"polling":     dbus.MakeVariant(validText(r.Polling)),
		"time":        dbus.MakeVariant(unixMicro(r.Time)),
		"min_gbps":    dbus.MakeVariant(r.MinGbps),
		"low":         dbus.MakeVariant(r.Low),
	}
}
