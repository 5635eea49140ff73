package daemon

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/internal/testenv"
)

// catalogPath is rdmad's journal message catalog (installed to
// /usr/lib/systemd/catalog/rdmad.catalog).
const catalogPath = "../packaging/rdmad.catalog"

// A catalogEntry is one "-- ID" block of a catalog file.
type catalogEntry struct {
	id      string
	line    int
	headers map[string]string
	body    string
}

var catalogID = regexp.MustCompile(`^[0-9a-f]{32}$`)

// parseCatalog reads a catalog as journalctl --update-catalog does: '#'
// lines are comments, "-- <id>" starts an entry, "Key: value" headers
// follow until an empty line, then the body until the next entry.
func parseCatalog(t *testing.T, path string) []catalogEntry {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("open the message catalog: %v", err)
	}
	defer f.Close()
	var out []catalogEntry
	var cur *catalogEntry
	inHeaders := false
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "-- "):
			id := strings.TrimPrefix(line, "-- ")
			if !catalogID.MatchString(id) {
				t.Errorf("%s:%d: entry id %q is not 32 lower-case hex digits (make one with `systemd-id128 new`)", path, n, id)
			}
			out = append(out, catalogEntry{id: id, line: n, headers: map[string]string{}})
			cur, inHeaders = &out[len(out)-1], true
		case cur == nil && (line == "" || strings.HasPrefix(line, "#")):
		case cur == nil:
			t.Errorf("%s:%d: text before the first \"-- <id>\" line: %q", path, n, line)
		case inHeaders && line == "":
			inHeaders = false
		case inHeaders:
			k, v, ok := strings.Cut(line, ": ")
			if !ok || k == "" || strings.ContainsAny(k, " \t") {
				t.Errorf("%s:%d: header %q is not \"Key: value\" (an empty line ends the headers)", path, n, line)
				continue
			}
			cur.headers[k] = v
		default:
			cur.body += line + "\n"
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCatalog: the message catalog parses (every id 32 hex digits and
// unique, each entry with Subject, Defined-By, Support, Documentation and
// a body), and its ids are exactly the MESSAGE_IDs rdmad's code logs with.
func TestCatalog(t *testing.T) {
	entries := parseCatalog(t, catalogPath)
	inCatalog := map[string]int{}
	for _, e := range entries {
		if prev, dup := inCatalog[e.id]; dup {
			t.Errorf("%s:%d: id %s is also the entry at line %d", catalogPath, e.line, e.id, prev)
		}
		inCatalog[e.id] = e.line
		for _, h := range []string{"Subject", "Defined-By", "Support", "Documentation"} {
			if strings.TrimSpace(e.headers[h]) == "" {
				t.Errorf("%s:%d: entry %s has no %s: header", catalogPath, e.line, e.id, h)
			}
		}
		if len(strings.Fields(e.body)) < 10 {
			t.Errorf("%s:%d: entry %s has no body saying what happened and what to do: %q", catalogPath, e.line, e.id, e.body)
		}
	}

	ids := messageIDConstants(t)
	used := messageIDsUsed(t, ids)
	for name, id := range ids {
		if _, ok := inCatalog[id]; !ok {
			t.Errorf("apitype.%s = %s has no entry in %s: add one (Subject, body: what happened and what to do)", name, id, catalogPath)
		}
		if len(used[name]) == 0 {
			t.Errorf("apitype.%s = %s is logged nowhere: tag the event's log line with it or remove it and its catalog entry", name, id)
		}
	}
	api, err := os.ReadFile("../docs/API.md")
	if err != nil {
		t.Fatal(err)
	}
	for name, id := range ids {
		if !strings.Contains(string(api), "`"+id+"`") {
			t.Errorf("docs/API.md (Journal message IDs) does not list apitype.%s = %s", name, id)
		}
	}
	for id, line := range inCatalog {
		if !slices.Contains(mapValues(ids), id) {
			t.Errorf("%s:%d: entry %s is no apitype.Msg* constant: the code never logs it", catalogPath, line, id)
		}
	}
}

// TestCatalogJournalctl builds the catalog into an index with the host's
// journalctl, when there is one, and checks that it lists every entry.
func TestCatalogJournalctl(t *testing.T) {
	jc := testenv.Tool(t, "journalctl", "Debian: apt-get install systemd; TestCatalog checks the format")
	root := t.TempDir()
	dir := filepath.Join(root, "usr/lib/systemd/catalog")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(catalogPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rdmad.catalog"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(jc, "--root="+root, "--update-catalog").CombinedOutput(); err != nil || len(out) > 0 {
		t.Fatalf("journalctl --update-catalog: %v: %s", err, out)
	}
	out, err := exec.Command(jc, "--root="+root, "--list-catalog").CombinedOutput()
	if err != nil {
		t.Fatalf("journalctl --list-catalog: %v: %s", err, out)
	}
	for _, e := range parseCatalog(t, catalogPath) {
		if want := e.id + " rdmad: " + e.headers["Subject"]; !strings.Contains(string(out), want) {
			t.Errorf("journalctl --list-catalog lacks %q:\n%s", want, out)
		}
	}
}

func mapValues(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// messageIDConstants returns the Msg* constants of
// client/apitype/journal.go by name.
func messageIDConstants(t *testing.T) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "../client/apitype/journal.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if !strings.HasPrefix(name.Name, "Msg") {
					continue
				}
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					t.Fatalf("apitype.%s is not a string literal", name.Name)
				}
				v, _ := strconv.Unquote(lit.Value)
				if !catalogID.MatchString(v) {
					t.Errorf("apitype.%s = %q is not 32 lower-case hex digits", name.Name, v)
				}
				ids[name.Name] = v
			}
		}
	}
	if len(ids) == 0 {
		t.Fatal("no Msg* constants in client/apitype/journal.go")
	}
	return ids
}

// messageIDsUsed returns, for each Msg* constant, the non-test Go files of
// the module outside client/apitype that refer to it (apitype.MsgX), and
// fails on a MESSAGE_ID written as a literal instead.
func messageIDsUsed(t *testing.T, ids map[string]string) map[string][]string {
	t.Helper()
	used := map[string][]string{}
	literal := map[string]string{}
	for name, id := range ids {
		literal[strconv.Quote(id)] = name
	}
	err := filepath.WalkDir("..", func(path string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if de.IsDir() {
			switch de.Name() {
			case ".git", "testdata", "apitype", "node_modules", ".run", "dist", "bin":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.SelectorExpr:
				if x, ok := n.X.(*ast.Ident); ok && x.Name == "apitype" {
					if _, ok := ids[n.Sel.Name]; ok {
						used[n.Sel.Name] = append(used[n.Sel.Name], path)
					}
				}
			case *ast.BasicLit:
				if name, ok := literal[n.Value]; ok {
					t.Errorf("%s: MESSAGE_ID %s written as a literal; use apitype.%s", path, n.Value, name)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return used
}
