// Package h1 is an HTTP/1.1 client transport for plain-HTTP (cleartext) endpoints that does
// each request on the caller's goroutine.
//
// net/http's Transport gives every connection two goroutines of its own (a read loop and a
// write loop, each with its stack) and a read and a write buffer for as long as the
// connection lives, and it hands every request and answer between three goroutines. A batch
// runner keeps thousands of requests waiting on slow models at once, so those are most of
// what a request in flight costs: memory per connection and the scheduling of three
// goroutines per request. Here a request is written and its answer read by the goroutine that
// called RoundTrip; a connection holds no goroutine and, while it waits for an answer or sits
// idle, no buffer (buffers come from a pool only when bytes are there to be read or written).
//
// The protocol itself is net/http's: requests are written by (*http.Request).Write and
// answers parsed by http.ReadResponse. What this package owns is the connection pool and its
// rules:
//   - a request's context is watched with context.AfterFunc: when it ends, the connection's
//     deadline is set in the past, which ends the write, the wait or the body read, and the
//     connection is closed; the error is the context's;
//   - a connection is reused only when the answer's body was read to its end, neither side
//     asked to close, and no byte is left over; before reuse a peek checks that the server
//     has not closed it while it was idle (on Linux);
//   - a request whose write failed on a reused connection is sent again on a new connection
//     when its body can be replayed (GetBody), as nothing of it can have been answered; one
//     whose answer did not come on a reused connection is sent again only when it is
//     idempotent (GET, HEAD, OPTIONS, TRACE, or an Idempotency-Key header), as net/http does;
//   - an answer that comes before the request is all sent is the request's answer (see
//     reqWriter), as with net/http, which reads while it writes.
//
// It takes only "http" URLs and no proxy, no Expect or Upgrade requests; the caller routes
// anything else to a net/http Transport (see CanTake).
package h1

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/http/httpguts"
)

// Transport is an http.RoundTripper for cleartext HTTP/1.1. Its zero value is not usable:
// make one with New. It is safe for concurrent use.
type Transport struct {
	dialer      net.Dialer
	maxIdle     int
	idleTimeout time.Duration

	mu   sync.Mutex
	idle map[string][]*conn // by host:port, most recently used last
}

// Options configure a Transport.
type Options struct {
	// MaxIdlePerHost is how many idle connections are kept per host (default 64).
	MaxIdlePerHost int
	// IdleTimeout closes a connection idle for longer, when it is next looked at
	// (default 90 s, as net/http's DefaultTransport).
	IdleTimeout time.Duration
	// DialTimeout bounds a connection's dial (default 30 s); the request's context does too.
	DialTimeout time.Duration
}

// New returns a Transport.
func New(o Options) *Transport {
	if o.MaxIdlePerHost <= 0 {
		o.MaxIdlePerHost = 64
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = 90 * time.Second
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 30 * time.Second
	}
	return &Transport{
		dialer:      net.Dialer{Timeout: o.DialTimeout, KeepAlive: 30 * time.Second},
		maxIdle:     o.MaxIdlePerHost,
		idleTimeout: o.IdleTimeout,
		idle:        map[string][]*conn{},
	}
}

// CanTake reports whether RoundTrip takes req: an "http" URL with a host, and no
// Expect or Upgrade header (which need net/http's handling of 100-continue and 101).
// Whether a proxy applies is the caller's to check.
func CanTake(req *http.Request) bool {
	return req.URL != nil && req.URL.Scheme == "http" && req.URL.Host != "" &&
		req.Header.Get("Expect") == "" && req.Header.Get("Upgrade") == ""
}

// conn is one connection. Only the request that holds it touches it, except the context's
// AfterFunc, which only sets its deadline.
type conn struct {
	t        *Transport
	key      string
	nc       net.Conn
	raw      syscall.RawConn // nil when the connection has none (then buffers are kept)
	br       *bufio.Reader   // only while an answer is read, or always when raw is nil
	headLeft int64           // what may still be read from the socket for the answer's head
	reused   bool
	idleFrom time.Time
}

var (
	readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4<<10) }}
	writers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 4<<10) }}
	// past is a deadline that has passed: setting it ends any read or write at once.
	past = time.Unix(1, 0)
)

