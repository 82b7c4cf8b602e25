// Package chaos is an http.Handler middleware that makes a resource server fail on purpose:
// answers 500, connections reset without an answer, requests that hang until the client gives
// up, and added latency. It exists to test rollout's handling of a flaky resource server
// (`rollout serve NAME --chaos-fail-rate 0.05 …`, and the soak test in test/soak).
//
// # Which requests
//
// Options.Endpoints names the requests chaos may hit; the others pass through untouched. Each
// entry is one of:
//
//	tools         every POST that is not one of the protocol endpoints below: the tool calls
//	seed_session  POST …/seed_session
//	verify        POST …/verify
//	end_session   POST …/end_session (rollout's built-in servers only)
//	all           every request, whatever its method and path
//	NAME          POST …/NAME: one tool by name
//
// An endpoint is the last element of the request's path, so a server behind a base path
// (http://host/gym/weather/get_weather) is matched the same way. The default, DefaultEndpoints,
// is tools, seed_session and verify: everything a rollout sends except end_session.
//
// rollout retries seed_session and verify (429, 5xx, connection errors) but never a tool call,
// which may change session state: an injected fault on a tool call becomes a failed tool call
// that the model is told about, one on seed_session or verify is retried.
//
// # Determinism
//
// Every decision is a hash of (Options.Seed, the request's method, endpoint and body, and the
// attempt number: how many requests with the same method, endpoint and body came before, kept
// in a table of at most MaxTracked entries, cleared when full). So the same seed and the same
// requests get the same faults, and a client's retry of an identical request is a new draw that
// eventually gets through at a rate below 1. When several sessions send byte-identical requests
// at once, which of them draws which attempt number depends on their order; how many faults
// they get does not.
//
// The faults are drawn in the order reset, hang, then (after the latency) fail; the first that
// hits decides. A request that draws none goes to the wrapped handler after the latency.
package chaos

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rollout-dev/rollout/pkg/retry"
)

// Endpoint classes of Options.Endpoints.
const (
	All         = "all"
	Tools       = "tools"
	SeedSession = "seed_session"
	Verify      = "verify"
	EndSession  = "end_session"
)

// DefaultEndpoints are the requests chaos hits when Options.Endpoints is empty.
var DefaultEndpoints = []string{Tools, SeedSession, Verify}

// MaxTracked bounds the table of request fingerprints that numbers attempts.
const MaxTracked = 100_000

// maxHashedBytes is how much of a body goes into its fingerprint; the rest is passed on.
const maxHashedBytes = 64 << 20

// Options are the faults. The zero value injects nothing.
type Options struct {
	// Seed selects one of the deterministic sequences of faults.
	Seed int64
	// FailRate is the probability per request of an HTTP 500 with a JSON body
	// {"error": "...", "detail": "..."} instead of the server's answer.
	FailRate float64
	// ResetRate is the probability per request that the connection is closed without an
	// answer, with SO_LINGER 0 so that the client gets a TCP RST (HTTP/2: the stream is reset).
	ResetRate float64
	// HangRate is the probability per request of no answer at all: the handler returns only
	// when the client gives up (its timeout, or the connection closed) or the server closes
	// the connection.
	HangRate float64
	// Latency, when positive, delays every request chaos may hit by a uniform draw in
	// [0, Latency), before it fails or reaches the server.
	Latency time.Duration
	// Endpoints selects the requests chaos may hit (see the package documentation); empty
	// means DefaultEndpoints.
	Endpoints []string
}

// Enabled reports whether the options inject anything.
func (o Options) Enabled() bool {
	return o.FailRate > 0 || o.ResetRate > 0 || o.HangRate > 0 || o.Latency > 0
}

// Validate checks that the rates are in [0, 1], the latency not negative and the endpoints
// names.
func (o Options) Validate() error {
	for _, r := range []struct {
		name string
		v    float64
	}{{"fail", o.FailRate}, {"reset", o.ResetRate}, {"hang", o.HangRate}} {
		if math.IsNaN(r.v) || r.v < 0 || r.v > 1 {
			return fmt.Errorf("chaos: %s rate must be in [0, 1], got %g", r.name, r.v)
		}
	}
	if o.Latency < 0 {
		return fmt.Errorf("chaos: latency must not be negative, got %v", o.Latency)
	}
	for _, e := range o.Endpoints {
		if e == "" || strings.ContainsAny(e, "/?#: ") {
			return fmt.Errorf("chaos: endpoint %q: want all, tools, seed_session, verify, end_session or a tool name", e)
		}
	}
	return nil
}

// ParseEndpoints splits a comma-separated list of endpoints ("" is the default).
func ParseEndpoints(s string) ([]string, error) {
	var out []string
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	if err := (Options{Endpoints: out}).Validate(); err != nil {
		return nil, err
	}
	return out, nil
}

// Stats counts what chaos did.
type Stats struct {
	Requests int64 // every request seen
	Eligible int64 // of which chaos could hit (Options.Endpoints)
	Failed   int64 // answered 500
	Reset    int64 // connection reset without an answer
	Hung     int64 // left without an answer until the client gave up
	Passed   int64 // eligible requests that reached the server
}

// Injected is the number of faults injected.
func (s Stats) Injected() int64 { return s.Failed + s.Reset + s.Hung }

// Handler is the middleware. It is safe for concurrent use.
type Handler struct {
	next http.Handler
	opt  Options

	all, tools bool
	named      map[string]bool

	mu       sync.Mutex
	attempts map[[16]byte]int

	requests, eligible, failed, reset, hung, passed atomic.Int64
}

