package metrics

import (
	"bufio"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Server is the metrics of a resource server (rollout serve): requests by endpoint and
// status, their durations, sessions seeded and ended, errors. Handler wraps the server.
type Server struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	errors   *prometheus.CounterVec
	seeded   prometheus.Counter
	ended    prometheus.Counter
}

// NewServer registers the metrics of the resource server name in a registry of its own
// (with the Go runtime's and the process's collectors).
func NewServer(name string) *Server {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	labels := prometheus.Labels{"server": name}
	s := &Server{
		reg: reg,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rollout_server_requests_total", ConstLabels: labels,
			Help: "Requests answered, by endpoint (seed_session, verify, end_session, tool, other) and HTTP status code."}, []string{"endpoint", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "rollout_server_request_duration_seconds", ConstLabels: labels,
			Help: "Time to answer a request, by endpoint.", Buckets: callBuckets}, []string{"endpoint"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rollout_server_errors_total", ConstLabels: labels,
			Help: "Requests answered with a 5xx, or not answered (the connection reset or hijacked), by endpoint."}, []string{"endpoint"}),
		seeded: prometheus.NewCounter(prometheus.CounterOpts{Name: "rollout_server_sessions_seeded_total", ConstLabels: labels,
			Help: "Sessions seeded: seed_session answered 2xx."}),
		ended: prometheus.NewCounter(prometheus.CounterOpts{Name: "rollout_server_sessions_ended_total", ConstLabels: labels,
			Help: "Sessions ended: end_session answered 2xx."}),
	}
	reg.MustRegister(s.requests, s.duration, s.errors, s.seeded, s.ended)
	return s
}

// Registry is the server's registry.
func (s *Server) Registry() *prometheus.Registry { return s.reg }

// Handler counts and times every request next answers.
func (s *Server) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		sw.done = func(code int) {
			ep := endpoint(req)
			s.requests.WithLabelValues(ep, codeLabel(code)).Inc()
			s.duration.WithLabelValues(ep).Observe(time.Since(start).Seconds())
			if code >= 500 || code == 0 {
				s.errors.WithLabelValues(ep).Inc()
			}
			if code >= 200 && code < 300 {
				switch ep {
				case "seed_session":
					s.seeded.Inc()
				case "end_session":
					s.ended.Inc()
				}
			}
		}
		defer sw.finish()
		next.ServeHTTP(sw, req)
	})
}

// codeLabel is the code label of a status: "none" when the request had no answer.
func codeLabel(code int) string {
	if code == 0 {
		return "none"
	}
	return strconv.Itoa(code)
}

// endpoint is the endpoint label of a request: the protocol's own endpoints by name, every
// other POST a tool (tool names are not labels: a client could make up any number).
func endpoint(req *http.Request) string {
	p := strings.TrimPrefix(req.URL.Path, "/")
	switch {
	case p == "seed_session", p == "verify", p == "end_session":
		return p
	case req.Method == http.MethodPost && p != "" && !strings.Contains(p, "/"):
		return "tool"
	}
	return "other"
}

// statusWriter remembers the status a handler answered; Unwrap lets http.ResponseController
// reach the connection underneath (the chaos handler hijacks it to reset it).
type statusWriter struct {
	http.ResponseWriter
	status   int
	done     func(code int) // counts the request, once
	finished bool
}

// finish counts the request with its status: 200 when the handler wrote nothing, none (0)
// when it took the connection over.
func (w *statusWriter) finish() {
	if w.finished {
		return
	}
	w.finished = true
	code := w.status
	if code == 0 {
		code = http.StatusOK
	}
	w.done(code)
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Hijack hands the connection over: the request is counted then, without a status, before
// the handler can close the connection (and the client see it).
func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil && !w.finished {
		w.finished = true
		w.done(0)
	}
	return conn, rw, err
}
