// Package prometheus holds the tests of rdmad's Prometheus rules and Grafana
// dashboard: promtool checks the rules and runs their unit tests
// (tests/*.yml), every rule must have a test, and every metric the rules,
// their tests and the dashboard read must be one rdmad exports
// (docs/METRICS.md and the collector's golden scrape).
package prometheus

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

var ruleFiles = []string{"rdmad-recording.yml", "rdmad-alerts.yml"}

const (
	dashboardFile = "rdmad-dashboard.json"
	metricsDoc    = "../../docs/METRICS.md"
	goldenScrape  = "../../daemon/metrics/testdata/roce-ib.golden"
)

// promtool returns the path of promtool, or fails the test: the rules are
// untested without it.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool is not installed: it checks and unit-tests the Prometheus rules. " +
			"Run ./scripts/deps test as root once: it installs promtool from Debian's prometheus package " +
			"(promtool only, not the server)")
	}
	return p
}

func testFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("tests/*.yml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no rule tests in tests/*.yml (%v)", err)
	}
	return files
}

// TestCheckRules runs promtool check rules, and checks that it found as many
// rules in each file as this test reads (so that the name checks below see
// every rule).
func TestCheckRules(t *testing.T) {
	for _, f := range ruleFiles {
		out, err := exec.Command(promtool(t), "check", "rules", f).CombinedOutput()
		if err != nil {
			t.Errorf("promtool check rules %s: %v\n%s", f, err, out)
			continue
		}
		m := regexp.MustCompile(`SUCCESS: (\d+) rules found`).FindSubmatch(out)
		if m == nil {
			t.Errorf("promtool check rules %s: no rule count in\n%s", f, out)
			continue
		}
		n, _ := strconv.Atoi(string(m[1]))
		rules := readRules(t, f)
		if n != len(rules) {
			t.Errorf("%s: promtool found %d rules, this test reads %d", f, n, len(rules))
		}
	}
}

// TestRuleUnitTests runs promtool test rules on tests/*.yml.
func TestRuleUnitTests(t *testing.T) {
	args := append([]string{"test", "rules"}, testFiles(t)...)
	out, err := exec.Command(promtool(t), args...).CombinedOutput()
	if err != nil {
		t.Errorf("promtool test rules: %v\n%s", err, out)
	}
}

// TestEveryRuleTested: every alert has a unit test in which it fires, and
// every recording rule's series is checked by a promql_expr_test.
func TestEveryRuleTested(t *testing.T) {
	firing := map[string]bool{}
	exprs := ""
	for _, f := range testFiles(t) {
		alert := ""
		for _, v := range yamlValues(t, f, "alertname", "exp_alerts", "expr") {
			switch v.key {
			case "alertname":
				alert = v.value
			case "exp_alerts":
				if alert == "" {
					t.Errorf("%s:%d: exp_alerts without an alertname", f, v.line)
				}
				if v.value != "[]" {
					firing[alert] = true
				}
			case "expr":
				exprs += v.value + "\n"
			}
		}
	}
	for _, r := range allRules(t) {
		switch {
		case r.alert != "" && !firing[r.alert]:
			t.Errorf("%s: alert %s has no unit test in tests/ that expects it to fire", r.file, r.alert)
		case r.record != "" && !slices.Contains(metricNames(t, exprs), r.record):
			t.Errorf("%s: recording rule %s has no promql_expr_test in tests/", r.file, r.record)
		}
	}
}

// TestMetricNames: every metric the rules, their tests and the dashboard
// read is listed in docs/METRICS.md and in the collector's golden scrape,
// or is a series of the recording rules.
func TestMetricNames(t *testing.T) {
	k := knownNames(t)
	var uses []use
	for _, r := range allRules(t) {
		uses = append(uses, use{r.file + ": " + r.name(), r.expr})
	}
	for _, f := range testFiles(t) {
		for _, v := range yamlValues(t, f, "series", "expr") {
			uses = append(uses, use{fmt.Sprintf("%s:%d", f, v.line), v.value})
		}
	}
	for _, d := range dashboardExprs(t) {
		uses = append(uses, use{dashboardFile + ": " + d.where, d.expr})
	}
	if len(uses) < 50 {
		t.Fatalf("only %d expressions found in the rules, tests and dashboard", len(uses))
	}
	for _, p := range k.check(t, uses) {
		t.Error(p)
	}
}

