package prometheus

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
)

// What a fleet needs of the rules beyond their unit tests (#27 item 5):
// a runbook section per alert, inhibit rules that Alertmanager accepts and
// that name real alerts, group names that do not collide, and no rule that
// reads a long range of every series at each evaluation.

const (
	alertmanagerFile = "rdmad-alertmanager.yml"
	runbookDoc       = "../../docs/RUNBOOK.md"
	runbookURL       = "https://github.com/rdmad/rdmad/blob/main/docs/RUNBOOK.md#"
	// maxRange bounds the range of a range vector in a rule: an hour of
	// samples per series is what an evaluation may read.
	maxRange = time.Hour
)

// TestRunbookURLs: every alert has a runbook_url to its own section of
// docs/RUNBOOK.md, and that section exists; every section is an alert's.
func TestRunbookURLs(t *testing.T) {
	doc, err := os.ReadFile(runbookDoc)
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^## (\S+)$`).FindAllStringSubmatch(string(doc), -1) {
		sections[m[1]] = true
	}
	alerts := map[string]bool{}
	for _, f := range ruleFiles {
		alert := ""
		urls := 0
		for _, v := range yamlValues(t, f, "alert", "runbook_url") {
			switch v.key {
			case "alert":
				alert = v.value
				alerts[alert] = true
			case "runbook_url":
				urls++
				if want := runbookURL + strings.ToLower(alert); v.value != want {
					t.Errorf("%s:%d: alert %s has runbook_url %q, want %q", f, v.line, alert, v.value, want)
				}
				if !sections[alert] {
					t.Errorf("%s:%d: docs/RUNBOOK.md has no section \"## %s\"", f, v.line, alert)
				}
			}
		}
		if n := len(readAlerts(t, f)); urls != n {
			t.Errorf("%s: %d runbook_url for %d alerts", f, urls, n)
		}
	}
	for s := range sections {
		if !alerts[s] {
			t.Errorf("docs/RUNBOOK.md has a section %q that is no alert", s)
		}
	}
}

func readAlerts(t *testing.T, f string) []string {
	var out []string
	for _, r := range readRules(t, f) {
		if r.alert != "" {
			out = append(out, r.alert)
		}
	}
	return out
}

// TestGroupNamesUnique: Prometheus needs a group name once per file, and
// the fleet reads them across the files: no two groups share a name.
func TestGroupNamesUnique(t *testing.T) {
	seen := map[string]string{}
	for _, f := range ruleFiles {
		for _, v := range yamlValues(t, f, "name") {
			if prev, ok := seen[v.value]; ok {
				t.Errorf("%s:%d: group %q is also in %s", f, v.line, v.value, prev)
			}
			seen[v.value] = fmt.Sprintf("%s:%d", f, v.line)
		}
	}
	if len(seen) < 2 {
		t.Fatalf("found %d groups; the test reads no group names", len(seen))
	}
}

// TestNoLongRanges: no rule reads more than maxRange of its series at
// each evaluation ([1d] of every port, say): what the alerts need of the
// last day, the recording rules carry forward.
func TestNoLongRanges(t *testing.T) {
	rangeRE := regexp.MustCompile(`\[([0-9][0-9a-z]*)(:[0-9a-z]*)?\]`)
	n := 0
	for _, r := range allRules(t) {
		for _, m := range rangeRE.FindAllStringSubmatch(r.expr, -1) {
			n++
			d, err := model.ParseDuration(m[1])
			if err != nil {
				t.Errorf("%s: %s: range %q: %v", r.file, r.name(), m[0], err)
				continue
			}
			if time.Duration(d) > maxRange {
				t.Errorf("%s: %s reads %s of its series at each evaluation (more than %s): carry it in a recording rule", r.file, r.name(), m[0], maxRange)
			}
		}
	}
	if n == 0 {
		t.Fatal("no range found in any rule: the test reads no expressions")
	}
}

// amtool returns the path of amtool, or fails the test: the inhibit rules
// are unchecked without it.
func amtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("amtool")
	if err != nil {
		t.Fatal("amtool is not installed: it checks the Alertmanager inhibit rules. " +
			"Run ./scripts/deps test as root once: it installs amtool from Debian's prometheus-alertmanager package " +
			"(amtool only, not the server)")
	}
	return p
}

// TestInhibitRules: Alertmanager accepts rdmad-alertmanager.yml (amtool
// check-config), and every alert name its matchers name is an alert of
// rdmad-alerts.yml.
func TestInhibitRules(t *testing.T) {
	out, err := exec.Command(amtool(t), "check-config", alertmanagerFile).CombinedOutput()
	if err != nil {
		t.Fatalf("amtool check-config %s: %v\n%s", alertmanagerFile, err, out)
	}
	if !regexp.MustCompile(`- [1-9][0-9]* inhibit rules`).Match(out) {
		t.Errorf("amtool check-config %s found no inhibit rules:\n%s", alertmanagerFile, out)
	}
	var alerts []string
	for _, f := range ruleFiles {
		alerts = append(alerts, readAlerts(t, f)...)
	}
	raw, err := os.ReadFile(alertmanagerFile)
	if err != nil {
		t.Fatal(err)
	}
	named := 0
	for _, m := range regexp.MustCompile(`alertname=~?"([^"]+)"`).FindAllStringSubmatch(string(raw), -1) {
		for _, name := range strings.Split(m[1], "|") {
			named++
			if !slices.Contains(alerts, name) {
				t.Errorf("%s names alert %q, which rdmad-alerts.yml does not have", alertmanagerFile, name)
			}
		}
	}
	if named == 0 {
		t.Fatalf("%s names no alert", alertmanagerFile)
	}
}
