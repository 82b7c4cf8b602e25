package gym

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/rollout-dev/rollout/internal/jsonfast"
	"github.com/rollout-dev/rollout/pkg/servers/store"
)

// maxBodyBytes bounds every request body. /verify carries whole trajectories, so it is generous.
const maxBodyBytes = 64 << 20

// sessionMaxAge is the cookie lifetime, Starlette SessionMiddleware's default (14 days).
const sessionMaxAge = 14 * 24 * 60 * 60

// Builtin describes one built-in resource server.
type Builtin struct {
	Name string
	// Class is the Python class name; with the name it forms the session cookie name, as NeMo
	// Gym's get_session_middleware_key does ("<Class>___<name>").
	Class string
	// Stateful: the server keeps a session's state in the store from seed_session on, and its
	// verify needs that state: a seeded session whose state is gone is answered 409
	// session_not_found (see ErrSessionLost).
	Stateful bool
	// New makes the server's behaviour, keeping its sessions' state in st.
	New func(name string, st store.Store) ResourceServer
}

// NewHandler returns the server b as an http.Handler keeping its sessions in st. Its cookie key
// is key, or when key is nil the store's secret "cookie:<name>", so that handlers sharing a
// store (e.g. Redis) accept each other's cookies. A key given (held outside the store) also
// seals the sessions' state (store.Sealed): a state altered in the store, copied there from
// another session, or older than the latest one the session's cookie was told of (an earlier
// state written back), is answered 409 session_tampered, never scored.
func NewHandler(ctx context.Context, b Builtin, st store.Store, key []byte) (*Handler, error) {
	sealed := false
	if key == nil {
		var err error
		if key, err = st.Secret(ctx, "cookie:"+b.Name); err != nil {
			return nil, fmt.Errorf("%s: session key: %w", b.Name, err)
		}
	} else if len(key) < MinKeySize {
		return nil, fmt.Errorf("%s: session key of %d bytes: want at least %d", b.Name, len(key), MinKeySize)
	} else {
		st = store.Sealed(st, key, b.Name)
		sealed = true
	}
	cookieName := b.Class + "___" + b.Name
	return &Handler{
		name:         b.Name,
		sealed:       sealed,
		cookieName:   cookieName,
		cookieSuffix: cookieSuffix(cookieName),
		key:          key,
		macs:         &sync.Pool{New: func() any { return hmac.New(sha256.New, key) }},
		store:        st,
		impl:         b.New(b.Name, st),
		stateful:     b.Stateful,
	}, nil
}

// ResourceServer is one server's behaviour; the handler does routing, sessions and errors.
// Implementations guard their own state: methods are called concurrently.
type ResourceServer interface {
	// Tool returns the tool endpoint of that name.
	Tool(name string) (ToolFunc, bool)
	// SeedSession sets up the session's state from the task row.
	SeedSession(ctx context.Context, sid string, row *Object) error
	// Verify scores a trajectory. It first validates its own fields of the request into errs;
	// when errs is then not empty (the handler's checks of responses_create_params and response
	// are already in it) it returns at once with nothing. Otherwise it returns the fields to add
	// to the echoed request, "reward" first, or the error the Python would raise. A stateful
	// server scores st, the session's state as the handler read it (see SessionState); it never
	// reads the store again.
	Verify(ctx context.Context, st SessionState, req *Object, output []OutputItem, errs *ValidationErrors) ([]Field, error)
}

// SessionState is the state of the session of a /verify, read from the store once by the handler
// (stateful servers only; the zero value for the others). The check that a seeded session was
// not lost and the score use this one read: with two, the store could lose the state in between
// (a Redis restarted empty), the check pass and the score find nothing, and a lost session would
// be scored 0 with a 200 instead of answered 409 session_not_found.
type SessionState struct {
	Data  []byte
	Found bool // false: the session has no state (and was not seeded: a lost seeded one is a 409)
}

// ToolFunc serves one tool. body is the raw request body (the model's arguments). It returns the
// result as ordered fields, written the way NeMo Gym's recorded tool outputs are written.
type ToolFunc func(ctx context.Context, sid string, body []byte) ([]Field, error)

// Handler is one resource server as an http.Handler: routing, the signed session cookie, request
// limits and error answers around a ResourceServer.
type Handler struct {
	name       string
	cookieName string
	// cookieSuffix is what net/http writes after the value of the session cookie: its
	// attributes.
	cookieSuffix string
	key          []byte
	macs         *sync.Pool // of HMAC-SHA256 hashes keyed with key
	store        store.Store
	impl         ResourceServer
	// stateful: impl keeps a session's state in the store from seed_session on (Builtin.Stateful).
	stateful bool
	// sealed: the store is store.Sealed, and the cookie carries the version of the session's
	// latest state (store.Known).
	sealed bool
}