// TestDashboardPromQL has promtool parse every expression of the dashboard
// (Grafana's variables replaced by values).
func TestDashboardPromQL(t *testing.T) {
	repl := strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h", "$job", "rdmad", "$instance", ".*")
	var b strings.Builder
	b.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	exprs := dashboardExprs(t)
	for i, d := range exprs {
		q, _ := json.Marshal(repl.Replace(d.expr)) // a JSON string is a YAML double-quoted scalar
		fmt.Fprintf(&b, "      - record: dashboard_expr_%d\n        expr: %s\n", i, q)
	}
	f := filepath.Join(t.TempDir(), "dashboard.yml")
	if err := os.WriteFile(f, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool(t), "check", "rules", f).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules on the dashboard's %d expressions: %v\n%s", len(exprs), err, out)
		for i, d := range exprs {
			t.Logf("dashboard_expr_%d: %s: %s", i, d.where, d.expr)
		}
	}
}

// --- rules --------------------------------------------------------------

type rule struct {
	file, alert, record, expr string
}

func (r rule) name() string {
	if r.alert != "" {
		return "alert " + r.alert
	}
	return "record " + r.record
}

// readRules reads the rules of a rule file: each alert: or record: with the
// expr: that follows it.
func readRules(t *testing.T, file string) []rule {
	t.Helper()
	var rules []rule
	for _, v := range yamlValues(t, file, "alert", "record", "expr") {
		switch v.key {
		case "alert":
			rules = append(rules, rule{file: file, alert: v.value})
		case "record":
			rules = append(rules, rule{file: file, record: v.value})
		case "expr":
			if len(rules) == 0 || rules[len(rules)-1].expr != "" {
				t.Fatalf("%s:%d: expr without an alert or record before it", file, v.line)
			}
			rules[len(rules)-1].expr = v.value
		}
	}
	for _, r := range rules {
		if r.expr == "" {
			t.Fatalf("%s: %s has no expr", file, r.name())
		}
	}
	return rules
}

func allRules(t *testing.T) []rule {
	t.Helper()
	var all []rule
	for _, f := range ruleFiles {
		all = append(all, readRules(t, f)...)
	}
	return all
}

// --- the dashboard ---------------------------------------------------------

type dashExpr struct{ where, expr string }

