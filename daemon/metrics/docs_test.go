package metrics

import (
	"bufio"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

const metricsDoc = "../../docs/METRICS.md"

// docNames returns the rdmad_* metric names docs/METRICS.md lists: the
// names in its code spans, leaving out spans of recording rules (with a
// colon).
func docNames(t *testing.T, doc string) map[string]bool {
	t.Helper()
	// Fenced code blocks (examples) are not listings.
	doc = regexp.MustCompile("(?ms)^```.*?^```").ReplaceAllString(doc, "")
	names := map[string]bool{}
	for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(doc, -1) {
		if strings.Contains(m[1], ":") {
			continue
		}
		for _, n := range regexp.MustCompile(`\brdmad_[a-z0-9_]+`).FindAllString(m[1], -1) {
			if !strings.HasSuffix(n, "_") { // a prefix (rdmad_infiniband_), not a name
				names[n] = true
			}
		}
	}
	return names
}

// goldenNames returns the rdmad_* metric families of the golden file.
func goldenNames(t *testing.T) map[string]bool {
	t.Helper()
	f, err := os.Open("testdata/roce-ib.golden")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	names := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) == 4 && fields[1] == "TYPE" && strings.HasPrefix(fields[2], "rdmad_") {
			names[fields[2]] = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return names
}

// TestDocumented: docs/METRICS.md lists every metric the fixture's scrape
// has, and the scrape has every metric the page lists (the fixture covers
// them all), so neither can drift from the other.
func TestDocumented(t *testing.T) {
	b, err := os.ReadFile(metricsDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc, golden := docNames(t, string(b)), goldenNames(t)
	if len(golden) < 50 || !golden["rdmad_healthy"] {
		t.Fatalf("golden file: %d rdmad_ families (want them all, rdmad_healthy among them)", len(golden))
	}
	for _, n := range slices.Sorted(mapKeys(golden)) {
		if !doc[n] {
			t.Errorf("%s is exported but not listed in docs/METRICS.md", n)
		}
	}
	for _, n := range slices.Sorted(mapKeys(doc)) {
		if !golden[n] {
			t.Errorf("docs/METRICS.md lists %s but the scrape of the fixture (testdata/roce-ib.golden) has no such metric", n)
		}
	}
}

// TestCounterTablesDocumented: the tables of docs/METRICS.md that map
// counters/ and hw_counters/ files to metrics, and the gauge patterns, are
// the collector's.
func TestCounterTablesDocumented(t *testing.T) {
	b, err := os.ReadFile(metricsDoc)
	if err != nil {
		t.Fatal(err)
	}
	// | `file` | `rdmad_infiniband_metric` ... |
	row := regexp.MustCompile("(?m)^\\| `([A-Za-z0-9_]+)` \\| `(rdmad_infiniband_[a-z0-9_]+)`")
	code := map[string]string{}
	for f, pc := range portCounters {
		code[f] = descName(t, pc.desc)
	}
	for f, d := range hwCounters {
		if _, dup := code[f]; dup {
			t.Errorf("%s is both a counters/ and a hw_counters/ file with a metric", f)
		}
		code[f] = descName(t, d)
	}
	documented := map[string]bool{}
	for _, m := range row.FindAllStringSubmatch(string(b), -1) {
		file, metric := m[1], m[2]
		documented[file] = true
		switch want, ok := code[file]; {
		case !ok:
			t.Errorf("docs/METRICS.md maps %s to %s; the collector has no metric for that file", file, metric)
		case want != metric:
			t.Errorf("docs/METRICS.md maps %s to %s; the collector exports %s", file, metric, want)
		}
	}
	for _, f := range slices.Sorted(mapKeys(code)) {
		if !documented[f] {
			t.Errorf("%s -> %s is not in the tables of docs/METRICS.md", f, code[f])
		}
	}
	var patterns []string
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z0-9_*]+)` \\|$").FindAllStringSubmatch(string(b), -1) {
		patterns = append(patterns, m[1])
	}
	if !slices.Equal(patterns, hwGaugePatterns) {
		t.Errorf("docs/METRICS.md lists the gauge patterns %q; the collector's are %q", patterns, hwGaugePatterns)
	}
}

var descFQName = regexp.MustCompile(`fqName: "([^"]+)"`)

func descName(t *testing.T, d *prometheus.Desc) string {
	t.Helper()
	m := descFQName.FindStringSubmatch(d.String())
	if m == nil {
		t.Fatalf("no fqName in %s", d)
	}
	return m[1]
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
