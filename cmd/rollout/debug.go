package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime"
	rpprof "runtime/pprof"
)

// startCPUProfile writes a CPU profile of the whole command to path (ROLLOUT_CPUPROFILE=FILE):
// for a run too short to attach to, and for the load benchmark. stop ends and closes it.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("ROLLOUT_CPUPROFILE: %w", err)
	}
	if err := rpprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("ROLLOUT_CPUPROFILE: %w", err)
	}
	return func() { rpprof.StopCPUProfile(); f.Close() }, nil
}

// startDebug serves Go's profiles (net/http/pprof) on addr, for profiling a live run:
// ROLLOUT_DEBUG_ADDR=127.0.0.1:6060 rollout run …, then go tool pprof
// http://127.0.0.1:6060/debug/pprof/profile. Block and mutex profiling are turned on with it.
func startDebug(addr string, stderr io.Writer) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("ROLLOUT_DEBUG_ADDR: %w", err)
	}
	runtime.SetBlockProfileRate(10_000) // one sample per 10 µs blocked
	runtime.SetMutexProfileFraction(10)
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	fmt.Fprintf(stderr, "rollout: profiles on http://%s/debug/pprof/\n", ln.Addr())
	return func() { srv.Close() }, nil
}