// cookieSuffix is the attributes of the session cookie as http.SetCookie writes them after the
// value: "; Path=/; Max-Age=…; HttpOnly; SameSite=Lax".
func cookieSuffix(name string) string {
	const v = "v"
	s := (&http.Cookie{Name: name, Value: v, Path: "/", MaxAge: sessionMaxAge, HttpOnly: true, SameSite: http.SameSiteLaxMode}).String()
	return strings.TrimPrefix(s, name+"="+v)
}

// EndSessionHeader is on the seed_session and verify answers of rollout's servers: they take
// POST /end_session (rollout's extension to the protocol), so a client may end each session
// when its rollout is done and the state goes at once rather than when its TTL runs out.
// NeMo Gym's servers do not send it. rollout's tool client reads it (pkg/toolclient).
const EndSessionHeader = "X-Rollout-End-Session"

// endSessionPath is the value of EndSessionHeader (shared: never changed).
var endSessionPath = []string{"/end_session"}

// seededPrefix starts the id of a session that a stateful server seeded. The id is in the
// signed cookie, so the mark cannot be forged: a seeded session whose state is missing was lost
// (its TTL ran out, or the store restarted empty), not never seen.
const seededPrefix = "s-"

func (h *Handler) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	stateful := h.stateful
	sess := h.session(r, stateful && r.URL.Path == "/seed_session")
	sid := sess.id
	// The cookie is set when the answer's header is written, after the request's store reads
	// and writes: it carries the version of the latest state they saw.
	w := &cookieWriter{ResponseWriter: rw, h: h, sess: sess}
	if h.sealed {
		r = r.WithContext(store.WithKnown(r.Context(), sess.known))
	}

	switch r.URL.Path {
	case "/":
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			methodNotAllowed(w, "GET")
			return
		}
		writeJSON(w, http.StatusOK, []byte(`{"status":"ok"}`))
		return
	case "/seed_session":
		body, ok := postBody(w, r)
		if !ok {
			return
		}
		row, err := ParseBody(body)
		if err == nil {
			err = h.impl.SeedSession(r.Context(), sid, row)
		}
		if err != nil {
			writeError(w, err)
			return
		}
		w.Header()[EndSessionHeader] = endSessionPath
		writeJSON(w, http.StatusOK, []byte(`{}`))
		return
	case "/verify":
		body, ok := postBody(w, r)
		if !ok {
			return
		}
		var st SessionState
		if stateful {
			// One read, for the lost-session check and the score (SessionState).
			data, found, err := h.store.Get(r.Context(), sid)
			if err != nil {
				writeError(w, err)
				return
			}
			if LostSession(sid, found) {
				writeError(w, ErrSessionLost)
				return
			}
			st = SessionState{Data: data, Found: found}
		}
		w.Header()[EndSessionHeader] = endSessionPath
		h.serveVerify(w, r.Context(), st, body)
		return
	case "/end_session":
		// rollout's extension to the protocol: the client is done with the session; its state
		// is dropped now instead of when its TTL runs out.
		if r.Method != http.MethodPost {
			methodNotAllowed(w, "POST")
			return
		}
		if err := h.store.Delete(r.Context(), sid); err != nil {
			writeError(w, err)
			return
		}
		sess.known.Reset()
		if unmarked, ok := strings.CutPrefix(sid, seededPrefix); ok {
			// Ended, not lost: the session goes on as one never seeded.
			sess.id, sess.value = unmarked, ""
		}
		writeJSON(w, http.StatusOK, []byte(`{}`))
		return
	}

	name := strings.TrimPrefix(r.URL.Path, "/")
	fn, ok := h.impl.Tool(name)
	if !ok || name == "" || strings.Contains(name, "/") {
		writeJSON(w, http.StatusNotFound, []byte(`{"detail":"Not Found"}`))
		return
	}
	body, ok := postBody(w, r)
	if !ok {
		return
	}
	fields, err := fn(r.Context(), sid, body)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, pythonJSON(MarshalFields(fields)))
}

func (h *Handler) serveVerify(w http.ResponseWriter, ctx context.Context, st SessionState, body []byte) {
	req, err := ParseBody(body)
	if err != nil {
		writeError(w, err)
		return
	}
	var errs ValidationErrors
	output := validateVerifyRequest(req, &errs)
	extra, err := h.impl.Verify(ctx, st, req, output, &errs)
	switch {
	case len(errs) > 0:
		writeError(w, errs)
	case err != nil:
		writeError(w, err)
	default:
		writeJSON(w, http.StatusOK, echo(req, extra))
	}
}