// dashboardExprs returns every "expr" of the dashboard (panel targets,
// wherever they nest) and the expressions of its query variables.
func dashboardExprs(t *testing.T) []dashExpr {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash map[string]any
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	var out []dashExpr
	// Panels, and the panels of rows, wherever they nest.
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			targets, _ := v["targets"].([]any)
			for _, tg := range targets {
				tg, _ := tg.(map[string]any)
				e, ok := tg["expr"].(string)
				if !ok {
					t.Errorf("%s: panel %q: a target without a PromQL expr: %v", dashboardFile, v["title"], tg)
					continue
				}
				out = append(out, dashExpr{fmt.Sprintf("panel %q target %v", v["title"], tg["refId"]), e})
			}
			for k, c := range v {
				if k != "targets" {
					walk(c)
				}
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	walk(dash["panels"])
	tmpl, _ := dash["templating"].(map[string]any)
	vars, _ := tmpl["list"].([]any)
	for _, v := range vars {
		v, _ := v.(map[string]any)
		if v["type"] != "query" {
			continue
		}
		q := v["query"]
		if m, ok := q.(map[string]any); ok {
			q = m["query"]
		}
		s, _ := q.(string)
		e, err := variableExpr(s)
		if err != nil {
			t.Errorf("%s: variable %v: %v", dashboardFile, v["name"], err)
			continue
		}
		if e != "" {
			out = append(out, dashExpr{fmt.Sprintf("variable %v", v["name"]), e})
		}
	}
	return out
}

// variableExpr returns the PromQL in a Grafana query variable:
// label_values(expr, label), label_values(label) (none) or
// query_result(expr).
func variableExpr(q string) (string, error) {
	q = strings.TrimSpace(q)
	if m := regexp.MustCompile(`^label_values\((?:(.*),)?\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)$`).FindStringSubmatch(q); m != nil {
		return m[1], nil
	}
	if m := regexp.MustCompile(`^query_result\((.*)\)$`).FindStringSubmatch(q); m != nil {
		return m[1], nil
	}
	return "", fmt.Errorf("query %q: not label_values(...) or query_result(...)", q)
}

// --- metric names ----------------------------------------------------------

type use struct{ where, expr string }

// known holds the names an expression may read.
type known struct {
	documented, golden, recorded map[string]bool
	// histograms are the golden scrape's histogram families, whose
	// _bucket, _sum and _count series the rules read by those names.
	histograms map[string]bool
}

func knownNames(t *testing.T) known {
	t.Helper()
	doc, err := os.ReadFile(metricsDoc)
	if err != nil {
		t.Fatal(err)
	}
	golden, err := os.ReadFile(goldenScrape)
	if err != nil {
		t.Fatal(err)
	}
	k := known{documented: documentedNames(string(doc)), golden: map[string]bool{}, recorded: map[string]bool{}, histograms: map[string]bool{}}
	for _, m := range regexp.MustCompile(`(?m)^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (\w+)`).FindAllStringSubmatch(string(golden), -1) {
		k.golden[m[1]] = true
		if m[2] == "histogram" {
			k.histograms[m[1]] = true
		}
	}
	for _, r := range allRules(t) {
		if r.record != "" {
			k.recorded[r.record] = true
		}
	}
	if len(k.documented) < 50 || !k.documented["rdmad_healthy"] || len(k.golden) < 50 || len(k.recorded) == 0 {
		t.Fatalf("read %d documented names, %d in the golden scrape, %d recorded: too few", len(k.documented), len(k.golden), len(k.recorded))
	}
	return k
}

// documentedNames returns the metric names docs/METRICS.md lists in its code
// spans (outside fenced blocks): rdmad_* names, not prefixes such as
// rdmad_infiniband_, and not the recording rules (with a colon).
func documentedNames(doc string) map[string]bool {
	doc = regexp.MustCompile("(?ms)^```.*?^```").ReplaceAllString(doc, "")
	names := map[string]bool{}
	for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(doc, -1) {
		if strings.Contains(m[1], ":") {
			continue
		}
		for _, n := range regexp.MustCompile(`\brdmad_[a-z0-9_]+`).FindAllString(m[1], -1) {
			if !strings.HasSuffix(n, "_") {
				names[n] = true
			}
		}
	}
	return names
}

// check returns a problem for each name an expression reads that is not a
// recorded series, or not both documented and in the golden scrape.
func (k known) check(t *testing.T, uses []use) []string {
	t.Helper()
	var problems []string
	for _, u := range uses {
		names, err := promqlNames(u.expr)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v in %q", u.where, err, u.expr))
			continue
		}
		for _, n := range names {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if base, ok := strings.CutSuffix(n, suffix); ok && k.histograms[base] {
					n = base // a series of a histogram the docs list by its family's name
				}
			}
			switch {
			case strings.Contains(n, ":"):
				if !k.recorded[n] {
					problems = append(problems, fmt.Sprintf("%s: %s is no recording rule of %s", u.where, n, strings.Join(ruleFiles, " or ")))
				}
			case !k.documented[n]:
				problems = append(problems, fmt.Sprintf("%s: %s is not a metric docs/METRICS.md lists", u.where, n))
			case !k.golden[n]:
				problems = append(problems, fmt.Sprintf("%s: %s is listed in docs/METRICS.md but the collector's scrape (%s) has no such metric", u.where, n, goldenScrape))
			}
		}
	}
	return problems
}

func metricNames(t *testing.T, expr string) []string {
	t.Helper()
	names, err := promqlNames(expr)
	if err != nil {
		t.Fatalf("%v in %q", err, expr)
	}
	return names
}

