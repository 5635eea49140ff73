// Package servicetest holds what the tests of both transports (daemon/api,
// daemon/bus) share: Backend, a recording fake of the service contract,
// and Operations, the one table of operations their fuzz oracles read,
// with the oracles of the arguments (PeerShaped, BandwidthOK,
// DoctorIntervalOK). The table and the oracles are written out here, not
// derived from daemon/access, daemon/service or a transport, so that a
// change there fails the oracles until it is made here too.
package servicetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon/service"
	"github.com/rdmad/rdmad/daemon/state"
)

// A Backend is a service.Backend, ResourceReader and BandwidthTester for
// tests. It records every call (Calls, Count) and answers each operation
// as the daemon's backend would, with canned results. The zero Backend
// serves a fixed snapshot and succeeds at everything; the fields change
// that. Set them before the Backend is used, and change them later only
// with the Set methods.
type Backend struct {
	// Store, when set, is what Snapshot loads and what Reload publishes
	// to, as the daemon does: a good reload increments the configuration's
	// generation, a rejected one sets Config.Error.
	Store *state.Store
	// Snap, when set and Store is not, is what Snapshot returns.
	Snap *apitype.Snapshot
	// Fail makes every operation that can fail fail with an error.
	Fail bool
	// Peers are the configured peers Probe answers for (any other name is
	// not a configured peer); nil answers every name, with that name in
	// the result's Reason, as the daemon's results may quote it.
	Peers map[string]apitype.Peer
	// Res is what Resources returns.
	Res apitype.Resources

	mu       sync.Mutex
	reject   string
	errs     map[string]error
	calls    []string
	asked    []string
	requests []service.BandwidthRequest
}

// ReloadOnly returns a Backend on store that can reload and read the
// snapshot and nothing else: every other operation fails with an error
// wrapping errors.ErrUnsupported, as a daemon without that part would.
func ReloadOnly(store *state.Store) *Backend {
	b := &Backend{Store: store}
	for _, op := range []string{"PolicyDiff", "PolicyApply", "Probe", "Doctor", "Resources", "Bandwidth"} {
		b.SetErr(op, errors.ErrUnsupported)
	}
	return b
}

// SetReject makes the next reloads report a rejected configuration with
// this error text ("" accepts them again).
func (b *Backend) SetReject(text string) {
	b.mu.Lock()
	b.reject = text
	b.mu.Unlock()
}

// SetErr makes the operation named (a method name of service.Backend,
// ResourceReader or BandwidthTester) fail with an error wrapping err; nil
// lets it succeed again.
func (b *Backend) SetErr(method string, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.errs == nil {
		b.errs = map[string]error{}
	}
	b.errs[method] = err
}

// Calls returns the names of the methods called so far, in order.
func (b *Backend) Calls() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.calls...)
}

// Count returns how many times method was called.
func (b *Backend) Count(method string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, c := range b.calls {
		if c == method {
			n++
		}
	}
	return n
}

// Asked returns the peers Probe and Bandwidth were asked about, in order.
func (b *Backend) Asked() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.asked...)
}

// Requests returns the bandwidth tests asked for, in order.
func (b *Backend) Requests() []service.BandwidthRequest {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]service.BandwidthRequest(nil), b.requests...)
}

// enter records a call of method and returns the error it is to fail
// with: the one SetErr gave it, wrapped, or with Fail a generic one.
func (b *Backend) enter(method string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls = append(b.calls, method)
	if err := b.errs[method]; err != nil {
		return fmt.Errorf("servicetest: %s: %w", method, err)
	}
	if b.Fail {
		return fmt.Errorf("servicetest: %s failed", method)
	}
	return nil
}

// Snapshot implements service.Backend.
func (b *Backend) Snapshot() *apitype.Snapshot {
	b.enter("Snapshot")
	switch {
	case b.Store != nil:
		return b.Store.Load()
	case b.Snap != nil:
		return b.Snap
	}
	return &apitype.Snapshot{Version: "test", State: apitype.Running, Seq: 7}
}

// Reload implements service.Backend: a good reload is configuration
// generation 2, 3, ... (without a Store) and a rejected one keeps
// generation 1.
func (b *Backend) Reload(context.Context) (apitype.ReloadResult, error) {
	if err := b.enter("Reload"); err != nil {
		return apitype.ReloadResult{}, err
	}
	b.mu.Lock()
	reject := b.reject
	b.mu.Unlock()
	if b.Store != nil {
		if reject != "" {
			s := b.Store.Update(func(s *apitype.Snapshot) { s.Config.Error = reject })
			return apitype.ReloadResult{OK: false, Generation: s.Config.Generation, Error: reject}, nil
		}
		s := b.Store.Update(func(s *apitype.Snapshot) { s.Config.Generation++; s.Config.Error = "" })
		return apitype.ReloadResult{OK: true, Generation: s.Config.Generation}, nil
	}
	if reject != "" {
		return apitype.ReloadResult{OK: false, Generation: 1, Error: reject}, nil
	}
	return apitype.ReloadResult{OK: true, Generation: uint64(b.Count("Reload")) + 1}, nil
}

// PolicyDiff implements service.Backend: one MTU change.
func (b *Backend) PolicyDiff(context.Context) ([]apitype.Change, error) {
	if err := b.enter("PolicyDiff"); err != nil {
		return nil, err
	}
	return []apitype.Change{{Policy: "p", Kind: "mtu", Object: "x", From: "1500", To: "4200", Action: "apply"}}, nil
}