// echo is the verify answer: the request's fields in their order, then the verify fields (a
// request field of the same name gives way to the verify field).
func echo(req *Object, extra []Field) []byte {
	n := 2 + 24*len(extra)
	for _, m := range req.Members {
		n += len(m.Key) + 4 + len(m.Value)
	}
	b := append(make([]byte, 0, n), '{')
	first := true
outer:
	for i := range req.Members {
		m := &req.Members[i]
		for _, e := range extra {
			if e.Key == m.Key {
				continue outer
			}
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = jsonfast.AppendString(b, m.Key)
		b = append(b, ':')
		b = m.appendValue(b)
	}
	for _, f := range extra {
		if !first {
			b = append(b, ',')
		}
		first = false
		b = jsonfast.AppendString(b, f.Key)
		b = append(b, ':')
		b = appendValue(b, f.Value)
	}
	return append(b, '}')
}

// ErrSessionLost answers a request of a session that was seeded and whose state is gone: 409
// session_not_found.
var ErrSessionLost = sessionLostError{}

type sessionLostError struct{}

func (sessionLostError) Error() string {
	return "session_not_found: this session was seeded, but the session store no longer has its state"
}

func (sessionLostError) StatusBody() (int, []byte) {
	return http.StatusConflict, []byte(`{"error":"session_not_found","detail":"this session was seeded, but the session store no longer has its state (its TTL ran out, or the store restarted empty); run the rollout again"}`)
}

// LostSession reports whether a session without state (ok false) was seeded: its id has the
// seeded mark.
func LostSession(sid string, ok bool) bool { return !ok && strings.HasPrefix(sid, seededPrefix) }

// sessionCookie is a request's session: its id and the version of its latest state the client
// was told of, from its signed cookie, as the answer will set them.
type sessionCookie struct {
	id    string
	known *store.Known
	// value is the request's cookie value when it was valid: the answer sets it again unchanged
	// when neither id nor version changed, without signing anew.
	value   string
	version uint64 // the version value holds
}

// session reads the request's session from its validly signed cookie, or starts a new session
// (version 0) when there is none. seeding marks the id as seeded (seededPrefix), keeping the
// rest of it.
func (h *Handler) session(r *http.Request, seeding bool) *sessionCookie {
	s := &sessionCookie{}
	if c, err := r.Cookie(h.cookieName); err == nil {
		if sid, version, ok := h.checkCookie(c.Value); ok {
			s.id, s.version, s.value = sid, version, c.Value // the signature was compared byte for byte
		}
	}
	if s.id == "" {
		b := make([]byte, 16)
		if _, err := rand.Read(b); err != nil {
			panic(fmt.Sprintf("gym: session id: %v", err)) // crypto/rand never fails on supported platforms
		}
		s.id = hex.EncodeToString(b)
	}
	if seeding && !strings.HasPrefix(s.id, seededPrefix) {
		s.id = seededPrefix + s.id
		s.value = ""
	}
	s.known = store.NewKnown(s.version)
	return s
}

// cookieValue is the session's cookie value: "ID.SIG" for version 0, else "ID.VERSION.SIG",
// SIG the HMAC of what precedes it. Neither part holds a '.': ids are hex with an optional
// "s-", versions decimal.
func (h *Handler) cookieValue(s *sessionCookie) string {
	version := s.known.Version()
	if s.value != "" && version == s.version {
		return s.value
	}
	payload := s.id
	if version > 0 {
		payload += "." + strconv.FormatUint(version, 10)
	}
	return payload + "." + h.sign(payload)
}

// cookieWriter sets the session cookie on the answer (on every answer, like NeMo Gym) as its
// header is written.
type cookieWriter struct {
	http.ResponseWriter
	h           *Handler
	sess        *sessionCookie
	wroteHeader bool
}

func (w *cookieWriter) WriteHeader(status int) {
	if !w.wroteHeader {
		w.wroteHeader = true
		// http.SetCookie(w, &http.Cookie{Name: h.cookieName, Value: value, Path: "/", MaxAge:
		// sessionMaxAge, HttpOnly: true, SameSite: http.SameSiteLaxMode}) writes this; the value
		// needs no quoting (hex, '.', digits, base64url).
		w.Header().Add("Set-Cookie", w.h.cookieName+"="+w.h.cookieValue(w.sess)+w.h.cookieSuffix)
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *cookieWriter) Write(b []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

func (h *Handler) sign(payload string) string {
	m := h.macs.Get().(hash.Hash)
	m.Reset()
	io.WriteString(m, payload)
	var sum [sha256.Size]byte
	s := base64.RawURLEncoding.EncodeToString(m.Sum(sum[:0]))
	h.macs.Put(m)
	return s
}

// checkCookie returns the session id and version of a validly signed cookie value.
func (h *Handler) checkCookie(value string) (string, uint64, bool) {
	i := strings.LastIndexByte(value, '.')
	if i <= 0 {
		return "", 0, false
	}
	payload, sig := value[:i], value[i+1:]
	if !hmac.Equal([]byte(sig), []byte(h.sign(payload))) {
		return "", 0, false
	}
	sid, v, versioned := strings.Cut(payload, ".")
	if sid == "" {
		return "", 0, false
	}
	var version uint64
	if versioned {
		var err error
		if version, err = strconv.ParseUint(v, 10, 64); err != nil || version == 0 {
			return "", 0, false
		}
	}
	return sid, version, true
}

// postBody reads the body of a POST; any other method is answered 405. false: the request is
// answered.
func postBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if r.Method != http.MethodPost {
		methodNotAllowed(w, "POST")
		return nil, false
	}
	return readBody(w, r)
}

func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	raw := w
	if c, ok := w.(*cookieWriter); ok {
		raw = c.ResponseWriter // MaxBytesReader closes the connection of a body too large through it
	}
	body, err := readAll(http.MaxBytesReader(raw, r.Body, maxBodyBytes), r.ContentLength)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeJSON(w, http.StatusRequestEntityTooLarge, []byte(`{"detail":"Request body too large"}`))
		} else {
			writeJSON(w, http.StatusBadRequest, []byte(`{"detail":"Could not read the request body"}`))
		}
		return nil, false
	}
	return body, true
}