// PromQL words that are not metric names when they are not followed by
// "(": keywords, and aggregation operators (which may have a by clause
// before their parenthesis).
var promqlWords = map[string]bool{
	"and": true, "or": true, "unless": true, "bool": true, "offset": true, "atan2": true, "inf": true, "nan": true,
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true, "count": true,
	"count_values": true, "bottomk": true, "topk": true, "quantile": true, "limitk": true, "limit_ratio": true,
}

// promqlNames returns the metric names a PromQL expression (or a series of a
// test, metric{labels}) reads: identifiers outside label matchers, strings,
// ranges and the label lists of by, without, on, ignoring, group_left and
// group_right, that are not keywords, functions or Grafana variables.
func promqlNames(expr string) ([]string, error) {
	var names []string
	s := expr
	depth := 0 // of parentheses
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '(':
			depth++
			i++
		case c == ')':
			if depth--; depth < 0 {
				return nil, fmt.Errorf("unbalanced ')' at %d", i)
			}
			i++
		case c == '#':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			end, err := skipString(s, i)
			if err != nil {
				return nil, err
			}
			i = end
		case c == '{' || c == '[': // label matchers, a range
			end, err := skipGroup(s, i)
			if err != nil {
				return nil, err
			}
			if c == '{' && nameMatcher.MatchString(quoted.ReplaceAllString(s[i:end], `""`)) {
				return nil, fmt.Errorf("a __name__ matcher hides the metric name")
			}
			i = end
		case c == '$': // a Grafana variable
			i++
			if i < len(s) && s[i] == '{' {
				end, err := skipGroup(s, i)
				if err != nil {
					return nil, err
				}
				i = end
				continue
			}
			for i < len(s) && isIdent(s[i], false) {
				i++
			}
		case c >= '0' && c <= '9' || c == '.' && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9':
			for i < len(s) && (isIdent(s[i], false) || s[i] == '.') {
				i++
			}
		case isIdent(c, true):
			j := i
			for j < len(s) && isIdent(s[j], false) {
				j++
			}
			word := s[i:j]
			k := j
			for k < len(s) && (s[k] == ' ' || s[k] == '\t' || s[k] == '\n') {
				k++
			}
			next := byte(0)
			if k < len(s) {
				next = s[k]
			}
			switch {
			case word == "__name__":
				return nil, fmt.Errorf("a __name__ matcher hides the metric name")
			case slices.Contains([]string{"by", "without", "on", "ignoring", "group_left", "group_right"}, word) && next == '(':
				end, err := skipGroup(s, k)
				if err != nil {
					return nil, err
				}
				j = end
			case promqlWords[word] || next == '(':
				// a keyword, an aggregation or a function
			default:
				if !slices.Contains(names, word) {
					names = append(names, word)
				}
			}
			i = j
		default:
			i++
		}
	}
	if depth != 0 {
		return nil, fmt.Errorf("unclosed '(': %d more than ')'", depth)
	}
	return names, nil
}

var (
	quoted      = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	nameMatcher = regexp.MustCompile(`[{,\s]__name__\s*[=!]`)
)

func isIdent(c byte, first bool) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || !first && c >= '0' && c <= '9'
}

// skipString returns the index after the string that starts at s[i].
func skipString(s string, i int) (int, error) {
	q := s[i]
	for j := i + 1; j < len(s); j++ {
		switch {
		case s[j] == '\\' && q != '`':
			j++
		case s[j] == q:
			return j + 1, nil
		}
	}
	return 0, fmt.Errorf("unterminated string at %d", i)
}

// skipGroup returns the index after the bracket that closes the one at
// s[i] ({, [ or (), skipping strings and nested brackets.
func skipGroup(s string, i int) (int, error) {
	var stack []byte
	closing := map[byte]byte{'{': '}', '[': ']', '(': ')'}
	for j := i; j < len(s); j++ {
		switch c := s[j]; c {
		case '"', '\'', '`':
			end, err := skipString(s, j)
			if err != nil {
				return 0, err
			}
			j = end - 1
		case '{', '[', '(':
			stack = append(stack, closing[c])
		case '}', ']', ')':
			if len(stack) == 0 || stack[len(stack)-1] != c {
				return 0, fmt.Errorf("unbalanced %q at %d", c, j)
			}
			stack = stack[:len(stack)-1]
			if len(stack) == 0 {
				return j + 1, nil
			}
		}
	}
	return 0, fmt.Errorf("unclosed %q at %d", s[i], i)
}

