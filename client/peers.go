package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
)

// Probe asks for POST /v1/probe?peer=name: probe a configured peer now and
// return its state with the result.
func (c *Client) Probe(ctx context.Context, name string) (apitype.Peer, error) {
	var p apitype.Peer
	err := c.do(ctx, http.MethodPost, "/v1/probe?peer="+url.QueryEscape(name), &p)
	return p, err
}

// Bandwidth asks for POST /v1/bw: an RC bandwidth test from rdmad's node to
// peer (op write, read or send; size bytes per message; duration d; zero
// values take rdmad's defaults). It waits for the test to end.
func (c *Client) Bandwidth(ctx context.Context, peer, op string, size int, d time.Duration) (apitype.BandwidthResult, error) {
	return c.BandwidthTest(ctx, peer, BandwidthOptions{Op: op, Size: size, Duration: d})
}

// BandwidthOptions are a bandwidth test's parameters; zero values take
// rdmad's defaults (write, 65536 bytes, 5s, one queue pair).
type BandwidthOptions struct {
	Op       string
	Size     int
	Duration time.Duration
	// QPs is the queue pairs run in parallel (1 to 16).
	QPs int
}

// BandwidthTest asks for POST /v1/bw?peer=: a test to peer with o's
// parameters. It waits for the test to end.
func (c *Client) BandwidthTest(ctx context.Context, peer string, o BandwidthOptions) (apitype.BandwidthResult, error) {
	return c.bandwidth(ctx, url.Values{"peer": {peer}}, o)
}

// LoopbackBandwidth asks for POST /v1/bw?loopback=: a test of one of
// rdmad's node's ports against itself, through its adapter, as
// ib_write_bw to the node's own address measures it. target is DEVICE or
// DEVICE:PORT, "" for the first ACTIVE port. It waits for the test to end;
// the result says the port's [health] threshold (MinGbps, Low).
func (c *Client) LoopbackBandwidth(ctx context.Context, target string, o BandwidthOptions) (apitype.BandwidthResult, error) {
	return c.bandwidth(ctx, url.Values{"loopback": {target}}, o)
}

func (c *Client) bandwidth(ctx context.Context, q url.Values, o BandwidthOptions) (apitype.BandwidthResult, error) {
	var r apitype.BandwidthResult
	if o.Op != "" {
		q.Set("op", o.Op)
	}
	if o.Size != 0 {
		q.Set("size", strconv.Itoa(o.Size))
	}
	if o.Duration != 0 {
		q.Set("duration", o.Duration.String())
	}
	if o.QPs != 0 {
		q.Set("qps", strconv.Itoa(o.QPs))
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, max(o.Duration, 5*time.Second)+40*time.Second)
		defer cancel()
	}
	err := c.do(ctx, http.MethodPost, "/v1/bw?"+q.Encode(), &r)
	return r, err
}
