package apitype

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestNoNullLists: every struct type of the wire contract with a list or a
// map in its JSON marshals its zero value with [] or {} there, never null.
// The types are found by parsing the package, so a new one without a
// MarshalJSON (withLists) fails here until it has one and is listed.
func TestNoNullLists(t *testing.T) {
	zero := map[string]any{
		"ApplyResult": ApplyResult{}, "DiffResult": DiffResult{}, "ReloadResult": ReloadResult{},
		"DoctorReport": DoctorReport{}, "BandwidthStatus": BandwidthStatus{}, "Device": Device{},
		"Port": Port{}, "NetdevQoS": NetdevQoS{}, "ETS": ETS{}, "Resources": Resources{},
		"ProcessResources": ProcessResources{}, "DeviceResources": DeviceResources{},
		"Snapshot": filledSnapshot(), "NetdevECN": NetdevECN{}, "Peers": Peers{}, "Fingerprint": Fingerprint{},
		"Peer": Peer{}, "PeerPath": PeerPath{}, "Config": Config{}, "PolicyState": PolicyState{}, "PolicyStatus": PolicyStatus{},
		"PoolDevice": PoolDevice{}, "Health": Health{}, "Condition": Condition{},
	}
	found := listFields(t)
	if len(found) == 0 {
		t.Fatal("parsed no struct type with a list field: the test reads the wrong directory")
	}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range found {
			if !yield(k) {
				return
			}
		}
	}) {
		v, ok := zero[name]
		if !ok {
			t.Errorf("%s has lists or maps in its JSON (%v): give it a MarshalJSON with withLists and list it here", name, found[name])
			continue
		}
		if got := reflect.TypeOf(v).Name(); got != name {
			t.Fatalf("zero[%q] is a %s", name, got)
		}
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, f := range found[name] {
			if strings.Contains(string(b), `"`+f+`":null`) {
				t.Errorf("zero %s: %q is null in %s", name, f, b)
			}
		}
	}
	for name := range zero {
		if _, ok := found[name]; !ok {
			t.Errorf("zero lists %s, which has no list field any more", name)
		}
	}

	// Values keep their contents, and a nested zero value has its lists
	// too.
	b, _ := json.Marshal(ApplyResult{Changes: []Change{{Kind: "mtu"}}})
	if !strings.Contains(string(b), `"kind":"mtu"`) || !strings.Contains(string(b), `"policies":[]`) {
		t.Errorf("ApplyResult: %s", b)
	}
}

// filledSnapshot is a zero Snapshot as the store publishes it: Snapshot
// fills its lists once per snapshot (FillLists), not at every marshal.
func filledSnapshot() Snapshot {
	var s Snapshot
	s.FillLists()
	return s
}

// listFields returns, per struct type declared in the package's non-test
// files, the JSON names of its slice and map fields that JSON writes even
// when empty (no omitempty).
func listFields(t *testing.T) map[string][]string {
	t.Helper()
	fs := token.NewFileSet()
	pkgs, err := parser.ParseDir(fs, ".", func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, p := range pkgs {
		for _, f := range p.Files {
			ast.Inspect(f, func(n ast.Node) bool {
				ts, ok := n.(*ast.TypeSpec)
				if !ok {
					return true
				}
				st, ok := ts.Type.(*ast.StructType)
				if !ok || !ts.Name.IsExported() {
					return true
				}
				for _, fl := range st.Fields.List {
					switch fl.Type.(type) {
					case *ast.ArrayType, *ast.MapType:
					default:
						continue
					}
					if fl.Tag == nil {
						continue
					}
					tag := reflect.StructTag(strings.Trim(fl.Tag.Value, "`")).Get("json")
					name, opts, _ := strings.Cut(tag, ",")
					if name == "" || name == "-" || strings.Contains(opts, "omitempty") {
						continue
					}
					out[ts.Name.Name] = append(out[ts.Name.Name], name)
				}
				return true
			})
		}
	}
	return out
}
