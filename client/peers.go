package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/rdmad/rdmad/client/apitype"
)

// Peers returns the peer probes' state (the peers part of GET /v1/status).
func (c *Client) Peers(ctx context.Context) (apitype.Peers, error) {
	s, err := c.Status(ctx)
	if err != nil {
		return apitype.Peers{}, err
	}
	return s.Peers, nil
}

// Probe asks for POST /v1/probe?peer=name: probe a configured peer now and
// return its state with the result.
func (c *Client) Probe(ctx context.Context, name string) (apitype.Peer, error) {
	var p apitype.Peer
	err := c.do(ctx, http.MethodPost, "/v1/probe?peer="+url.QueryEscape(name), &p)
	return p, err
}