// RoundTrip sends req and returns its answer, whose body must be read to its end or closed.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !CanTake(req) {
		closeBody(req)
		return nil, fmt.Errorf("h1: cannot send %s %s: only plain http without Expect or Upgrade", req.Method, req.URL.Redacted())
	}
	ctx := req.Context()
	key := hostPort(req)
	for try := 0; ; try++ {
		if err := ctx.Err(); err != nil {
			closeBody(req)
			return nil, err
		}
		c, err := t.get(ctx, key)
		if err != nil {
			closeBody(req)
			return nil, err
		}
		resp, retry, err := c.roundTrip(ctx, req)
		if err == nil {
			return resp, nil
		}
		if !retry || try > 0 || ctx.Err() != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, err
		}
		// A reused connection the server had closed: send again on a new one (retry holds
		// only for a replayable request: no body, or a new one from GetBody).
		if req.GetBody != nil {
			body, gerr := req.GetBody()
			if gerr != nil {
				return nil, err
			}
			req = req.Clone(ctx) // a shallow copy with the new body; the caller's is left as it was
			req.Body = body
		}
	}
}

// roundTrip does one attempt on c. retry says the request may be sent again on a new
// connection: c was reused, and either nothing reached the server or the request is
// idempotent and no answer came.
func (c *conn) roundTrip(ctx context.Context, req *http.Request) (*http.Response, bool, error) {
	stop := context.AfterFunc(ctx, func() { c.nc.SetDeadline(past) })
	bw := writers.Get().(*bufio.Writer)
	w := reqWriter{c: c, ctx: ctx}
	bw.Reset(&w)
	err := req.Write(bw) // closes req.Body
	if err == nil {
		err = bw.Flush()
	}
	bw.Reset(nil)
	writers.Put(bw)
	w.end()
	if err != nil {
		// A server may answer before it has read the whole request (a verifier that does not
		// read what it is sent, a 413) and close the connection: its answer is then in the
		// socket's receive queue, and is the request's answer, as net/http (which reads while
		// it writes) would return it.
		if ctx.Err() == nil && c.hasData() {
			if resp, rerr := c.readAnswer(req); rerr == nil {
				return c.hand(ctx, resp, stop, false), false, nil // the server closes this connection
			}
		}
		stop()
		c.close()
		return nil, c.reused && replayable(req), fmt.Errorf("writing the request: %w", err)
	}
	if err := c.waitReadable(); err != nil {
		stop()
		c.close()
		return nil, c.reused && idempotent(req), fmt.Errorf("reading the answer: %w", err)
	}
	resp, err := c.readAnswer(req)
	if err != nil {
		stop()
		retry := c.reused && idempotent(req) && c.br != nil && c.br.Buffered() == 0
		c.close()
		return nil, retry, fmt.Errorf("reading the answer: %w", err)
	}
	keep := !resp.Close && !req.Close && !httpguts.HeaderValuesContainsToken(req.Header["Connection"], "close") && resp.StatusCode != http.StatusSwitchingProtocols
	return c.hand(ctx, resp, stop, keep), false, nil
}

// MaxHeadBytes bounds an answer's status line and headers (as net/http's Transport's
// MaxResponseHeaderBytes does by default).
const MaxHeadBytes = 10 << 20

// Read reads from the socket, at most headLeft bytes while an answer's head is read.
func (c *conn) Read(p []byte) (int, error) {
	if c.headLeft <= 0 {
		return 0, errHeadTooLong
	}
	if int64(len(p)) > c.headLeft {
		p = p[:c.headLeft]
	}
	n, err := c.nc.Read(p)
	c.headLeft -= int64(n)
	return n, err
}

var errHeadTooLong = errors.New("h1: the answer's head is too long")

// hand gives resp to the caller: c goes back to the pool (if keep) or is closed once its body
// has been read to its end or closed, or at once when it has none.
func (c *conn) hand(ctx context.Context, resp *http.Response, stop func() bool, keep bool) *http.Response {
	if resp.Body == http.NoBody {
		c.done(stop, keep)
		return resp
	}
	resp.Body = &body{c: c, rc: resp.Body, stop: stop, keep: keep, ctx: ctx}
	return resp
}

