package servicetest_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/access"
	"github.com/rdmad/rdmad/daemon/service"
	"github.com/rdmad/rdmad/daemon/service/servicetest"
)

// interfaces are the interfaces of daemon/service a backend implements:
// Backend and the optional ones the transports look for.
var interfaces = []reflect.Type{
	reflect.TypeFor[service.Backend](),
	reflect.TypeFor[service.ResourceReader](),
	reflect.TypeFor[service.BandwidthTester](),
}

// TestBackendKnowsEveryMethod keeps the fake and the table in step with
// the contract: every interface of daemon/service is in interfaces, the
// fake implements each, and each method is the call of an operation in
// Operations. A method the fake lacked would answer "not supported" in
// the fuzz targets, a false failure, and its access level would go
// unchecked on both transports.
func TestBackendKnowsEveryMethod(t *testing.T) {
	known := map[string]bool{}
	for _, it := range interfaces {
		known[it.Name()] = true
	}
	fset := token.NewFileSet()
	names, err := filepath.Glob("../*.go")
	if err != nil || len(names) == 0 {
		t.Fatalf("no Go files in daemon/service (%v)", err)
	}
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.TYPE {
				continue
			}
			for _, spec := range gd.Specs {
				ts := spec.(*ast.TypeSpec)
				if _, ok := ts.Type.(*ast.InterfaceType); ok && !known[ts.Name.Name] {
					t.Errorf("%s: interface %s is not in interfaces: if a backend may implement it, give servicetest.Backend its methods, Operations the operation that calls them, and list it there", fset.Position(ts.Pos()), ts.Name.Name)
				}
			}
		}
	}
	calls := map[string]bool{}
	for _, o := range servicetest.Operations {
		for _, c := range o.Calls {
			calls[c] = true
		}
	}
	fb := reflect.TypeFor[*servicetest.Backend]()
	for _, it := range interfaces {
		if !fb.Implements(it) {
			t.Errorf("servicetest.Backend does not implement %s: the fuzz targets never reach its methods", it.Name())
		}
		for i := range it.NumMethod() {
			if m := it.Method(i).Name; !calls[m] {
				t.Errorf("%s.%s is the call of no operation in Operations", it.Name(), m)
			}
		}
	}
}

// TestOperationsKnowAccess keeps Operations in step with the access
// table: each operation is one the table knows, once.
func TestOperationsKnowAccess(t *testing.T) {
	seen := map[access.Op]bool{}
	for _, o := range servicetest.Operations {
		if _, ok := access.LevelOf(o.Op); !ok {
			t.Errorf("%s: no operation of daemon/access", o.Op)
		}
		if seen[o.Op] {
			t.Errorf("%s: listed twice", o.Op)
		}
		seen[o.Op] = true
		if len(o.Calls) == 0 || o.Path == "" || o.Method == "" {
			t.Errorf("%s: no calls or no route: %+v", o.Op, o)
		}
	}
}

// TestOracles: the argument oracles agree with the checks of
// daemon/service on examples of each edge.
func TestOracles(t *testing.T) {
	for _, name := range []string{"192.0.2.17", "fe80::1%eth0", "node-2.example", "a", strings.Repeat("a", 253),
		"", " ", "-x", ".x", "a b", "a\x00", "é", strings.Repeat("a", 254), "a/b"} {
		if got, want := service.ValidPeerName(name), servicetest.PeerShaped(name); got != want {
			t.Errorf("peer %q: ValidPeerName %v, oracle %v", name, got, want)
		}
	}
	for _, tt := range []struct {
		op   string
		size int
		ms   int64
	}{
		{"", 0, 0}, {"write", 1, 100}, {"send", 1 << 20, 30000}, {"atomic", 0, 0},
		{"read", 1<<20 + 1, 0}, {"read", -1, 0}, {"", 0, 99}, {"", 0, 30001},
	} {
		d := time.Duration(tt.ms) * time.Millisecond
		_, err := service.ParseBandwidthRequest("192.0.2.17", tt.op, tt.size, d)
		if got, want := err == nil, servicetest.BandwidthOK("192.0.2.17", tt.op, tt.size, d); got != want {
			t.Errorf("op %q size %d duration %v: ParseBandwidthRequest %v, oracle %v", tt.op, tt.size, d, err, want)
		}
	}
	if _, err := service.ParseBandwidthRequest("192.0.2.17", "", 0, 1500500*time.Microsecond); err == nil || servicetest.BandwidthOK("192.0.2.17", "", 0, 1500500*time.Microsecond) {
		t.Errorf("a duration finer than a millisecond: ParseBandwidthRequest %v, and the oracle must refuse it too", err)
	}
	for _, d := range []time.Duration{-1, 0, time.Second, 10 * time.Second, 10*time.Second + 1} {
		if got, want := service.ValidDoctorInterval(d), servicetest.DoctorIntervalOK(d); got != want {
			t.Errorf("interval %v: ValidDoctorInterval %v, oracle %v", d, got, want)
		}
	}
}
