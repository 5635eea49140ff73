package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// rdmactl runs the CLI's entry function with args and returns its exit
// code, stdout and stderr.
func rdmactl(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	code := run(ctx, args, &out, &errb)
	return code, out.String(), errb.String()
}

// fakeRdmad serves routes ("GET /v1/status") over HTTP on a Unix socket, as
// rdmad does, and returns the socket's path. The directory is short: a
// socket's path has at most 107 bytes.
func fakeRdmad(t testing.TB, routes map[string]http.HandlerFunc) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "rdmactl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "rdmad.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	for pattern, h := range routes {
		mux.HandleFunc(pattern, h)
	}
	srv := &http.Server{Handler: mux}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return path
}

// answer answers with v as JSON.
func answer(t *testing.T, v any) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if err := json.NewEncoder(w).Encode(v); err != nil {
			t.Errorf("fake rdmad: encode %T: %v", v, err)
		}
	}
}