// reqWriter writes a request to the socket. Past its first watchAfter bytes it writes in
// steps of at most watchEvery each and looks between them for an answer that has come
// before the request was all sent (a server that answers a large request early and stops
// reading it, without closing): the write then stops with errEarlyAnswer, and the answer is
// the request's, as net/http (which reads while it writes) would return it. Only the write
// deadline is touched here, so a context's end (which sets both deadlines) still ends the
// wait for the answer.
type reqWriter struct {
	c       *conn
	ctx     context.Context
	sent    int64
	watched bool
}

const (
	watchAfter = 64 << 10
	watchEvery = 50 * time.Millisecond
)

var errEarlyAnswer = errors.New("h1: the server answered before the request was all sent")

func (w *reqWriter) Write(p []byte) (int, error) {
	if w.sent+int64(len(p)) <= watchAfter || w.c.raw == nil {
		n, err := w.c.nc.Write(p)
		w.sent += int64(n)
		return n, err
	}
	w.watched = true
	done := 0
	for done < len(p) {
		if w.c.hasData() {
			return done, errEarlyAnswer
		}
		w.c.nc.SetWriteDeadline(time.Now().Add(watchEvery))
		n, err := w.c.nc.Write(p[done:])
		done += n
		w.sent += int64(n)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) && w.ctx.Err() == nil {
				continue
			}
			return done, err
		}
	}
	return done, nil
}

// ReadFrom copies a request's body to the socket in writes of up to 32 KiB (bufio.Writer hands
// the body over once its buffer is empty, as it would to the socket's own ReadFrom).
func (w *reqWriter) ReadFrom(r io.Reader) (int64, error) {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	return io.CopyBuffer(writeOnly{w}, r, *bp)
}

// writeOnly hides reqWriter's ReadFrom from io.CopyBuffer.
type writeOnly struct{ w *reqWriter }

func (o writeOnly) Write(p []byte) (int, error) { return o.w.Write(p) }

var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// end clears the write deadline the steps set, so that the connection can be reused.
func (w *reqWriter) end() {
	if w.watched {
		w.c.nc.SetWriteDeadline(time.Time{})
		if w.ctx.Err() != nil {
			w.c.nc.SetDeadline(past)
		}
	}
}

// readAnswer reads req's answer from c, past any informational answer (100 Continue, 103
// Early Hints).
func (c *conn) readAnswer(req *http.Request) (*http.Response, error) {
	if c.br == nil {
		c.br = readers.Get().(*bufio.Reader)
		c.br.Reset(c)
	}
	c.headLeft = MaxHeadBytes
	defer func() { c.headLeft = math.MaxInt64 }()
	for {
		resp, err := http.ReadResponse(c.br, req)
		if err != nil {
			if c.headLeft <= 0 {
				err = fmt.Errorf("the answer's head is over %d bytes", MaxHeadBytes)
			}
			return nil, err
		}
		if resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
			continue
		}
		return resp, nil
	}
}

// done ends a request on c: the connection goes back to the pool when keep holds, the
// context did not end it, and no byte is left unread; it is closed otherwise.
func (c *conn) done(stop func() bool, keep bool) {
	if !stop() || !keep || (c.br != nil && c.br.Buffered() > 0) {
		c.close()
		return
	}
	c.t.put(c)
}

func (c *conn) close() {
	c.nc.Close()
	c.releaseReader()
}

func (c *conn) releaseReader() {
	if c.br != nil && c.raw != nil {
		c.br.Reset(nil)
		readers.Put(c.br)
		c.br = nil
	}
}

// body is an answer's body: at its end, or when closed, the connection is given back or
// closed.
type body struct {
	mu   sync.Mutex
	c    *conn // nil once done
	rc   io.ReadCloser
	stop func() bool
	keep bool
	ctx  context.Context
	err  error // what Read returns once done
}