// PolicyApply implements service.Backend.
func (b *Backend) PolicyApply(context.Context) (apitype.ApplyResult, error) {
	if err := b.enter("PolicyApply"); err != nil {
		return apitype.ApplyResult{}, err
	}
	return apitype.ApplyResult{}, nil
}

// Probe implements service.Backend. A name without the shape of a peer's
// fails: the transport must have refused it.
func (b *Backend) Probe(_ context.Context, name string) (apitype.Peer, error) {
	err := b.enter("Probe")
	b.mu.Lock()
	b.asked = append(b.asked, name)
	b.mu.Unlock()
	switch {
	case err != nil:
		return apitype.Peer{}, err
	case !PeerShaped(name):
		return apitype.Peer{}, fmt.Errorf("servicetest: Probe of %q, which is no peer's name, reached the backend", name)
	case b.Peers == nil:
		return apitype.Peer{Name: name, State: apitype.PeerDown, Reason: "no answer from " + name,
			Paths: []apitype.PeerPath{{RTTP50: time.Millisecond, LastRTT: 2 * time.Millisecond, LossPct: 50}}}, nil
	}
	p, ok := b.Peers[name]
	if !ok {
		return apitype.Peer{}, fmt.Errorf("peers: %q is not a configured peer", name)
	}
	return p, nil
}

// Doctor implements service.Backend; its checks say the interval. An
// interval out of bounds fails: the transport must have refused it.
func (b *Backend) Doctor(_ context.Context, interval time.Duration) (apitype.DoctorReport, error) {
	if err := b.enter("Doctor"); err != nil {
		return apitype.DoctorReport{}, err
	}
	if !DoctorIntervalOK(interval) {
		return apitype.DoctorReport{}, fmt.Errorf("servicetest: Doctor with the interval %s reached the backend", interval)
	}
	return apitype.DoctorReport{Worst: apitype.VerdictWarn, Checks: []apitype.DoctorCheck{
		{ID: "daemon", Title: "rdmad answers", Verdict: apitype.VerdictOK, Message: fmt.Sprintf("interval %s", interval)},
		{ID: "clock", Title: "clock", Verdict: apitype.VerdictWarn, Message: "not synchronised", Fix: "start chronyd"}}}, nil
}

// Resources implements service.ResourceReader: Res.
func (b *Backend) Resources(context.Context) (apitype.Resources, error) {
	if err := b.enter("Resources"); err != nil {
		return apitype.Resources{}, err
	}
	return b.Res, nil
}

// Bandwidth implements service.BandwidthTester. A request out of bounds
// fails: the transport must have refused it.
func (b *Backend) Bandwidth(_ context.Context, r service.BandwidthRequest) (apitype.BandwidthResult, error) {
	err := b.enter("Bandwidth")
	b.mu.Lock()
	b.asked = append(b.asked, r.Peer)
	b.requests = append(b.requests, r)
	b.mu.Unlock()
	switch {
	case err != nil:
		return apitype.BandwidthResult{}, err
	case r.Loopback && r.Peer != "", !r.Loopback && r.Device != "", r.QPs < 0 || r.QPs > 16:
		return apitype.BandwidthResult{}, fmt.Errorf("servicetest: the request %+v, a peer and a loopback test at once or with qps out of bounds, reached the backend", r)
	case !BandwidthOK(r.Peer, r.Op, r.Size, r.Duration) && !(r.Loopback && BandwidthOK("loopback", r.Op, r.Size, r.Duration)) ||
		r.Op == "" || r.Size == 0 || r.Duration == 0:
		return apitype.BandwidthResult{}, fmt.Errorf("servicetest: the request %+v, out of bounds or without its defaults, reached the backend", r)
	}
	return apitype.BandwidthResult{Peer: r.Peer, Op: r.Op, Size: r.Size, Duration: r.Duration, Gbps: 1.5, MsgRate: 2861, Local: "mlx5_0/1"}, nil
}

// PeerShaped is the oracle of a peer's name: an address or host name
// (letters, digits, '.', ':', '%', '_', '-', starting with a letter or
// digit), at most 253 bytes.
func PeerShaped(name string) bool {
	if name == "" || len(name) > 253 {
		return false
	}
	for i, c := range []byte(name) {
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || !strings.ContainsRune(".:%_-", rune(c))) {
			return false
		}
	}
	return true
}

// BandwidthOK is the oracle of a bandwidth test's parameters as both
// transports take them: a peer with the shape of a name; op write, read
// or send ("" the default); size 1 to 1 MiB (0 the default); duration
// 100ms to 30s in whole milliseconds (0 the default).
func BandwidthOK(peer, op string, size int, d time.Duration) bool {
	okOp := op == "" || op == "write" || op == "read" || op == "send"
	okSize := size == 0 || (size >= 1 && size <= 1<<20)
	okDur := d == 0 || (d >= 100*time.Millisecond && d <= 30*time.Second && d%time.Millisecond == 0)
	return PeerShaped(peer) && okOp && okSize && okDur
}

// DoctorIntervalOK is the oracle of Doctor's interval: 0 to 10s.
func DoctorIntervalOK(d time.Duration) bool { return d >= 0 && d <= 10*time.Second }

// CoreOnly returns b as a service.Backend that is neither a ResourceReader
// nor a BandwidthTester: a backend without the optional operations.
func CoreOnly(b service.Backend) service.Backend { return coreOnly{b} }

type coreOnly struct{ service.Backend }
