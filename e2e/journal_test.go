//go:build e2e

package e2e

// rdmad's journal message catalog on the test bed: the package installs
// it, journalctl indexes it, and `journalctl -x` explains a tagged event
// (a rejected configuration) with its text and the event's fields.

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
)

const (
	journalCatalog = "/usr/lib/systemd/catalog/rdmad.catalog"
	journalDropIn  = "/etc/rdmad/rdmad.d/90-e2e-journal.toml"
	// journalBadKey is the unknown key the bad drop-in sets; the error
	// names it.
	journalBadKey = "e2e_journal_bogus"
)

// journalRequireCatalog skips t when rdmad was installed from bin/ (the
// catalog comes with the packages) and fails it when the installed
// package lacks the catalog.
func journalRequireCatalog(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(journalCatalog); err == nil {
		return
	} else if out, _ := run("dpkg-query", "-W", "-f=${Status}", "rdmad"); strings.TrimSpace(out) == "install ok installed" {
		t.Fatalf("%s: %v: the installed .deb lacks rdmad's message catalog (nfpm.yaml: packaging/rdmad.catalog -> %s)", journalCatalog, err, journalCatalog)
	} else {
		t.Skipf("%s: %v: rdmad is installed from bin/, without its catalog; run make package && RDMAD_VM_INSTALL=deb test/vm/e2e", journalCatalog, err)
	}
}

// TestJournalCatalog: after `journalctl --update-catalog`, a bad drop-in
// and a reload, `journalctl -x -u rdmad MESSAGE_ID=<config rejected>`
// shows the entry with the catalog's subject and text, the entry's fields
// (why, the error naming the bad key) filled in.
func TestJournalCatalog(t *testing.T) {
	requireVM(t)
	journalRequireCatalog(t)
	waitActive(t)
	id := apitype.MsgConfigRejected

	mustRun(t, "journalctl", "--update-catalog")
	const subject = "Configuration rejected; the last good one stays in force"
	if out := mustRun(t, "journalctl", "--list-catalog", id); !strings.Contains(out, subject) {
		t.Fatalf("journalctl --list-catalog %s = %q, want the subject %q", id, out, subject)
	}

	since := fmt.Sprintf("@%d", time.Now().Add(-time.Second).Unix())
	if err := os.WriteFile(journalDropIn, []byte("[daemon]\n"+journalBadKey+" = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.Remove(journalDropIn)
		if _, err := run("systemctl", "reload", "rdmad.service"); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		waitFor(t, 30*time.Second, "the configuration to load again", func() (bool, string) {
			out, _ := run("rdmactl", "status", "--json")
			var s struct {
				Config struct {
					Error string `json:"error"`
				} `json:"config"`
			}
			if err := json.Unmarshal([]byte(out), &s); err != nil {
				return false, err.Error()
			}
			return s.Config.Error == "", "config.error " + s.Config.Error
		})
	})
	mustRun(t, "systemctl", "reload", "rdmad.service")

	// The entry, with its fields.
	var entry map[string]any
	waitFor(t, 30*time.Second, "a config-rejected journal entry naming "+journalBadKey, func() (bool, string) {
		out, err := run("journalctl", "-u", "rdmad.service", "MESSAGE_ID="+id, "--since", since, "-o", "json", "--no-pager")
		if err != nil {
			return false, err.Error()
		}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			var e map[string]any
			if json.Unmarshal([]byte(line), &e) == nil && strings.Contains(fmt.Sprint(e["ERR"]), journalBadKey) {
				entry = e
				return true, ""
			}
		}
		return false, "journalctl -o json: " + out
	})
	for k, want := range map[string]string{"PRIORITY": "3", "SYSLOG_IDENTIFIER": "rdmad", "_SYSTEMD_UNIT": "rdmad.service"} {
		if got := fmt.Sprint(entry[k]); got != want {
			t.Errorf("entry field %s = %q, want %q", k, got, want)
		}
	}
	why, _ := entry["WHY"].(string)
	if why == "" {
		t.Errorf("entry has no WHY field (what made rdmad load): %v", entry)
	}

	// -x adds the catalog text, its @FIELD@s replaced by the entry's.
	out := mustRun(t, "journalctl", "-x", "-u", "rdmad.service", "MESSAGE_ID="+id, "--since", since, "--no-pager")
	for _, want := range []string{
		"Subject: " + subject,
		"Defined-By: rdmad",
		// The catalog's @WHY@ and @ERRORS@ replaced: one bad key here.
		"rdmad loaded its configuration (" + why + ") and found 1 problem(s)",
		"A file with an error never replaces the running configuration",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("journalctl -x -u rdmad MESSAGE_ID=%s lacks %q:\n%s", id, want, out)
		}
	}
	explained := false
	for _, line := range strings.Split(out, "\n") {
		// Catalog lines are prefixed ("░░ " since systemd 246, "-- "
		// before); the entry's own line is not.
		if (strings.HasPrefix(line, "░░") || strings.HasPrefix(line, "--")) && strings.Contains(line, journalBadKey) {
			explained = true
		}
	}
	if !explained {
		t.Errorf("the catalog text does not carry the entry's error (@ERR@ naming %s):\n%s", journalBadKey, out)
	}
	if strings.Contains(out, "@ERR@") || strings.Contains(out, "@WHY@") {
		t.Errorf("journalctl -x left catalog fields unreplaced:\n%s", out)
	}
}