// New wraps next with the faults of o.
func New(next http.Handler, o Options) (*Handler, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	h := &Handler{next: next, opt: o, named: map[string]bool{}, attempts: map[[16]byte]int{}}
	eps := o.Endpoints
	if len(eps) == 0 {
		eps = DefaultEndpoints
	}
	for _, e := range eps {
		switch e {
		case All:
			h.all = true
		case Tools:
			h.tools = true
		default:
			h.named[e] = true
		}
	}
	return h, nil
}

// Wrap is New for options known to be valid: it panics on invalid options.
func Wrap(next http.Handler, o Options) http.Handler {
	h, err := New(next, o)
	if err != nil {
		panic(err)
	}
	return h
}

// Stats returns the counters so far.
func (h *Handler) Stats() Stats {
	return Stats{Requests: h.requests.Load(), Eligible: h.eligible.Load(), Failed: h.failed.Load(),
		Reset: h.reset.Load(), Hung: h.hung.Load(), Passed: h.passed.Load()}
}

// endpoint is the last element of the path ("" for the root).
func endpoint(p string) string {
	e := path.Base("/" + strings.Trim(p, "/"))
	if e == "/" || e == "." {
		return ""
	}
	return e
}

// eligible reports whether chaos may hit r, whose endpoint is ep.
func (h *Handler) isEligible(r *http.Request, ep string) bool {
	if h.all {
		return true
	}
	if r.Method != http.MethodPost {
		return false
	}
	if h.named[ep] {
		return true
	}
	switch ep {
	case SeedSession, Verify, EndSession, "":
		return false
	}
	return h.tools
}

// ServeHTTP injects the faults, or passes the request on.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.requests.Add(1)
	ep := endpoint(r.URL.Path)
	if !h.opt.Enabled() || !h.isEligible(r, ep) {
		h.next.ServeHTTP(w, r)
		return
	}
	h.eligible.Add(1)

	// The fingerprint: method, endpoint and (the first maxHashedBytes of) the body, which is
	// passed on whole.
	head, err := io.ReadAll(io.LimitReader(r.Body, maxHashedBytes))
	if err != nil {
		http.Error(w, "chaos: reading the request body: "+err.Error(), http.StatusBadRequest)
		return
	}
	r.Body = readCloser{io.MultiReader(bytes.NewReader(head), r.Body), r.Body}
	sum := sha256.New()
	io.WriteString(sum, r.Method)
	sum.Write([]byte{0})
	io.WriteString(sum, ep)
	sum.Write([]byte{0})
	sum.Write(head)
	var fp [16]byte
	copy(fp[:], sum.Sum(nil))
	d := draw{seed: h.opt.Seed, fp: binary.LittleEndian.Uint64(fp[:8]) ^ binary.LittleEndian.Uint64(fp[8:]), attempt: h.attempt(fp)}

	if d.hit(h.opt.ResetRate, "reset") {
		h.reset.Add(1)
		ResetConnection(w)
		return
	}
	if d.hit(h.opt.HangRate, "hang") {
		h.hung.Add(1)
		<-r.Context().Done()
		return
	}
	if h.opt.Latency > 0 {
		if retry.Sleep(r.Context(), time.Duration(d.float("latency")*float64(h.opt.Latency))) != nil {
			return
		}
	}
	if d.hit(h.opt.FailRate, "fail") {
		h.failed.Add(1)
		b, _ := json.Marshal(map[string]string{
			"error":  "chaos: injected failure",
			"detail": fmt.Sprintf("HTTP 500 injected by rollout's chaos middleware on %s (seed %d, attempt %d)", ep, h.opt.Seed, d.attempt),
		})
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
		w.WriteHeader(http.StatusInternalServerError)
		w.Write(append(b, '\n'))
		return
	}
	h.passed.Add(1)
	h.next.ServeHTTP(w, r)
}

type readCloser struct {
	io.Reader
	io.Closer
}

// attempt numbers the requests with this fingerprint: 0 the first time.
func (h *Handler) attempt(fp [16]byte) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n, ok := h.attempts[fp]
	if !ok && len(h.attempts) >= MaxTracked {
		clear(h.attempts)
	}
	h.attempts[fp] = n + 1
	return n
}

// ResetConnection ends the request without an answer: it takes the connection over, sets
// SO_LINGER to 0 (so that closing it sends a TCP RST) and closes it. When the connection
// cannot be taken over (HTTP/2), the handler aborts, which resets the stream.
func ResetConnection(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	conn.Close()
}

// draw is the randomness of one request: FNV-1a over (seed, fingerprint, attempt, decision),
// then the splitmix64 finalizer.
type draw struct {
	seed    int64
	fp      uint64
	attempt int
}

func (d draw) u64(name string) uint64 {
	const prime = 1099511628211
	h := uint64(14695981039346656037)
	for _, v := range []uint64{uint64(d.seed), d.fp, uint64(d.attempt)} {
		for range 8 {
			h ^= v & 0xff
			h *= prime
			v >>= 8
		}
	}
	for i := 0; i < len(name); i++ {
		h ^= uint64(name[i])
		h *= prime
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

// float is uniform in [0, 1).
func (d draw) float(name string) float64 { return float64(d.u64(name)>>11) / (1 << 53) }

// hit is true with probability p.
func (d draw) hit(p float64, name string) bool {
	switch {
	case p <= 0:
		return false
	case p >= 1:
		return true
	}
	return d.float(name) < p
}
