package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/rdmad/rdmad/daemon/state"
)

// Peers returns the peer probes' state (the peers part of GET /v1/status).
func (c *Client) Peers(ctx context.Context) (state.Peers, error) {
	s, err := c.Status(ctx)
	if err != nil {
		return state.Peers{}, err
	}
	return s.Peers, nil
}

// Probe asks for POST /v1/probe?peer=name: probe a configured peer now and
// return its state with the result.
func (c *Client) Probe(ctx context.Context, name string) (state.Peer, error) {
	var p state.Peer
	err := c.do(ctx, http.MethodPost, "/v1/probe?peer="+url.QueryEscape(name), &p)
	return p, err
}
