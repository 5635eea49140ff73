//go:build pprof

package main

import (
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"time"
)

// With -tags pprof, RDMAD_CPUPROFILE=FILE writes a CPU profile of the
// RDMAD_CPUPROFILE_SECONDS (default 60) after RDMAD_CPUPROFILE_DELAY
// seconds (default 0): for measuring the daemon where it runs, as in
// test/bench. Release builds do not have it.
func init() {
	path := os.Getenv("RDMAD_CPUPROFILE")
	if path == "" {
		return
	}
	secs := envSeconds("RDMAD_CPUPROFILE_SECONDS", 60)
	delay := envSeconds("RDMAD_CPUPROFILE_DELAY", 0)
	go func() {
		time.Sleep(delay)
		f, err := os.Create(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "rdmad: cpu profile:", err)
			return
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "rdmad: cpu profile:", err)
			return
		}
		time.Sleep(secs)
		pprof.StopCPUProfile()
	}()
}

func envSeconds(name string, def int) time.Duration {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v >= 0 {
		return time.Duration(v) * time.Second
	}
	return time.Duration(def) * time.Second
}
