package config

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rdmad/rdmad/policy/nicq"
	"github.com/rdmad/rdmad/policy/qos"
)

// TestLoadDepth: [policy.qos.ets], [policy.rings], [policy.channels],
// [policy.coalesce] and firmware reach the policy's rule.
func TestLoadDepth(t *testing.T) {
	p := write(t, map[string]string{"rdmad.toml": `
[[policy]]
name = "fabric"
netdevs = ["ens1f*"]
firmware = ">=22.39.1002"
[policy.qos.ets]
prio_tc = [0, 0, 0, 1, 0, 0, 0, 0]
tsa = ["ets", "ets", "strict", "strict", "strict", "strict", "strict", "strict"]
tc_bw = [40, 60, 0, 0, 0, 0, 0, 0]
[policy.rings]
rx = 8192
[policy.channels]
combined = 16
[policy.coalesce]
rx_usecs = 8
adaptive_rx = false

[[policy]]
name = "fw-only"
devices = ["mlx5_*"]
firmware = "22.39.1002"

[[policy]]
name = "dim"
devices = ["mlx5_*"]
[policy.rdma]
adaptive_moderation = true

[[policy]]
name = "counters"
devices = ["mlx5_*"]
[policy.rdma]
optional_counters = ["cc_rx_cnp_pkts", "cc_rx_ce_pkts"]
qp_counters = "auto"

[[policy]]
name = "no-counters"
devices = ["rxe*"]
[policy.rdma]
optional_counters = []
`})
	cfg, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	rules := cfg.Rules()
	wantETS := &qos.ETS{PrioTC: [8]int{0, 0, 0, 1}, TSA: [8]string{"ets", "ets", "strict", "strict", "strict", "strict", "strict", "strict"}, BW: [8]int{40, 60}}
	if diff := cmp.Diff(wantETS, rules[0].QoS.ETS); diff != "" {
		t.Errorf("ets (-want +got):\n%s", diff)
	}
	wantNIC := map[string]nicq.Values{"rings": {"rx": 8192}, "channels": {"combined": 16}, "coalesce": {"rx_usecs": 8, "adaptive_rx": 0}}
	if diff := cmp.Diff(wantNIC, rules[0].NIC); diff != "" {
		t.Errorf("nic (-want +got):\n%s", diff)
	}
	if am := rules[2].AdaptiveModeration; am == nil || !*am || rules[0].AdaptiveModeration != nil {
		t.Errorf("adaptive_moderation: %v, %v", rules[2].AdaptiveModeration, rules[0].AdaptiveModeration)
	}
	if oc := rules[3].OptionalCounters; oc == nil || !cmp.Equal(*oc, []string{"cc_rx_ce_pkts", "cc_rx_cnp_pkts"}) || rules[3].QPCounters != "auto" {
		t.Errorf("counters: %v, %q; want sorted names and auto", oc, rules[3].QPCounters)
	}
	if oc := rules[4].OptionalCounters; oc == nil || len(*oc) != 0 || rules[4].QPCounters != "" || rules[2].OptionalCounters != nil {
		t.Errorf("optional_counters = [] is %v (want empty, not unmanaged); unset is %v", oc, rules[2].OptionalCounters)
	}
	if rules[0].Firmware != ">=22.39.1002" || rules[1].Firmware != "22.39.1002" || rules[1].NIC != nil || rules[1].QoS != nil {
		t.Errorf("rules = %+v", rules)
	}
}

