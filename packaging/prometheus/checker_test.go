package prometheus

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestPromQLNames: the names the checks read out of an expression are its
// metrics, and none of its labels, strings, functions or keywords.
func TestPromQLNames(t *testing.T) {
	for _, tt := range []struct {
		expr string
		want []string
	}{
		{`rdmad_healthy == 0`, []string{"rdmad_healthy"}},
		{`rdmad_peer_state{job="rdmad",state="down"}`, []string{"rdmad_peer_state"}},
		{`sum by (instance, group) (rate(rdmad_a_total{x=~"a|b"}[5m] offset 1h)) > on (job) group_left (device) rdmad_b`,
			[]string{"rdmad_a_total", "rdmad_b"}},
		{`max without(stat) (rdmad_c) unless ignoring(local) rdmad_d or group by (peer) (rdmad_e) and bool rdmad_f`,
			[]string{"rdmad_c", "rdmad_d", "rdmad_e", "rdmad_f"}},
		{`label_replace(x:rdmad_y:z, "src_group", "$1", "group", "(.+)")`, []string{"x:rdmad_y:z"}},
		{`topk by (node_id) (1, count by (node_id, group) (rdmad_g{node_id!=""}))`, []string{"rdmad_g"}},
		{`rate(rdmad_h_total{instance=~"$instance"}[$__rate_interval]) * 8 / 1e3 + 0.5`, []string{"rdmad_h_total"}},
		{"count(rdmad_i == 0) or vector(0) # a comment naming rdmad_j", []string{"rdmad_i"}},
		{`rdmad_k{label="has } and ( in it"} + rdmad_l`, []string{"rdmad_k", "rdmad_l"}},
	} {
		got, err := promqlNames(tt.expr)
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("promqlNames(%q) = %q, %v; want %q", tt.expr, got, err, tt.want)
		}
	}
	for _, bad := range []string{`{__name__="rdmad_x"}`, `rdmad_x{a="b"`, `sum(rdmad_x`, `rdmad_x{a="b}`} {
		if got, err := promqlNames(bad); err == nil {
			t.Errorf("promqlNames(%q) = %q, want an error", bad, got)
		}
	}
}

// TestCheck: the check names every metric that is not documented, not in
// the golden scrape, or not recorded.
func TestCheck(t *testing.T) {
	k := known{
		documented: map[string]bool{"rdmad_ok_total": true, "rdmad_undocumented_in_golden": false, "rdmad_not_in_golden": true},
		golden:     map[string]bool{"rdmad_ok_total": true, "rdmad_undocumented_in_golden": true},
		recorded:   map[string]bool{"job:rdmad_ok:rate5m": true},
	}
	problems := k.check(t, []use{
		{"ok", `sum(rate(rdmad_ok_total[5m])) / job:rdmad_ok:rate5m`},
		{"bad", `rdmad_undocumented_in_golden + rdmad_not_in_golden + rdmad_made_up + job:rdmad_not:recorded`},
		{"broken", `sum(rdmad_ok_total`},
	})
	for _, want := range []string{
		"bad: rdmad_undocumented_in_golden is not a metric docs/METRICS.md lists",
		"bad: rdmad_not_in_golden is listed in docs/METRICS.md but the collector's scrape",
		"bad: rdmad_made_up is not a metric docs/METRICS.md lists",
		"bad: job:rdmad_not:recorded is no recording rule",
		"broken: unclosed",
	} {
		if !slices.ContainsFunc(problems, func(p string) bool { return strings.HasPrefix(p, want) }) {
			t.Errorf("no problem %q in %q", want, problems)
		}
	}
	if len(problems) != 5 {
		t.Errorf("%d problems, want 5: %q", len(problems), problems)
	}
}

// TestDocumentedNames: names in code spans, not prefixes, recording rules
// or fenced examples.
func TestDocumentedNames(t *testing.T) {
	doc := "| `rdmad_a_total` | counter |\n`rdmad_b{x}`, `rdmad_c` and `rdmad_infiniband_` prefix, " +
		"`group:rdmad_d:ratio`\n```yaml\nexpr: `rdmad_e`\n```\nrdmad_f outside code\n"
	got := documentedNames(doc)
	want := map[string]bool{"rdmad_a_total": true, "rdmad_b": true, "rdmad_c": true}
	if len(got) != len(want) {
		t.Errorf("documentedNames = %v, want %v", got, want)
	}
	for n := range want {
		if !got[n] {
			t.Errorf("documentedNames lacks %s: %v", n, got)
		}
	}
}

// TestYAMLValues: the reader finds the values in each form the rule files
// and tests use, and refuses the forms it does not read.
func TestYAMLValues(t *testing.T) {
	f := filepath.Join(t.TempDir(), "r.yml")
	src := `groups:
  - name: g
    rules:
      # alert: InAComment
      - alert: A
        expr: rdmad_a == 0  # trailing comment
        annotations:
          description: "not an expr: rdmad_x"
      - record: r:rdmad_b:sum
        expr: |
          sum(
            rdmad_b
          )

      - alert: 'C'
        expr: "rdmad_c{x=\"y\"} > 1"
tests:
  - input_series:
      - {series: 'rdmad_d{a="it''s"}', values: '1x5'}
    alert_rule_test:
      - alertname: A
        exp_alerts: []
      - alertname: A
        exp_alerts:
          - exp_labels: {x: y}
`
	if err := os.WriteFile(f, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range yamlValues(t, f, "alert", "record", "expr", "series", "alertname", "exp_alerts") {
		got = append(got, v.key+"="+v.value)
	}
	want := []string{
		"alert=A", "expr=rdmad_a == 0", "record=r:rdmad_b:sum", "expr=sum(\nrdmad_b\n)", "alert=C", `expr=rdmad_c{x="y"} > 1`,
		`series=rdmad_d{a="it's"}`, "alertname=A", "exp_alerts=[]", "alertname=A", "exp_alerts=",
	}
	if !slices.Equal(got, want) {
		t.Errorf("yamlValues:\n got %q\nwant %q", got, want)
	}
	rules := readRules(t, f)
	if len(rules) != 3 || rules[1].record != "r:rdmad_b:sum" || rules[2].expr != `rdmad_c{x="y"} > 1` {
		t.Errorf("readRules = %+v", rules)
	}
}

// TestVariableExpr: the PromQL of Grafana's query variables.
func TestVariableExpr(t *testing.T) {
	for q, want := range map[string]string{
		`label_values(rdmad_build_info{job="$job"}, instance)`: `rdmad_build_info{job="$job"}`,
		`label_values(job)`:                      "",
		`query_result(count by (job) (rdmad_x))`: "count by (job) (rdmad_x)",
		`label_values(rdmad_build_info, job)`:    "rdmad_build_info",
	} {
		if got, err := variableExpr(q); err != nil || got != want {
			t.Errorf("variableExpr(%q) = %q, %v; want %q", q, got, err, want)
		}
	}
	if _, err := variableExpr("metrics(rdmad_.*)"); err == nil {
		t.Error("variableExpr(metrics(...)): no error")
	}
}