// --- a reader of the YAML these files use ------------------------------

type yamlValue struct {
	key, value string
	line       int
}

var yamlKey = regexp.MustCompile(`(?:^|[\s{,-])([a-z_]+):(?:\s|$)`)

// yamlValues returns, in file order, the scalar values of the given keys in
// a rule or rule test file: plain, single- or double-quoted scalars on the
// key's line (also in a flow mapping, {series: '...', values: '...'}), and
// literal or folded block scalars (expr: |). It fails the test on a form it
// does not read, rather than miss a value. Keys of nested mappings (a key
// with nothing after it) have the value "".
func yamlValues(t *testing.T, file string, keys ...string) []yamlValue {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	var out []yamlValue
	for n := 0; n < len(lines); n++ {
		line := lines[n]
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		for _, m := range yamlKey.FindAllStringSubmatchIndex(line, -1) {
			key := line[m[2]:m[3]]
			if !slices.Contains(keys, key) || inQuotes(line, m[2]) {
				continue
			}
			rest := line[m[1]:]
			if m[1] > 0 && line[m[1]-1] == ':' {
				rest = ""
			}
			rest = strings.TrimLeft(rest, " \t")
			flow := strings.Contains(line[:m[2]], "{")
			v := yamlValue{key: key, line: n + 1}
			switch {
			case rest == "" || strings.HasPrefix(rest, "#"):
				// a nested mapping or sequence follows
			case rest[0] == '\'':
				end := 1
				for ; end < len(rest); end++ {
					if rest[end] == '\'' {
						if end+1 < len(rest) && rest[end+1] == '\'' {
							end++
							continue
						}
						break
					}
				}
				if end >= len(rest) {
					t.Fatalf("%s:%d: %s: a single-quoted scalar over several lines; keep it on one line", file, n+1, key)
				}
				v.value = strings.ReplaceAll(rest[1:end], "''", "'")
			case rest[0] == '"':
				end := 1
				for ; end < len(rest) && rest[end] != '"'; end++ {
					if rest[end] == '\\' {
						end++
					}
				}
				if end >= len(rest) {
					t.Fatalf("%s:%d: %s: a double-quoted scalar over several lines; keep it on one line", file, n+1, key)
				}
				s, err := strconv.Unquote(rest[:end+1])
				if err != nil {
					t.Fatalf("%s:%d: %s: %v", file, n+1, key, err)
				}
				v.value = s
			case rest[0] == '|' || rest[0] == '>':
				indent := len(line) - len(strings.TrimLeft(line, " "))
				var block []string
				for n+1 < len(lines) {
					l := lines[n+1]
					if strings.TrimSpace(l) != "" && len(l)-len(strings.TrimLeft(l, " ")) <= indent {
						break
					}
					block = append(block, strings.TrimSpace(l))
					n++
				}
				v.value = strings.TrimSpace(strings.Join(block, "\n"))
			default:
				if flow {
					if i := strings.IndexAny(rest, ",}"); i >= 0 {
						rest = rest[:i]
					}
				}
				if i := strings.Index(rest, " #"); i >= 0 {
					rest = rest[:i]
				}
				v.value = strings.TrimSpace(rest)
			}
			out = append(out, v)
		}
	}
	return out
}

// inQuotes reports whether s[i] is inside a quoted scalar of the line.
func inQuotes(s string, i int) bool {
	var q byte
	for j := 0; j < i; j++ {
		switch {
		case q == 0 && (s[j] == '\'' || s[j] == '"'):
			q = s[j]
		case q == '"' && s[j] == '\\':
			j++
		case q != 0 && s[j] == q:
			q = 0
		}
	}
	return q != 0
}