func TestLoadDepthErrors(t *testing.T) {
	const head = "[[policy]]\nname = \"p\"\nnetdevs = [\"x\"]\n"
	for _, tt := range []struct {
		name, body string
		want       []string
	}{
		{"ets lengths", head + "[policy.qos.ets]\nprio_tc = [0, 0, 0]\ntsa = [\"ets\"]\ntc_bw = [100, 0, 0, 0, 0, 0, 0, 0]\n", []string{
			`D/rdmad.toml:5: policy "p".qos.ets.prio_tc: has 3 entries; list all 8, one per priority 0-7, as mlnx_qos takes them`,
			`D/rdmad.toml:6: policy "p".qos.ets.tsa: has 1 entries; list all 8, one per traffic class 0-7, as mlnx_qos takes them`,
		}},
		{"ets sum", head + "[policy.qos.ets]\nprio_tc = [0, 0, 0, 1, 0, 0, 0, 0]\ntsa = [\"ets\", \"ets\", \"strict\", \"strict\", \"strict\", \"strict\", \"strict\", \"strict\"]\ntc_bw = [50, 40, 0, 0, 0, 0, 0, 0]\n", []string{
			`D/rdmad.toml:7: policy "p".qos.ets.tc_bw: qos: ets tc_bw: the shares of the ets traffic classes sum to 90%, want 100%`,
		}},
		{"ets tsa", head + "[policy.qos.ets]\nprio_tc = [0, 0, 0, 1, 0, 0, 0, 0]\ntsa = [\"ets\", \"wrr\", \"strict\", \"strict\", \"strict\", \"strict\", \"strict\", \"strict\"]\ntc_bw = [100, 0, 0, 0, 0, 0, 0, 0]\n", []string{
			`D/rdmad.toml:6: policy "p".qos.ets.tsa: qos: ets tsa: traffic class 1: "wrr" is not "strict", "ets" or "vendor"`,
		}},
		{"ets class", head + "[policy.qos.ets]\nprio_tc = [0, 0, 0, 9, 0, 0, 0, 0]\ntsa = [\"ets\", \"strict\", \"strict\", \"strict\", \"strict\", \"strict\", \"strict\", \"strict\"]\ntc_bw = [100, 0, 0, 0, 0, 0, 0, 0]\n", []string{
			`D/rdmad.toml:5: policy "p".qos.ets.prio_tc: qos: ets prio_tc: priority 3 -> traffic class 9: want 0..7`,
		}},
		{"rings", head + "[policy.rings]\nrx = 0\ntx = -4\n", []string{
			`D/rdmad.toml:5: policy "p".rings.rx: 0 is out of range; use 1 or more (the driver's maximum is checked when applied: ethtool shows it)`,
			`D/rdmad.toml:6: policy "p".rings.tx: -4 is out of range; use 1 or more (the driver's maximum is checked when applied: ethtool shows it)`,
		}},
		{"empty channels", head + "[policy.channels]\n", []string{
			`D/rdmad.toml:4: policy "p".channels: [policy.channels] sets nothing; set combined = 16, or rx = 8 and tx = 8, or remove the table`,
		}},
		{"coalesce unknown key", head + "[policy.coalesce]\nrx_frames = 4\n", []string{
			`D/rdmad.toml:5: policy "p".coalesce.rx_frames: unknown key; see rdmad.toml(5) for the keys rdmad knows`,
		}},
		{"empty coalesce", head + "[policy.coalesce]\n", []string{
			`D/rdmad.toml:4: policy "p".coalesce: [policy.coalesce] sets nothing; set rx_usecs = 8, tx_usecs = 16, adaptive_rx = true, or remove the table`,
		}},
		{"empty rdma", head + "[policy.rdma]\n", []string{
			`D/rdmad.toml:4: policy "p".rdma: [policy.rdma] sets nothing; set adaptive_moderation = true (or false), optional_counters = ["cc_rx_ce_pkts"], qp_counters = "auto", or remove the table`,
		}},
		{"qp_counters", head + "[policy.rdma]\nqp_counters = \"on\"\n", []string{
			`D/rdmad.toml:5: policy "p".rdma.qp_counters: "on" is not a QP counter mode; use "auto" (a counter per QP type, bound automatically) or "off"`,
		}},
		{"optional_counters", head + "[policy.rdma]\noptional_counters = [\"a,b\", \"c\", \"c\"]\n", []string{
			`D/rdmad.toml:5: policy "p".rdma.optional_counters: "a,b" is not a counter name; list names as rdma statistic show link prints them, one a string ("cc_rx_ce_pkts")`,
			`D/rdmad.toml:5: policy "p".rdma.optional_counters: "c" is listed twice`,
		}},
		{"firmware", head + "firmware = \"latest\"\n", []string{
			`D/rdmad.toml:4: policy "p".firmware: firmware "latest": "latest" is not a dotted version of decimal numbers; write a version such as "22.39.1002" or ">=22.39.1002"`,
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := write(t, map[string]string{"rdmad.toml": tt.body})
			_, err := Load(p)
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("Load: %v (%T), want config.Errors", err, err)
			}
			var got []string
			for _, e := range errs {
				got = append(got, strings.ReplaceAll(e.Error(), filepath.Dir(p), "D"))
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLoadRDMASystem(t *testing.T) {
	p := write(t, map[string]string{"rdmad.toml": "[rdma]\nnetns_mode = \"exclusive\"\n"})
	cfg, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.RDMA.NetnsMode != "exclusive" {
		t.Errorf("netns_mode = %q", cfg.RDMA.NetnsMode)
	}
	p = write(t, map[string]string{"rdmad.toml": "[rdma]\nnetns_mode = \"private\"\n"})
	_, err = Load(p)
	var errs Errors
	if !errors.As(err, &errs) || len(errs) != 1 {
		t.Fatalf("Load: %v, want one error", err)
	}
	want := `D/rdmad.toml:2: rdma.netns_mode: "private" is not a netns mode; use "shared" or "exclusive" (rdma system set netns)`
	if got := strings.ReplaceAll(errs[0].Error(), filepath.Dir(p), "D"); got != want {
		t.Errorf("error %q, want %q", got, want)
	}
}
