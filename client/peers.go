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
	var r apitype.BandwidthResult
	q := url.Values{"peer": {peer}}
	if op != "" {
		q.Set("op", op)
	}
	if size != 0 {
		q.Set("size", strconv.Itoa(size))
	}
	if d != 0 {
		q.Set("duration", d.String())
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, max(d, 5*time.Second)+40*time.Second)
		defer cancel()
	}
	err := c.do(ctx, http.MethodPost, "/v1/bw?"+q.Encode(), &r)
	return r, err
}
