package apitype

import "time"

// BandwidthResult is the answer of POST /v1/bw (rdmactl bw, the D-Bus
// method Bandwidth): one RC bandwidth test from this node to a peer, or of
// one of its ports against itself (loopback), as the requester measured it
// (busy-polling its completion queue, like ib_write_bw).
type BandwidthResult struct {
	// Peer is the peer as the request named it; Address the address its
	// control endpoint was reached at. Both are "" for a loopback test.
	Peer    string `json:"peer"`
	Address string `json:"address"`
	// Loopback marks a test between queue pairs of the one port Local,
	// through its adapter (rdmactl bw --loopback).
	Loopback bool `json:"loopback,omitempty"`
	// QPs is the queue pairs the test ran in parallel (--qps).
	QPs int `json:"qps"`
	// Op is "write", "read" or "send"; Size the bytes of one message.
	Op   string `json:"op"`
	Size int    `json:"size"`
	// Duration is how long the test was to send; Elapsed the time from
	// the first post to the last completion, which Gbps and MsgRate are
	// computed over.
	Duration time.Duration `json:"duration_ns"`
	Elapsed  time.Duration `json:"elapsed_ns"`
	// Messages completed and the bytes they carried.
	Messages uint64 `json:"messages"`
	Bytes    uint64 `json:"bytes"`
	// Gbps is Bytes*8 / Elapsed / 1e9; MsgRate Messages / Elapsed.
	Gbps    float64 `json:"gbps"`
	MsgRate float64 `json:"msg_rate"`
	// Local is the local port the test ran from ("rxe0/1"); Polling how
	// completions were waited for ("busy").
	Local   string `json:"local"`
	Polling string `json:"polling"`
	// Time is when the test ended.
	Time time.Time `json:"time"`
	// MinGbps is the least loopback bandwidth of Local that [health]
	// declares (min_loopback_gbps, or min_loopback_share of the port's
	// rate, the higher of the two), 0 when none; Low reports whether
	// Gbps is below it, which is the LoopbackBandwidthLow condition.
	// Loopback tests only.
	MinGbps float64 `json:"min_gbps,omitempty"`
	Low     bool    `json:"low,omitempty"`
}

// BandwidthStatus is the bandwidth tests' part of the status (GET
// /v1/status → bandwidth; absent while the peer probes, which carry the
// tests, do not run).
type BandwidthStatus struct {
	// Enabled is [probe] bandwidth: this node answers other nodes' tests.
	Enabled bool `json:"enabled"`
	// Served counts the tests this node accepted as responder since
	// rdmad started; Refused the requests it refused, by reason
	// (disabled, busy, bad_request, unavailable).
	Served  uint64            `json:"served"`
	Refused map[string]uint64 `json:"refused"`
	// Last is the last test this node ran to a peer (rdmactl bw), nil
	// before one.
	Last *BandwidthResult `json:"last,omitempty"`
	// Loopback is the last loopback test of each port that ran one
	// (rdmactl bw --loopback), by port; the LoopbackBandwidthLow
	// condition judges them. Kept until rdmad stops.
	Loopback []BandwidthResult `json:"loopback,omitempty"`
}