// readAll is io.ReadAll with a first buffer the size of the body announced (up to a bound: the
// announcement may be false), instead of one that grows from 512 bytes.
func readAll(r io.Reader, size int64) ([]byte, error) {
	const maxFirst = 256 << 10
	if size <= 0 {
		size = 511 // unknown: io.ReadAll's 512
	}
	b := make([]byte, 0, min(size, maxFirst)+1) // +1: the read that sees EOF needs room
	for {
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err != nil {
			if err == io.EOF {
				err = nil
			}
			return b, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)] // let append grow it
		}
	}
}

func writeJSON(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func methodNotAllowed(w http.ResponseWriter, allow string) {
	w.Header().Set("Allow", allow)
	writeJSON(w, http.StatusMethodNotAllowed, []byte(`{"detail":"Method Not Allowed"}`))
}

// PyError is an exception the Python server would raise while handling a request; NeMo Gym's
// exception middleware answers it 500 with repr(e) as a JSON string.
type PyError struct {
	Class string // Python exception class, e.g. "KeyError"
	Msg   string
}

func (e *PyError) Error() string { return e.Class + "(" + pyRepr(e.Msg) + ")" }

// StatusBodyError is an error answered with its own status and JSON body, e.g. a FastAPI
// HTTPException {"detail": …}: 409 for a tool called before /seed_session, 404 for an unknown id.
type StatusBodyError interface {
	error
	StatusBody() (status int, body []byte)
}

// DetailError is a FastAPI HTTPException: answered with Status and the body {"detail": Detail}.
type DetailError struct {
	Status int
	Detail string
}

func (e *DetailError) Error() string { return http.StatusText(e.Status) + ": " + e.Detail }

// StatusBody is Status and {"detail": Detail}.
func (e *DetailError) StatusBody() (int, []byte) {
	return e.Status, MarshalFields([]Field{{Key: "detail", Value: e.Detail}})
}

// writeError answers err: a StatusBodyError its status and body, validation errors 422
// (FastAPI's shape), anything else 500.
func writeError(w http.ResponseWriter, err error) {
	if errors.Is(err, store.ErrTampered) {
		writeJSON(w, http.StatusConflict, []byte(`{"error":"session_tampered","detail":"the session store holds state for this session that no server wrote last (altered in the store, copied from another session, or an earlier state written back); it is not scored"}`))
		return
	}
	var serr StatusBodyError
	if errors.As(err, &serr) {
		status, body := serr.StatusBody()
		writeJSON(w, status, body)
		return
	}
	var verrs ValidationErrors
	if errors.As(err, &verrs) {
		body := MarshalFields([]Field{{"detail", []FieldError(verrs)}})
		writeJSON(w, http.StatusUnprocessableEntity, body)
		return
	}
	writeJSON(w, http.StatusInternalServerError, MarshalValue(err.Error()))
}

// pyRepr renders s as Python's repr of a str (close enough for error messages).
func pyRepr(s string) string {
	quote := "'"
	if strings.Contains(s, "'") && !strings.Contains(s, `"`) {
		quote = `"`
	}
	var b strings.Builder
	b.WriteString(quote)
	for _, r := range s {
		switch {
		case r == '\\':
			b.WriteString(`\\`)
		case string(r) == quote:
			b.WriteString(`\` + quote)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteString(quote)
	return b.String()
}
