package ethtool

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// Counters are the pause and discard counters of one netdev, as rdmad keeps
// them.
type Counters struct {
	Netdev string
	// Pause holds the standard pause statistics; nil when the netdev has
	// no pause parameters (or they could not be read).
	Pause *Pause
	// Driver holds the kept ethtool -S statistics (Kept) by name; nil when
	// the driver has no ethtool -S statistics (or they could not be read),
	// empty when it has none of the kept ones (veth).
	Driver map[string]uint64
}

// Standard pause statistics in Flat, under the names `ethtool -I -a`
// prints them with.
const (
	FlatTXPauseFrames = "tx_pause_frames"
	FlatRXPauseFrames = "rx_pause_frames"
)

// Flat returns the counters in one map by name: the kept ethtool -S
// statistics, and the standard pause frames the driver counts as
// tx_pause_frames and rx_pause_frames.
func (c Counters) Flat() map[string]uint64 {
	m := make(map[string]uint64, len(c.Driver)+2)
	for k, v := range c.Driver {
		m[k] = v
	}
	if p := c.Pause; p != nil {
		if p.HasTXFrames {
			m[FlatTXPauseFrames] = p.TXFrames
		}
		if p.HasRXFrames {
			m[FlatRXPauseFrames] = p.RXFrames
		}
	}
	return m
}

// Counters reads netdev's pause statistics and kept driver statistics. A
// part the netdev does not support is left nil; the error is nil unless a
// read failed otherwise, or neither part is supported (then it matches
// errors.ErrUnsupported).
func (r *Reader) Counters(netdev string) (Counters, error) {
	c := Counters{Netdev: netdev}
	var errs, unsupported []error
	if p, err := r.Pause(netdev); err == nil {
		c.Pause = &p
	} else if errors.Is(err, errors.ErrUnsupported) {
		unsupported = append(unsupported, err)
	} else {
		errs = append(errs, err)
	}
	if stats, err := r.DriverStats(netdev); err == nil {
		c.Driver = Keep(stats)
	} else if errors.Is(err, errors.ErrUnsupported) {
		unsupported = append(unsupported, err)
	} else {
		errs = append(errs, err)
	}
	switch {
	case len(errs) > 0:
		return c, joinErrs(errs)
	case len(unsupported) == 2:
		return c, joinErrs(unsupported)
	}
	return c, nil
}

// joinErrs joins errs on one line (errors.Join puts newlines between).
func joinErrs(errs []error) error {
	if len(errs) == 1 {
		return errs[0]
	}
	return fmt.Errorf("%w; %w", errs[0], errs[1])
}

// FlatCounters returns Counters(netdev).Flat(), with its netlink requests
// bounded by ReadTimeout: what doctor.Env.NetCounters wants.
func (r *Reader) FlatCounters(netdev string) (map[string]uint64, error) {
	if err := r.SetDeadline(time.Now().Add(ReadTimeout)); err != nil {
		return nil, fmt.Errorf("ethtool: set the netlink deadline: %w", err)
	}
	c, err := r.Counters(netdev)
	return c.Flat(), err
}

// A Source reads the counters of the RoCE netdevs for the daemon's metrics,
// at scrape time. It opens its sockets for each Read and closes them after,
// so that it holds nothing between scrapes. A netdev without pause
// parameters or driver statistics is reported once (Log, info) and not
// asked again until it is re-created (a new interface index); other errors
// are logged when they change, not on every read. Safe for concurrent use:
// reads are serialised.
type Source struct {
	// NetNS is passed to Open (Config.NetNS).
	NetNS int
	// Log receives the reports; nil discards them.
	Log *slog.Logger

	mu      sync.Mutex
	openErr string
	state   map[string]*netdevState
}

// ReadTimeout bounds the netlink requests of one Source.Read.
const ReadTimeout = 5 * time.Second

// netdevState is what a Source remembers of a netdev between reads.
type netdevState struct {
	ifindex           int
	noPause, noDriver bool
	lastErr           string
}

// Read returns the counters of netdevs, in their order; a netdev that
// could not be read at all is left out. The state of netdevs not named is
// forgotten.
func (s *Source) Read(netdevs []string) []Counters {
	s.mu.Lock()
	defer s.mu.Unlock()
	log := s.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r, err := Open(&Config{NetNS: s.NetNS})
	if err != nil {
		if msg := err.Error(); msg != s.openErr {
			log.Warn("pause and discard counters not read", "err", err)
			s.openErr = msg
		}
		return nil
	}
	defer r.Close()
	// A scrape must not hang on the kernel: netlink answers at once, or
	// not at all.
	if err := r.SetDeadline(time.Now().Add(ReadTimeout)); err != nil {
		log.Warn("pause and discard counters not read", "err", fmt.Errorf("ethtool: set the netlink deadline: %w", err))
		return nil
	}
	if s.openErr != "" {
		log.Info("pause and discard counters read again")
		s.openErr = ""
	}
	if s.state == nil {
		s.state = map[string]*netdevState{}
	}
	named := map[string]bool{}
	var out []Counters
	for _, nd := range netdevs {
		if named[nd] {
			continue
		}
		named[nd] = true
		st := s.state[nd]
		idx, err := r.Ifindex(nd)
		if err != nil {
			if st == nil {
				st = &netdevState{}
				s.state[nd] = st
			}
			s.report(log, nd, st, []string{err.Error()})
			continue
		}
		if st == nil || st.ifindex != idx {
			st = &netdevState{ifindex: idx}
			s.state[nd] = st
		}
		c := Counters{Netdev: nd}
		var errs []string
		if !st.noPause {
			p, err := r.Pause(nd)
			switch {
			case err == nil:
				c.Pause = &p
			case errors.Is(err, errors.ErrUnsupported):
				st.noPause = true
				log.Info("netdev has no pause statistics: not asked again until it is re-created", "netdev", nd, "reason", err.Error())
			default:
				errs = append(errs, err.Error())
			}
		}
		if !st.noDriver {
			stats, err := r.DriverStats(nd)
			switch {
			case err == nil:
				c.Driver = Keep(stats)
			case errors.Is(err, errors.ErrUnsupported):
				st.noDriver = true
				log.Info("netdev has no ethtool -S statistics: not asked again until it is re-created", "netdev", nd, "reason", err.Error())
			default:
				errs = append(errs, err.Error())
			}
		}
		s.report(log, nd, st, errs)
		if c.Pause != nil || c.Driver != nil {
			out = append(out, c)
		}
	}
	for nd := range s.state {
		if !named[nd] {
			delete(s.state, nd)
		}
	}
	return out
}

// report logs the errors of a netdev's read when they differ from the last
// read's.
func (s *Source) report(log *slog.Logger, nd string, st *netdevState, errs []string) {
	msg := strings.Join(errs, "; ")
	if msg == st.lastErr {
		return
	}
	if msg != "" {
		log.Warn("pause and discard counters of a netdev not read; logged again only when the error changes", "netdev", nd, "err", msg)
	} else {
		log.Info("pause and discard counters of a netdev read again", "netdev", nd)
	}
	st.lastErr = msg
}
