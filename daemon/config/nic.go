package config

import (
	"math"
	"strings"

	"github.com/rdmad/rdmad/policy/firmware"
	"github.com/rdmad/rdmad/policy/nicq"
	"github.com/rdmad/rdmad/policy/qos"
	"github.com/rdmad/rdmad/policy/rdmanl"
)

// This file holds the [[policy]] settings of issue #28 ("policy depth"):
// ETS, the ethtool queue parameters and the firmware expectation, their
// validation and their conversion to a policy.Rule.

// ETS holds [policy.qos.ets], as mlnx_qos takes it: eight entries each.
type ETS struct {
	// PrioTC is the traffic class (0-7) of each priority 0-7.
	PrioTC []int `toml:"prio_tc"`
	// TSA is each traffic class's transmission selection algorithm:
	// "strict", "ets" or "vendor".
	TSA []string `toml:"tsa"`
	// TCBW is each traffic class's bandwidth share in percent; only ets
	// classes have one, and their shares sum to 100.
	TCBW []int `toml:"tc_bw"`
}

// Rings holds [policy.rings]: ring sizes (ethtool -G rx/tx).
type Rings struct {
	RX *int `toml:"rx"`
	TX *int `toml:"tx"`
}

// Channels holds [policy.channels]: channel counts (ethtool -L
// combined/rx/tx).
type Channels struct {
	Combined *int `toml:"combined"`
	RX       *int `toml:"rx"`
	TX       *int `toml:"tx"`
}

// Coalesce holds [policy.coalesce]: interrupt coalescing (ethtool -C
// rx-usecs/tx-usecs/adaptive-rx/adaptive-tx).
type Coalesce struct {
	RXUsecs    *int  `toml:"rx_usecs"`
	TXUsecs    *int  `toml:"tx_usecs"`
	AdaptiveRX *bool `toml:"adaptive_rx"`
	AdaptiveTX *bool `toml:"adaptive_tx"`
}

// RDMA holds [policy.rdma]: attributes of the matched RDMA devices.
type RDMA struct {
	// AdaptiveModeration is CQ adaptive interrupt moderation (DIM, what
	// `rdma dev set <dev> adaptive-moderation on` sets).
	AdaptiveModeration *bool `toml:"adaptive_moderation"`
	// OptionalCounters are the optional hardware counters enabled on each
	// matched port, every other optional counter off (what `rdma
	// statistic set link <dev>/<port> optional-counters a,b` sets); []
	// turns them all off, absent leaves them alone.
	OptionalCounters *[]string `toml:"optional_counters"`
	// QPCounters is the ports' QP counter mode: "auto" binds each new QP
	// to a counter per QP type (`rdma statistic qp set link ... auto type
	// on`), "off" turns the auto mode off; "" leaves it alone.
	QPCounters string `toml:"qp_counters"`
}

// RDMASystem holds [rdma]: node-wide settings of the RDMA subsystem.
type RDMASystem struct {
	// NetnsMode is "shared" (every RDMA device in every network
	// namespace) or "exclusive" (a device in one); empty leaves it.
	NetnsMode string `toml:"netns_mode"`
}

// validateRDMA checks [rdma].
func (c *Config) validateRDMA(k *checker) {
	switch c.RDMA.NetnsMode {
	case "", rdmanl.NetnsShared, rdmanl.NetnsExclusive:
	default:
		k.bad(k.setter("rdma.netns_mode"), "rdma.netns_mode", "%q is not a netns mode; use %q or %q (rdma system set netns)",
			c.RDMA.NetnsMode, rdmanl.NetnsShared, rdmanl.NetnsExclusive)
	}
}

// managesDepth reports whether p sets any of this file's settings.
func (p *Policy) managesDepth() bool {
	return p.Rings != nil || p.Channels != nil || p.Coalesce != nil || p.Firmware != "" || p.RDMA != nil
}

type intKey struct {
	name string
	v    *int
	min  int
}

type flagKey struct {
	name string
	v    *bool
}

func (r *Rings) keys() []intKey { return []intKey{{"rx", r.RX, 1}, {"tx", r.TX, 1}} }
func (c *Channels) keys() []intKey {
	return []intKey{{"combined", c.Combined, 0}, {"rx", c.RX, 0}, {"tx", c.TX, 0}}
}
func (c *Coalesce) keys() []intKey {
	return []intKey{{"rx_usecs", c.RXUsecs, 0}, {"tx_usecs", c.TXUsecs, 0}}
}
func (c *Coalesce) flags() []flagKey {
	return []flagKey{{"adaptive_rx", c.AdaptiveRX}, {"adaptive_tx", c.AdaptiveTX}}
}