func (b *body) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.c == nil {
		return 0, b.err
	}
	n, err := b.rc.Read(p)
	switch {
	case err == io.EOF:
		b.finish(b.keep, io.EOF)
	case err != nil:
		if cerr := b.ctx.Err(); cerr != nil {
			err = cerr
		}
		b.finish(false, err)
	}
	return n, err
}

func (b *body) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.c != nil {
		b.finish(false, errors.New("h1: read on a closed body"))
	} else if b.err == io.EOF {
		b.err = errors.New("h1: read on a closed body")
	}
	return nil
}

func (b *body) finish(keep bool, err error) {
	c := b.c
	b.c, b.err = nil, err
	c.done(b.stop, keep)
}

// get returns an idle connection to key that is still open, or dials a new one.
func (t *Transport) get(ctx context.Context, key string) (*conn, error) {
	now := time.Now()
	for {
		t.mu.Lock()
		list := t.idle[key]
		if len(list) == 0 {
			t.mu.Unlock()
			break
		}
		c := list[len(list)-1]
		list[len(list)-1] = nil
		t.idle[key] = list[:len(list)-1]
		t.mu.Unlock()
		if now.Sub(c.idleFrom) > t.idleTimeout || !c.alive() {
			c.close()
			continue
		}
		c.reused = true
		return c, nil
	}
	nc, err := t.dialer.DialContext(ctx, "tcp", key)
	if err != nil {
		return nil, err
	}
	c := &conn{t: t, key: key, nc: nc, headLeft: math.MaxInt64}
	if sc, ok := nc.(syscall.Conn); ok && peekSupported {
		if raw, err := sc.SyscallConn(); err == nil {
			c.raw = raw
		}
	}
	return c, nil
}

// put keeps c for reuse, or closes it when its host has enough idle connections.
func (t *Transport) put(c *conn) {
	c.releaseReader()
	c.idleFrom = time.Now()
	t.mu.Lock()
	list := t.idle[c.key]
	if len(list) >= t.maxIdle {
		t.mu.Unlock()
		c.close()
		return
	}
	t.idle[c.key] = append(list, c)
	t.mu.Unlock()
}

// CloseIdleConnections closes every idle connection.
func (t *Transport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = map[string][]*conn{}
	t.mu.Unlock()
	for _, list := range idle {
		for _, c := range list {
			c.close()
		}
	}
}

// IdleConns is the number of idle connections kept, all hosts together.
func (t *Transport) IdleConns() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, list := range t.idle {
		n += len(list)
	}
	return n
}

// waitReadable waits until the connection has a byte to read (or the end of its stream, or
// an error), without a buffer.
func (c *conn) waitReadable() error {
	if c.raw == nil {
		return nil
	}
	var serr error
	err := c.raw.Read(func(fd uintptr) bool {
		_, ready, e := peek(fd)
		serr = e
		return ready
	})
	if err != nil {
		return err
	}
	return serr
}

// hasData reports whether a byte of an answer is waiting to be read, without waiting.
func (c *conn) hasData() bool {
	if c.raw == nil {
		return false
	}
	var n int
	c.raw.Read(func(fd uintptr) bool {
		n, _, _ = peek(fd)
		return true
	})
	return n > 0
}

// alive reports whether an idle connection is still open: nothing to read (the server sent
// neither an answer nor the end of the stream while it sat idle).
func (c *conn) alive() bool {
	if c.raw == nil {
		return true
	}
	ok := false
	err := c.raw.Read(func(fd uintptr) bool {
		_, ready, e := peek(fd)
		ok = !ready && e == nil
		return true
	})
	return err == nil && ok
}

func hostPort(req *http.Request) string {
	host, port := req.URL.Hostname(), req.URL.Port()
	if port == "" {
		port = "80"
	}
	return net.JoinHostPort(host, port)
}

// replayable reports whether req can be sent again: it has no body, or GetBody makes it anew.
func replayable(req *http.Request) bool {
	return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
}

// idempotent reports whether req may be sent again after it reached the server: it can be
// replayed, and its method is idempotent or it carries an idempotency key.
func idempotent(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return replayable(req)
	}
	_, key := req.Header["Idempotency-Key"]
	_, xkey := req.Header["X-Idempotency-Key"]
	return (key || xkey) && replayable(req)
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}
