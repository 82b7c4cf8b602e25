package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"net/url"
	"os"
	"runtime"
	rpprof "runtime/pprof"
	"strings"

	"github.com/rollout-dev/rollout/internal/localserve"
)

// debugMaxConns bounds the debug server's connections.
const debugMaxConns = 16

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
//
// The profiles answer only a Host that names the address (or loopback), against DNS rebinding,
// and /debug/pprof/cmdline shows the command line with its credentials redacted.
func startDebug(addr string, stderr io.Writer) (stop func(), err error) {
	ln, err := localserve.Listen(addr, debugMaxConns)
	if err != nil {
		return nil, fmt.Errorf("ROLLOUT_DEBUG_ADDR: %w", err)
	}
	runtime.SetBlockProfileRate(10_000) // one sample per 10 µs blocked
	runtime.SetMutexProfileFraction(10)
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", redactedCmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := localserve.Server(localserve.CheckHost(localserve.Hosts(ln.Addr().String()), mux))
	go srv.Serve(ln)
	fmt.Fprintf(stderr, "rollout: profiles on http://%s/debug/pprof/\n", ln.Addr())
	return func() { srv.Close() }, nil
}

// redactedCmdline is pprof.Cmdline with credentials redacted: a URL's password and query
// values, and the value of any flag whose name says key, token, secret or password.
func redactedCmdline(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprint(w, strings.Join(redactArgs(os.Args), "\x00"))
}

// redactArgs is args with their credentials redacted (see redactedCmdline).
func redactArgs(args []string) []string {
	out := make([]string, len(args))
	secretFlag := func(a string) bool {
		name := strings.ToLower(strings.TrimLeft(a, "-"))
		for _, w := range []string{"key", "token", "secret", "password", "passwd", "auth"} {
			if strings.Contains(name, w) {
				return true
			}
		}
		return false
	}
	redactNext := false
	for i, a := range args {
		switch {
		case redactNext:
			out[i], redactNext = "REDACTED", false
		case strings.HasPrefix(a, "-") && strings.Contains(a, "="):
			name, value, _ := strings.Cut(a, "=")
			if secretFlag(name) {
				value = "REDACTED"
			} else {
				value = redactURLText(value)
			}
			out[i] = name + "=" + value
		case strings.HasPrefix(a, "-"):
			out[i], redactNext = a, secretFlag(a)
		default:
			out[i] = redactURLText(a)
		}
	}
	return out
}

// redactURLText redacts the password and query values of the URLs in s (a comma list too).
func redactURLText(s string) string {
	parts := strings.Split(s, ",")
	for i, p := range parts {
		u, err := url.Parse(p)
		if err != nil || u.Host == "" {
			continue
		}
		if u.User != nil {
			u.User = url.User("REDACTED")
		}
		if u.RawQuery != "" {
			q := u.Query()
			for k := range q {
				q[k] = []string{"REDACTED"}
			}
			u.RawQuery = q.Encode()
		}
		parts[i] = u.String()
	}
	return strings.Join(parts, ",")
}