// validateDepth checks [policy.qos.ets], [policy.rings],
// [policy.channels], [policy.coalesce] and firmware.
func (p *Policy) validateDepth(k *checker, key func(...string) string) {
	f := p.src.file
	if p.QoS != nil && p.QoS.ETS != nil {
		p.QoS.ETS.validate(k, f, key)
	}
	tables := []struct {
		name, example string
		set           bool
		ints          []intKey
		flags         []flagKey
	}{
		{name: "rings", example: "rx = 4096 and/or tx = 4096"},
		{name: "channels", example: "combined = 16, or rx = 8 and tx = 8"},
		{name: "coalesce", example: "rx_usecs = 8, tx_usecs = 16, adaptive_rx = true"},
	}
	if p.Rings != nil {
		tables[0].set, tables[0].ints = true, p.Rings.keys()
	}
	if p.Channels != nil {
		tables[1].set, tables[1].ints = true, p.Channels.keys()
	}
	if p.Coalesce != nil {
		tables[2].set, tables[2].ints, tables[2].flags = true, p.Coalesce.keys(), p.Coalesce.flags()
	}
	for _, tb := range tables {
		if !tb.set {
			continue
		}
		set := false
		for _, ik := range tb.ints {
			if ik.v == nil {
				continue
			}
			set = true
			if *ik.v < ik.min || *ik.v > math.MaxUint32 {
				k.bad(f, key(tb.name, ik.name), "%d is out of range; use %d or more (the driver's maximum is checked when applied: ethtool shows it)", *ik.v, ik.min)
			}
		}
		for _, fk := range tb.flags {
			set = set || fk.v != nil
		}
		if !set {
			k.bad(f, key(tb.name), "[policy.%s] sets nothing; set %s, or remove the table", tb.name, tb.example)
		}
	}
	if p.RDMA != nil {
		p.RDMA.validate(k, f, key)
	}
	if p.Firmware != "" {
		if _, err := firmware.Parse(p.Firmware); err != nil {
			k.bad(f, key("firmware"), "%v", err)
		}
	}
}

func (r *RDMA) validate(k *checker, f string, key func(...string) string) {
	if r.AdaptiveModeration == nil && r.OptionalCounters == nil && r.QPCounters == "" {
		k.bad(f, key("rdma"), "[policy.rdma] sets nothing; set adaptive_moderation = true (or false), optional_counters = [\"cc_rx_ce_pkts\"], qp_counters = \"auto\", or remove the table")
	}
	switch r.QPCounters {
	case "", rdmanl.QPCountersAuto, rdmanl.QPCountersOff:
	default:
		k.bad(f, key("rdma", "qp_counters"), "%q is not a QP counter mode; use %q (a counter per QP type, bound automatically) or %q", r.QPCounters, rdmanl.QPCountersAuto, rdmanl.QPCountersOff)
	}
	if r.OptionalCounters == nil {
		return
	}
	seen := map[string]bool{}
	for _, n := range *r.OptionalCounters {
		switch {
		case n == "" || strings.ContainsAny(n, ", \t\n/"):
			k.bad(f, key("rdma", "optional_counters"), "%q is not a counter name; list names as rdma statistic show link prints them, one a string (\"cc_rx_ce_pkts\")", n)
		case seen[n]:
			k.bad(f, key("rdma", "optional_counters"), "%q is listed twice", n)
		}
		seen[n] = true
	}
}

func (e *ETS) validate(k *checker, f string, key func(...string) string) {
	ok := true
	for _, l := range []struct {
		name, per string
		n         int
	}{{"prio_tc", "priority", len(e.PrioTC)}, {"tsa", "traffic class", len(e.TSA)}, {"tc_bw", "traffic class", len(e.TCBW)}} {
		if l.n != 8 {
			k.bad(f, key("qos", "ets", l.name), "has %d entries; list all 8, one per %s 0-7, as mlnx_qos takes them", l.n, l.per)
			ok = false
		}
	}
	if !ok {
		return
	}
	d := e.desired()
	if err := d.Validate(); err != nil {
		name := "tc_bw"
		switch {
		case strings.Contains(err.Error(), "ets prio_tc"):
			name = "prio_tc"
		case strings.Contains(err.Error(), "ets tsa"):
			name = "tsa"
		}
		k.bad(f, key("qos", "ets", name), "%v", err)
	}
}

// desired converts [policy.qos.ets]; nil stays nil, and so does a table
// that validation refused.
func (e *ETS) desired() *qos.ETS {
	if e == nil || len(e.PrioTC) != 8 || len(e.TSA) != 8 || len(e.TCBW) != 8 {
		return nil
	}
	var d qos.ETS
	copy(d.PrioTC[:], e.PrioTC)
	copy(d.TSA[:], e.TSA)
	copy(d.BW[:], e.TCBW)
	return &d
}

// nicRule converts the ethtool tables to the policy's groups.
func (p *Policy) nicRule() map[string]nicq.Values {
	out := map[string]nicq.Values{}
	add := func(g *nicq.Group, ints []intKey, flags []flagKey) {
		v := nicq.Values{}
		for _, ik := range ints {
			if ik.v != nil {
				v[ik.name] = uint32(*ik.v)
			}
		}
		for _, fk := range flags {
			if fk.v != nil {
				v[fk.name] = 0
				if *fk.v {
					v[fk.name] = 1
				}
			}
		}
		if len(v) > 0 {
			out[g.Kind] = v
		}
	}
	if p.Rings != nil {
		add(nicq.Rings, p.Rings.keys(), nil)
	}
	if p.Channels != nil {
		add(nicq.Channels, p.Channels.keys(), nil)
	}
	if p.Coalesce != nil {
		add(nicq.Coalesce, p.Coalesce.keys(), p.Coalesce.flags())
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
